"""`tmakit bench`: device time of tmakit's loads, pipelines, copies and reduce stores beside the
hardware peak and torch, each tmakit row verified in the same run (GPU).

A run goes in four steps: the flags checked against each other, every plan the run will time
built (and so checked), the timing on the GPU, and the table, JSON and plot."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from ..bench import hostcost, ncu, report, suites
from ..bench.baselines import TORCH_IN_PLACE
from ..bench.report import BenchRow
from ..bench.timing import MIN_SAMPLES
from ..config import SEED, LoadConfig, dtype_named
from ..plan import CopyOptions, LoadPlan, MulticastPlan
from ..runtime.launch import max_active_clusters
from .args import (
    COUNT,
    MOST,
    NON_NEGATIVE,
    OPTIONAL_SHAPE,
    SEED_SHAPE,
    CommandError,
    Subparsers,
    add_cluster,
    add_element_arguments,
    add_json,
    hopper_gpu,
    number,
    output_file,
    text_stream,
    write_json,
    writing,
)

SIZE_SWEEP_MIB = (1, 4, 16, 64, 256, 1024, 2048)
BENCH_CLUSTER_STAGES = 4
PLOT_TITLES = {
    "load": "tmakit loads vs torch",
    "copy": "tmakit.copy_ vs torch copy_",
    "transpose": "transposing tmakit.copy_ vs torch copy_",
    "reduce": "tmakit.reduce_into_ vs torch's in-place ops",
}
MAX_SAMPLES = 100_000  # graph replays per kernel: a median of 100,000 is as steady as one gets
MAX_BENCH_MIB = 2**20  # 1 TiB: more than a GPU's memory holds
SAMPLES = number(int, 1, MAX_SAMPLES)
BENCH_STAGES = number(int, 2, MOST)
MIB = number(float, 0, MAX_BENCH_MIB, " of MiB")
PLOT_PATH = output_file("plot.png")


def PERSISTENT_CLUSTERS(text: str) -> int | str:  # noqa: N802 - an argparse type, named as the others
    """ "auto" or a count of clusters >= 1."""
    return "auto" if text == "auto" else COUNT(text)


def _sizes(text: str) -> list[float]:
    """ "1,16,1024" -> MiB sizes ("" for none)."""
    return [MIB(item) for item in filter(None, (part.strip() for part in text.split(",")))]


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("bench", help="device time vs the hardware peak and torch, same run (GPU)")
    parser.add_argument(
        "--shape",
        type=OPTIONAL_SHAPE,
        default=SEED.shape,
        metavar="[BATCHx...]ROWSxCOLS",
        help=f"one shape to time besides --sizes (default {SEED_SHAPE}; '' for none)",
    )
    parser.add_argument(
        "--sizes",
        type=_sizes,
        default=list(SIZE_SWEEP_MIB),
        metavar="MIB,...",
        help=f"matrix sizes in MiB to sweep (default {','.join(map(str, SIZE_SWEEP_MIB))}; '' for none)",
    )
    add_element_arguments(parser)
    parser.add_argument(
        "--kernel",
        choices=("load", "copy", "transpose", "reduce"),
        default="load",
        help="load (default): tile loads against torch's sum and copy_; copy: tmakit.copy_ against "
        "torch's copy_; transpose: the same from a column-major source (x.t()) into a row-major "
        "destination; reduce: tmakit.reduce_into_ against torch's in-place op (see --reduce)",
    )
    parser.add_argument(
        "--reduce",
        action="append",
        metavar="OP[:DTYPE,...]",
        help="--kernel reduce: one op and the dtypes to time it on (repeatable; without dtypes, --dtype's), "
        f"e.g. add:fp32,bf16 or max:fp16; default {' '.join(suites.DEFAULT_REDUCE_CASES)}. GB/s count 3x "
        "the tensor's bytes (src read, dst read and written)",
    )
    parser.add_argument(
        "--copy",
        action="append",
        metavar="NAME=VALUE,...",
        help="one tmakit.copy_ (or reduce_into_) configuration for --kernel copy/transpose/reduce "
        "(repeatable; default: the "
        f"defaults), by the names of tmakit.CopyOptions: {', '.join(CopyOptions.names())}; "
        "e.g. tile=16x256,stages=8 or bulk",
    )
    parser.add_argument(
        "--specialised",
        action="store_true",
        help="--kernel copy/transpose: time each configuration also through a kernel compiled for the "
        "exact shape, beside the shape-generic one tmakit.copy_ uses",
    )
    parser.add_argument(
        "--pipeline",
        action="append",
        metavar="NAME=VALUE,...",
        help="a pipelined variant to time too (repeatable), by name: stages=N (required), "
        "consumer_warps=N, persistent, consumer=none|rowsum|copy, prefetch_tiles=N, prefetch_descriptor",
    )
    parser.add_argument(
        "--prefetch",
        type=NON_NEGATIVE,
        default=0,
        metavar="N",
        help="also time each --pipeline variant (default stages=4 and stages=7) prefetching N tiles ahead",
    )
    add_cluster(parser, "also time multicast loads against the same cluster without")
    parser.add_argument(
        "--stages",
        type=BENCH_STAGES,
        metavar="N",
        help=f"ring stages per CTA for --cluster (default {BENCH_CLUSTER_STAGES})",
    )
    parser.add_argument(
        "--persistent-clusters",
        type=PERSISTENT_CLUSTERS,
        metavar="N|auto",
        help="also time --cluster with N resident clusters walking the tiles (auto: as many as the GPU "
        "keeps resident)",
    )
    parser.add_argument(
        "--samples",
        type=SAMPLES,
        default=MIN_SAMPLES,
        metavar="N",
        help=f"graph replays timed per kernel; the median is reported (default {MIN_SAMPLES})",
    )
    parser.add_argument("--hot-l2", action="store_true", help="no rotation: time with the L2 warm")
    parser.add_argument("--ncu", action="store_true", help="cross-check the first shape with Nsight Compute")
    parser.add_argument("--commit", help="the git commit being measured (recorded in the JSON)")
    add_json(parser, "every sample and the context")
    parser.add_argument(
        "--plot",
        type=PLOT_PATH,
        metavar="PATH",
        help="write a PNG of GB/s against size here (needs the plot extra: matplotlib)",
    )
    parser.set_defaults(run=run)


def bench_shape(mebibytes: float, itemsize: int) -> tuple[int, int]:
    """A matrix of about `mebibytes`: 4096 columns up to 64 MiB, 16384 beyond (1 GiB fp16 is the
    32768 x 16384 of the reference numbers)."""
    cols = 4096 if mebibytes <= 64 else 16384
    return max(1, round(mebibytes * 2**20 / itemsize / cols)), cols


@dataclass(frozen=True)
class _Work:
    """Everything a bench run times, planned (and so checked) before a GPU is looked for."""

    plans: list[LoadPlan]  # a load, copy or pipeline run: one per shape
    options: list[CopyOptions]  # --copy's configurations
    reduce_cases: list[suites.ReduceCase]
    reduce_plans: list[tuple[suites.ReduceCase, LoadPlan]]  # every reduce and size of a reduce run
    variants: list[suites.PipelineVariant]
    cluster_stages: int


def _shapes(args: argparse.Namespace, itemsize: int) -> list[tuple[int, ...]]:
    """--shape and a matrix of each --sizes, of elements of `itemsize` bytes."""
    return [*([args.shape] if args.shape else []), *(bench_shape(size, itemsize) for size in args.sizes)]


def _copying(args: argparse.Namespace) -> bool:
    return args.kernel in ("copy", "transpose")


def _check_flags(args: argparse.Namespace) -> None:
    """The flags that configure another --kernel, or need --cluster, refused."""
    copying, reducing = _copying(args), args.kernel == "reduce"
    if args.copy and not (copying or reducing):
        raise CommandError("--copy configures --kernel copy, transpose or reduce")
    if args.specialised and not copying:
        raise CommandError("--specialised configures --kernel copy or transpose")
    if args.reduce and not reducing:
        raise CommandError("--reduce configures --kernel reduce")
    if reducing and (args.pipeline or args.prefetch or args.cluster or args.ncu):
        raise CommandError(
            "--kernel reduce times reduce stores only: no --pipeline, --prefetch, --cluster, --ncu"
        )
    if (args.stages is not None or args.persistent_clusters is not None) and not args.cluster:
        raise CommandError("--stages and --persistent-clusters set the ring of --cluster: give a cluster too")


def _plan_work(args: argparse.Namespace) -> _Work:
    """Every plan the run will time, built now: a wrong flag is refused before anything runs."""
    element = dtype_named(args.dtype)
    shapes = _shapes(args, element.nbytes)
    if not shapes:
        raise CommandError("nothing to time: give --shape or --sizes")
    plans = [LoadPlan(LoadConfig(shape, element.name, args.tile, args.swizzle)) for shape in shapes]
    _check_flags(args)
    reducing = args.kernel == "reduce"
    cluster_stages = args.stages or BENCH_CLUSTER_STAGES
    options = [CopyOptions.parse(text) for text in args.copy or ["default"]]
    reduce_cases = [
        case
        for text in (args.reduce or suites.DEFAULT_REDUCE_CASES if reducing else [])
        for case in suites.ReduceCase.parse(text, element.name)
    ]
    reduce_plans = [  # (case, plan) for every reduce and size, each size of the case's dtype
        (case, LoadPlan(LoadConfig(shape, case.dtype, args.tile, args.swizzle)))
        for case in reduce_cases
        for shape in _shapes(args, dtype_named(case.dtype).nbytes)
    ]
    for case, plan in reduce_plans:  # every reduce the run will time, planned now
        for option in options:
            suites.check_reduce_plan(case, plan, option)
    variants = [suites.PipelineVariant.parse(text) for text in args.pipeline or []]
    if args.prefetch and not variants:
        variants = [suites.PipelineVariant(stages=4), suites.PipelineVariant(stages=7)]
    if args.prefetch:  # each variant beside itself with tile + descriptor prefetch
        variants += [
            replace(v, prefetch_tiles=args.prefetch, prefetch_descriptor=True)
            for v in variants
            if not v.prefetch_tiles
        ]
    for plan in plans:  # every plan the run will build, checked now
        for variant in variants:
            variant.pipeline(plan)
        if args.cluster:
            for multicast in (True, False):
                walk = args.persistent_clusters if isinstance(args.persistent_clusters, int) else None
                MulticastPlan(plan, args.cluster, multicast, cluster_stages, walk)
    return _Work(plans, options, reduce_cases, reduce_plans, variants, cluster_stages)


def _time(
    args: argparse.Namespace, work: _Work, gpu_name: str, l2_bytes: int, console: Console
) -> list[BenchRow]:
    """Every row the run times, a progress bar advancing per plan."""
    copying, reducing = _copying(args), args.kernel == "reduce"
    rows = []
    with Progress(console=console) as progress:
        total = len(work.reduce_plans) if reducing else len(work.plans)
        task = progress.add_task(f"timing on {gpu_name}", total=total)
        for case, plan in work.reduce_plans:
            rows += suites.bench_reduce(plan, case.op, work.options, l2_bytes, args.hot_l2, args.samples)
            progress.advance(task)
        for plan in [] if reducing else work.plans:
            if copying:
                rows += suites.bench_copy(
                    plan,
                    args.kernel == "transpose",
                    work.options,
                    l2_bytes,
                    args.hot_l2,
                    args.samples,
                    args.specialised,
                )
            else:
                rows += suites.bench_size(plan, l2_bytes, args.hot_l2, args.samples)
            if work.variants:
                rows += suites.bench_pipelines(plan, work.variants, l2_bytes, args.hot_l2, args.samples)
            if args.cluster:
                walk = args.persistent_clusters
                if walk == "auto":
                    walk = max_active_clusters(args.cluster[0] * args.cluster[1])
                rows += suites.bench_multicast(
                    plan, args.cluster, work.cluster_stages, l2_bytes, args.hot_l2, args.samples, walk
                )
            progress.advance(task)
    return rows


def _host_cost(args: argparse.Namespace, rows: list[BenchRow]) -> dict:
    """The host's cost per call, measured, and set on every tmakit row it applies to."""
    host = hostcost.measure_host_overhead()
    if _copying(args):
        host.update(hostcost.measure_copy_host_cost(args.kernel == "transpose"))
    copy_prefix = "tmakit_copy_transpose_" if args.kernel == "transpose" else "tmakit_copy_"
    for row in rows:  # the compiled-call cost applies to every tmakit kernel (same launch path)
        if row.kernel.startswith("tmakit.copy_"):  # the public call, through TVM-FFI
            row.host_us = host[f"{copy_prefix}{'bulk_' if row.notes.get('bulk') else ''}call_us"]
        elif row.kernel.startswith("tmakit") and not row.kernel.startswith("tmakit.reduce_into_"):
            row.host_us = host["plain_prepared_tensors_us"]  # (a reduce's call: not measured)
    return host


