"""The `tmakit` command: parse, call the library, print."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from .bench import hostcost, ncu, report, suites
from .bench.timing import MIN_SAMPLES
from .check.isolate import run_isolated
from .check.run import verify_multicast_load, verify_pipelined_load
from .check.sweep import summarize, sweep_configs
from .config import SEED, LoadConfig, dtype_named, padded_strides, parse_extents
from .demo import run_demo
from .errors import TmaConfigError
from .explain import explain, to_json, to_text
from .model.schedule import replay, seed_schedule
from .plan import CopyOptions, LoadPlan, MulticastPlan, PipelinePlan
from .runtime.device import find_hopper_gpu

SEED_SHAPE = "x".join(map(str, SEED.shape))
SEED_TILE = "x".join(map(str, SEED.tile))


def _add_config_arguments(parser: argparse.ArgumentParser) -> None:
    default_shape, default_tile = SEED_SHAPE, SEED_TILE
    parser.add_argument(
        "--shape", default=default_shape, help=f"[BATCHx...]ROWSxCOLS, rank 2-5 (default {default_shape})"
    )
    parser.add_argument("--dtype", default=SEED.dtype, help=f"element type (default {SEED.dtype})")
    parser.add_argument("--tile", default=default_tile, help=f"ROWSxCOLS (default {default_tile})")
    parser.add_argument("--swizzle", type=int, default=0, help="TMA swizzle in bytes: 0, 32, 64, 128")
    parser.add_argument(
        "--layout", choices=("row", "col"), default="row", help="contiguous dim: columns (row) or rows (col)"
    )
    parser.add_argument(
        "--pad", action="store_true", help="pad the contiguous dim to 16 bytes (tmakit.padded_empty)"
    )
    parser.add_argument("--highlight", default="1,2", help="tile ROW_BLOCK,COLUMN_TILE to mark (default 1,2)")
    parser.add_argument(
        "--cluster", help="CTAs per cluster sharing every tile by multicast: 1x2, 2x1, 2x2, 1x4"
    )


def _plan_from(args: argparse.Namespace) -> LoadPlan:
    element = dtype_named(args.dtype)
    shape = parse_extents(args.shape, "shape", rank=None)
    config = LoadConfig(
        shape=shape,
        dtype=args.dtype,
        tile=parse_extents(args.tile, "tile"),
        swizzle=args.swizzle,
        major=args.layout,
        strides=padded_strides(shape, element.nbytes, args.layout) if args.pad else None,
    )
    return LoadPlan(config)


def _cmd_plan(args: argparse.Namespace) -> int:
    plan = _plan_from(args)
    print(plan.summary())
    if args.cluster:
        print(MulticastPlan(plan, parse_extents(args.cluster, "cluster")).summary())
    print()
    print(plan.diagram(parse_extents(args.highlight, "highlight")))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    return 0 if run_demo(_plan_from(args), parse_extents(args.highlight, "highlight")) else 1


def _cmd_verify(args: argparse.Namespace) -> int:
    gpu_name, why = find_hopper_gpu()
    if gpu_name is None:
        print(f"tmakit verify needs a Hopper GPU: {why}", file=sys.stderr)
        return 2
    if args.cluster:  # every CTA of every cluster, multicast and the baseline
        ok = True
        for multicast in (True, False):
            cluster = parse_extents(args.cluster, "cluster")
            plan = MulticastPlan(_plan_from(args), cluster, multicast, stages=args.stages)
            for rank, verdict in enumerate(verify_multicast_load(plan)):
                ok &= verdict.ok
                print(f"{'multicast' if multicast else 'baseline '} CTA {rank}: {verdict}")
        return 0 if ok else 1
    if args.prefetch or args.stages > 1:  # the pipelined load, store-back verified, guarded
        pipeline = PipelinePlan(
            _plan_from(args), stages=max(args.stages, 1), prefetch_tiles=args.prefetch,
            prefetch_descriptor=args.prefetch > 0,
        )  # fmt: skip
        print(pipeline.summary())
        verdict = verify_pipelined_load(pipeline, "store", hang_guard=True)
        print(verdict)
        return 0 if verdict.ok else 1
    configs = sweep_configs(args.sweep, args.seed) if args.sweep else [_plan_from(args).config]
    console = Console()
    with Progress(console=console) as progress:
        task = progress.add_task(f"verifying on {gpu_name}", total=len(configs))

        def report(config: LoadConfig, result: dict) -> None:
            progress.advance(task)
            if result["status"] != "ok":
                progress.console.print(f"[red]{result['status']}[/red] {config}: {result}")

        results = run_isolated(configs, args.timeout, report)
    summary = summarize(configs, results, args.seed)
    table = Table(title=f"{len(configs)} configurations on {gpu_name}")
    for column in ("cell (dtype/swizzle/layout)", "ok", "mismatch", "hang", "error"):
        table.add_column(column)
    for cell, counts in summary["cells"].items():
        table.add_row(cell, *(str(counts.get(k, 0)) for k in ("ok", "mismatch", "hang", "error")))
    console.print(table)
    console.print(
        f"ok {summary['ok']}, mismatches {summary['mismatches']}, hangs {summary['hangs']}, "
        f"errors {summary['errors']}; partial tiles in {summary['with_partial_tiles']}, "
        f"prime or unit extent in {summary['with_prime_or_unit_extent']}; "
        f"cells {len(summary['cells'])}/{summary['cells_expected']}"
    )
    if len(configs) == 1:
        console.print(results[0])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
        console.print(f"wrote {args.json}")
    return 0 if summary["ok"] == len(configs) else 1


MISTAKES = {
    "none": {},
    "expect-more": {"expected_tx_bytes_delta": 8},  # the seed's 32776 (tile + barrier) as the tx count
    "expect-less": {"expected_tx_bytes_delta": -16},
    "skip-arrival": {"skip_arrival": True},
    "same-parity": {"parity_mistake": True},
}


def _cmd_explain(args: argparse.Namespace) -> int:
    load = _plan_from(args)
    pipeline = PipelinePlan(load, stages=args.stages, consumer_warps=args.consumer_warps)
    multicast = MulticastPlan(load, parse_extents(args.cluster, "cluster")) if args.cluster else None
    report = explain(pipeline, parse_extents(args.highlight, "highlight"), multicast)
    print(to_json(report) if args.json else to_text(report))
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    plan = _plan_from(args)
    mistake = dict(MISTAKES[args.mistake])
    delta = mistake.pop("expected_tx_bytes_delta", 0)
    if delta:
        mistake["expected_tx_bytes"] = plan.expected_tx_bytes + delta
    report = replay(seed_schedule(plan, **mistake))
    print(f"schedule of block 0 ({plan.tiles_per_block} tiles), replayed against the CPU mbarrier model:")
    print(report.describe())
    return 0 if report.ok else 1


SIZE_SWEEP_MIB = (1, 4, 16, 64, 256, 1024, 2048)


def bench_shape(mebibytes: float, itemsize: int) -> tuple[int, int]:
    """A matrix of about `mebibytes`: 4096 columns up to 64 MiB, 16384 beyond (1 GiB fp16 is the
    32768 x 16384 of the reference numbers)."""
    cols = 4096 if mebibytes <= 64 else 16384
    return max(1, round(mebibytes * 2**20 / itemsize / cols)), cols


def _cmd_bench(args: argparse.Namespace) -> int:
    gpu_name, why = find_hopper_gpu()
    if gpu_name is None:
        print(f"tmakit bench needs a Hopper GPU: {why}", file=sys.stderr)
        return 2
    element = dtype_named(args.dtype)
    tile = parse_extents(args.tile, "tile")
    shapes = [parse_extents(args.shape, "shape", rank=None)] if args.shape else []
    if args.sizes:
        shapes += [bench_shape(float(size), element.nbytes) for size in args.sizes.split(",")]
    plans = [LoadPlan(LoadConfig(shape, args.dtype, tile, args.swizzle)) for shape in shapes]
    context = report.device_context(args.commit)
    console = Console()
    rows = []
    with Progress(console=console) as progress:
        task = progress.add_task(f"timing on {gpu_name}", total=len(plans))
        for plan in plans:
            if args.kernel in ("copy", "transpose"):
                options = [CopyOptions.parse(text) for text in args.copy or ["default"]]
                rows += suites.bench_copy(
                    plan, args.kernel == "transpose", options, context["l2_bytes"], args.hot_l2, args.samples
                )
            else:
                rows += suites.bench_size(plan, context["l2_bytes"], args.hot_l2, args.samples)
            pipeline_variants = args.pipeline
            if args.prefetch and not pipeline_variants:
                pipeline_variants = ["stages=4", "stages=7"]
            if pipeline_variants:
                variants = [suites.PipelineVariant.parse(text) for text in pipeline_variants]
                if args.prefetch:  # each variant beside itself with tile + descriptor prefetch
                    variants += [
                        replace(v, prefetch_tiles=args.prefetch, prefetch_descriptor=True)
                        for v in variants
                        if not v.prefetch_tiles
                    ]
                rows += suites.bench_pipelines(plan, variants, context["l2_bytes"], args.hot_l2, args.samples)
            if args.cluster:
                cluster = parse_extents(args.cluster, "cluster")
                rows += suites.bench_multicast(
                    plan, cluster, args.stages, context["l2_bytes"], args.hot_l2, args.samples
                )
            progress.advance(task)
    context["host_launch"] = hostcost.measure_host_overhead()
    if args.kernel in ("copy", "transpose"):
        context["host_launch"].update(hostcost.measure_copy_host_cost(args.kernel == "transpose"))
    host = context["host_launch"]
    copy_prefix = "tmakit_copy_transpose_" if args.kernel == "transpose" else "tmakit_copy_"
    for row in rows:  # the compiled-call cost applies to every tmakit kernel (same launch path)
        if row.kernel.startswith("tmakit.copy_"):  # the public call, through TVM-FFI
            row.host_us = host[f"{copy_prefix}{'bulk_' if row.notes.get('bulk') else ''}call_us"]
        elif row.kernel.startswith("tmakit"):
            row.host_us = host["plain_prepared_tensors_us"]
    if args.ncu:
        context["ncu"] = {"x".join(map(str, plans[0].config.shape)): ncu.ncu_kernel_times(plans[0])}
    baselines = {
        "copy": ["torch copy_", f"torch copy_ {suites.STREAM_TIMED}"],
        "transpose": ["torch copy_ (transpose)", f"torch copy_ (transpose) {suites.STREAM_TIMED}"],
    }.get(args.kernel, ["torch copy_", "torch sum"])
    cache = "L2 hot" if args.hot_l2 else "L2 cold: inputs rotated over > 4x L2"
    table = Table(
        title=f"device time on {gpu_name}, {cache}, median of {args.samples} graph replays "
        f"({suites.STREAM_TIMED}: eager launches on a stream)"
    )
    for column in [*report.TABLE_HEADER, *(f"x {b}" for b in baselines), "verified in this run"]:
        table.add_column(column)
    for cells in report.table_rows(rows, context["peak_bandwidth"], baselines):
        table.add_row(*cells)
    console.print(table)
    console.print(f"host cost per call (us): {context['host_launch']}")
    if args.ncu:
        console.print(f"Nsight Compute: {context['ncu']}")
    if args.json:
        with open(args.json, "w") as f:
            what = f"tmakit bench --kernel {args.kernel}: device time, {cache}, every tmakit row verified"
            study = report.report(rows, {**context, "hot_l2": args.hot_l2}, baselines, args.kernel, what)
            json.dump(study, f, indent=1)
        console.print(f"wrote {args.json}")
    if args.plot:
        report.plot(rows, args.plot, context["peak_bandwidth"], f"tmakit vs torch on {gpu_name} ({cache})")
        console.print(f"wrote {args.plot}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tmakit", description="TMA tile loads in CuTe DSL.")
    commands = parser.add_subparsers(dest="command", required=True)
    plan_cmd = commands.add_parser("plan", help="the seed's arithmetic for a configuration")
    _add_config_arguments(plan_cmd)
    plan_cmd.set_defaults(run=_cmd_plan)
    demo_cmd = commands.add_parser(
        "demo", help="run and verify the seed's kernel (or compile it, without a GPU)"
    )
    _add_config_arguments(demo_cmd)
    demo_cmd.set_defaults(run=_cmd_demo)
    verify_cmd = commands.add_parser("verify", help="verify loads on the GPU: one configuration or a sweep")
    _add_config_arguments(verify_cmd)
    verify_cmd.add_argument("--sweep", type=int, default=0, help="N random valid configurations")
    verify_cmd.add_argument("--seed", type=int, default=0, help="random seed of the sweep")
    verify_cmd.add_argument("--timeout", type=float, default=60.0, help="seconds per configuration")
    verify_cmd.add_argument("--json", help="write the report here")
    verify_cmd.add_argument(
        "--stages", type=int, default=1, help="> 1: verify the N-stage pipelined load (or multicast ring)"
    )
    verify_cmd.add_argument(
        "--prefetch",
        type=int,
        default=0,
        help="pipelined load prefetching N tiles ahead into L2 (+ descriptor)",
    )
    verify_cmd.set_defaults(run=_cmd_verify)
    explain_cmd = commands.add_parser(
        "explain", help="the seed's three questions answered from the real CuTe objects (no GPU)"
    )
    _add_config_arguments(explain_cmd)
    explain_cmd.add_argument("--stages", type=int, default=1, help="ring stages (1: the seed's kernel)")
    explain_cmd.add_argument("--consumer-warps", type=int, default=1)
    explain_cmd.add_argument("--json", action="store_true", help="machine-readable output")
    explain_cmd.set_defaults(run=_cmd_explain)
    check_cmd = commands.add_parser(
        "check", help="replay a block's barrier schedule on the CPU model: hangs, races, parity"
    )
    _add_config_arguments(check_cmd)
    check_cmd.add_argument(
        "--mistake", choices=list(MISTAKES), default="none", help="inject a schedule mistake to see it caught"
    )
    check_cmd.set_defaults(run=_cmd_check)
    bench_cmd = commands.add_parser("bench", help="device time vs the hardware peak and torch, same run")
    bench_cmd.add_argument("--shape", default=SEED_SHAPE, help="one extra shape (default the seed's)")
    bench_cmd.add_argument(
        "--sizes", default=",".join(map(str, SIZE_SWEEP_MIB)), help="MiB sizes to sweep ('' for none)"
    )
    bench_cmd.add_argument("--dtype", default=SEED.dtype)
    bench_cmd.add_argument("--tile", default=SEED_TILE)
    bench_cmd.add_argument("--swizzle", type=int, default=0)
    bench_cmd.add_argument("--samples", type=int, default=MIN_SAMPLES)
    bench_cmd.add_argument(
        "--pipeline",
        action="append",
        metavar="FIELD=VALUE,...",
        help="a pipelined variant to time too (repeatable), by name: stages=N (required), consumer_warps=N, "
        "persistent, consumer=none|rowsum|copy, prefetch_tiles=N, prefetch_descriptor",
    )
    bench_cmd.add_argument(
        "--kernel",
        choices=("load", "copy", "transpose"),
        default="load",
        help="copy: time tmakit.copy_ against torch copy_ instead of loads; transpose: the same with a "
        "column-major source (x.t()) into a row-major destination",
    )
    bench_cmd.add_argument(
        "--copy",
        action="append",
        metavar="FIELD=VALUE,...",
        help="a tmakit.copy_ configuration for --kernel copy/transpose (repeatable; default: the defaults), "
        f"by the names of tmakit.CopyOptions: {', '.join(CopyOptions.names())}; "
        "e.g. tile=16x256,stages=8 or bulk",
    )
    bench_cmd.add_argument("--hot-l2", action="store_true", help="no rotation: time with the L2 warm")
    bench_cmd.add_argument(
        "--cluster", help="also time multicast loads against the same cluster without: 1x2, 2x1, 2x2, 1x4"
    )
    bench_cmd.add_argument(
        "--stages", type=int, default=4, help="ring stages per CTA for --cluster (default 4)"
    )
    bench_cmd.add_argument(
        "--prefetch", type=int, default=0, help="also time each --pipeline variant prefetching N tiles ahead"
    )
    bench_cmd.add_argument(
        "--ncu", action="store_true", help="cross-check the first shape with Nsight Compute"
    )
    bench_cmd.add_argument("--commit", help="git commit being measured (recorded in the JSON)")
    bench_cmd.add_argument("--json", help="write every sample and the context here")
    bench_cmd.add_argument("--plot", help="write a PNG of GB/s against size here")
    bench_cmd.set_defaults(run=_cmd_bench)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (TmaConfigError, ValueError) as error:
        print(f"tmakit: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