def _baselines(kernel: str, reduce_cases: list[suites.ReduceCase]) -> list[str]:
    """The torch rows each tmakit row is compared with, graph-timed and on a stream."""
    return {
        "copy": ["torch copy_", f"torch copy_ {suites.STREAM_TIMED}"],
        "transpose": ["torch copy_ (transpose)", f"torch copy_ (transpose) {suites.STREAM_TIMED}"],
        "reduce": [
            name
            for op in dict.fromkeys(case.op for case in reduce_cases)
            for name in (TORCH_IN_PLACE[op][0], f"{TORCH_IN_PLACE[op][0]} {suites.STREAM_TIMED}")
        ],
    }.get(kernel, ["torch copy_", "torch sum"])


def _show(
    args: argparse.Namespace,
    rows: list[BenchRow],
    context: dict,
    baselines: list[str],
    title: str,
    console: Console,
) -> None:
    table = Table(title=title)
    for column in [*report.TABLE_HEADER, *(f"x {b}" for b in baselines), "verified in this run"]:
        table.add_column(column)
    for cells in report.table_rows(rows, context["peak_bandwidth"], baselines):
        table.add_row(*cells)
    console.print(table)
    console.print(f"host cost per call (us): {context['host_launch']}")
    if args.ncu:
        console.print(f"Nsight Compute: {context['ncu']}")


def run(args: argparse.Namespace) -> int:
    work = _plan_work(args)
    if args.plot:
        try:
            report.check_plotting()
        except ImportError as error:
            raise CommandError(f"--plot: {error}") from None
    gpu_name = hopper_gpu("bench")

    context = report.device_context(args.commit)
    console = Console(file=text_stream(args))
    rows = _time(args, work, gpu_name, context["l2_bytes"], console)
    context["host_launch"] = _host_cost(args, rows)
    if args.ncu:
        first = work.plans[0]
        context["ncu"] = {"x".join(map(str, first.config.shape)): ncu.ncu_kernel_times(first)}
    baselines = _baselines(args.kernel, work.reduce_cases)
    cache = "L2 hot" if args.hot_l2 else "L2 cold: inputs rotated over > 4x L2"
    title = (
        f"device time on {gpu_name}, {cache}, median of {args.samples} graph replays "
        f"({suites.STREAM_TIMED}: eager launches on a stream)"
    )
    _show(args, rows, context, baselines, title, console)
    if args.json:
        what = f"tmakit bench --kernel {args.kernel}: device time, {cache}, every tmakit row verified"
        write_json(
            args.json, report.report(rows, {**context, "hot_l2": args.hot_l2}, baselines, args.kernel, what)
        )
    if args.plot:
        title = f"{PLOT_TITLES[args.kernel]} on {gpu_name} ({cache})"
        with writing(args.plot, "--plot"):
            report.plot(rows, args.plot, context["peak_bandwidth"], title)
    return 0
