"""`tmakit bench`: device time of tmakit's loads, pipelines, copies and reduce stores beside the
hardware peak and torch, each tmakit row verified in the same run (GPU).

A run goes in four steps: the flags checked against each other, every plan the run will time
built (and so checked), the timing on the GPU, and the table, JSON and plot."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from ..bench import hostcost, ncu, report, suites
from ..bench.report import BenchRow
from ..bench.timing import MIN_SAMPLES
from ..config import SEED
from ..families import CLUSTER_STAGES, Family, families
from ..plan import CopyOptions
from .args import (
    COUNT,
    MOST,
    NON_NEGATIVE,
    OPTIONAL_SHAPE,
    SEED_SHAPE,
    SHAPE_METAVAR,
    CommandError,
    add_cluster,
    add_count,
    add_element_arguments,
    add_json,
    add_value,
    hopper_gpu,
    number,
    output_file,
    text_stream,
    write_json,
    writing,
)

SIZE_SWEEP_MIB = (1, 4, 16, 64, 256, 1024, 2048)
BENCH_CLUSTER_STAGES = CLUSTER_STAGES
PLOT_TITLES = {name: family.plot_title for name, family in families().items()}
# The options one family or another reads (`Family.reads`); the rest configure every family.
OWN_FLAGS = ("copy", "specialised", "reduce", "pipeline", "prefetch", "cluster", "ncu", "only")
MAX_SAMPLES = 100_000  # graph replays per kernel: a median of 100,000 is as steady as one gets
MAX_BENCH_MIB = 2**20  # 1 TiB: more than a GPU's memory holds
# A run plans (and times) each size by each --copy, --pipeline and --reduce case: these bound each
# list, so that the plans the run builds before it looks for a GPU take under a second.
MAX_BENCH_SIZES, MAX_BENCH_CASES = 32, 16
REPEATED = ("copy", "pipeline")  # the repeatable flags (--reduce is bounded by its cases)
SAMPLES = number(int, 1, MAX_SAMPLES)
BENCH_STAGES = number(int, 2, MOST)
MIB = number(float, 0, MAX_BENCH_MIB, " of MiB")
PLOT_PATH = output_file("plot.png")


def PERSISTENT_CLUSTERS(text: str) -> int | str:  # noqa: N802 - an argparse type, named as the others
    """ "auto" or a count of clusters >= 1."""
    return "auto" if text == "auto" else COUNT(text)


def _sizes(text: str) -> list[float]:
    """ "1,16,1024" -> MiB sizes ("" for none), at most `MAX_BENCH_SIZES`."""
    items = [part for part in (part.strip() for part in text.split(",")) if part]
    if len(items) > MAX_BENCH_SIZES:
        raise argparse.ArgumentTypeError(f"{len(items)} sizes; at most {MAX_BENCH_SIZES} in one run")
    return [MIB(item) for item in items]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    shape_help = f"one shape to time besides --sizes (default {SEED_SHAPE}; '' for none)"
    add_value(parser, "--shape", OPTIONAL_SHAPE, SHAPE_METAVAR, shape_help, SEED.shape)
    sizes_help = f"matrix sizes in MiB to sweep (default {','.join(map(str, SIZE_SWEEP_MIB))}; '' for none)"
    add_value(parser, "--sizes", _sizes, "MIB,...", sizes_help, list(SIZE_SWEEP_MIB))
    add_element_arguments(parser)
    parser.add_argument(
        "--kernel",
        choices=tuple(families()),
        default="load",
        help="the kernel family to time (default load): "
        + "; ".join(f"{name}: {family.summary}" for name, family in families().items()),
    )
    parser.add_argument(
        "--only",
        metavar="PREFIX,...",
        help="a study of named parts (cluster-dot, im2col, dropin, ...): time only the parts whose names "
        "start so",
    )
    parser.add_argument(
        "--reduce",
        action="append",
        metavar="OP[:DTYPE,...]",
        help="--kernel reduce: one op and the dtypes to time it on (repeatable; without dtypes, --dtype's), "
        "e.g. add:fp32,bf16 or max:fp16 (torch's sum, amax, amin too); "
        f"default {' '.join(suites.DEFAULT_REDUCE_CASES)}. GB/s count 3x "
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
    add_count(
        parser,
        "--prefetch",
        NON_NEGATIVE,
        "also time each --pipeline variant (default stages=4 and stages=7) prefetching N tiles ahead",
        default=0,
    )
    add_cluster(parser, "also time multicast loads against the same cluster without")
    add_count(
        parser,
        "--stages",
        BENCH_STAGES,
        f"ring stages per CTA for --cluster (default {BENCH_CLUSTER_STAGES})",
    )
    parser.add_argument(
        "--persistent-clusters",
        type=PERSISTENT_CLUSTERS,
        metavar="N|auto",
        help="also time --cluster with N resident clusters walking the tiles (auto: as many as the GPU "
        "keeps resident)",
    )
    add_count(
        parser,
        "--samples",
        SAMPLES,
        f"graph replays timed per kernel; the median is reported (default {MIN_SAMPLES})",
        default=MIN_SAMPLES,
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


def _reduce_cases(texts: list[str]) -> int:
    """The (op, dtype) cases --reduce's `texts` name: each dtype after its op's ':', or one."""
    return sum(max(1, sum(1 for name in text.partition(":")[2].split(",") if name.strip())) for text in texts)


def _check_flags(args: argparse.Namespace, family: Family) -> None:
    """The flags that configure another --kernel, or need --cluster, refused; a list longer than
    a run takes, refused before anything is planned."""
    for dest in REPEATED:
        if len(getattr(args, dest) or ()) > MAX_BENCH_CASES:
            given = len(getattr(args, dest))
            raise CommandError(f"--{dest} is given {given} times; at most {MAX_BENCH_CASES} in one run")
    cases = _reduce_cases(args.reduce or [])
    if cases > MAX_BENCH_CASES:
        raise CommandError(f"--reduce names {cases} (op, dtype) cases; at most {MAX_BENCH_CASES} in one run")
    if args.kernel == "reduce" and (args.pipeline or args.prefetch or args.cluster or args.ncu):
        raise CommandError(
            "--kernel reduce times reduce stores only: no --pipeline, --prefetch, --cluster, --ncu"
        )
    for dest in OWN_FLAGS:
        if getattr(args, dest) and dest not in family.reads:
            readers = [name for name, other in families().items() if dest in other.reads]
            kernels = ", ".join(readers[:-1]) + f" or {readers[-1]}" if len(readers) > 1 else readers[0]
            raise CommandError(f"--{dest.replace('_', '-')} configures --kernel {kernels}")
    if (args.stages is not None or args.persistent_clusters is not None) and not (
        args.cluster or args.kernel == "multicast"
    ):
        raise CommandError("--stages and --persistent-clusters set the ring of --cluster: give a cluster too")


def _plan_work(args: argparse.Namespace, family: Family) -> list:
    """Every plan the run will time, built now: a wrong flag is refused before anything runs."""
    _check_flags(args, family)
    work = list(family.plans(args))
    if not work:
        raise CommandError("nothing to time: give --shape or --sizes" if "only" not in family.reads
                           else "nothing to time: --only chooses none of the study's parts")  # fmt: skip
    return work


def _time(
    args: argparse.Namespace, family: Family, work: list, gpu_name: str, l2_bytes: int, console: Console
) -> list[tuple[object, list[BenchRow]]]:
    """Each plan with the rows timed on it, a progress bar advancing per plan."""
    results = []
    with Progress(console=console) as progress:
        task = progress.add_task(f"timing on {gpu_name}", total=len(work))
        for plan in work:
            results.append((plan, family.bench(plan, args, l2_bytes)))
            progress.advance(task)
    return results


def _host_cost(args: argparse.Namespace, rows: list[BenchRow]) -> dict:
    """The host's cost per call, measured, and set on every tmakit row it applies to."""
    host = hostcost.measure_host_overhead()
    if args.kernel in ("copy", "transpose"):
        host.update(hostcost.measure_copy_host_cost(args.kernel == "transpose"))
    copy_prefix = "tmakit_copy_transpose_" if args.kernel == "transpose" else "tmakit_copy_"
    for row in rows:  # the compiled-call cost applies to every tmakit kernel (same launch path)
        if "path" in row.notes:  # a drop-in row: its eager twin is timed with the host included
            continue
        if row.kernel.startswith("tmakit.copy_"):  # the public call, through TVM-FFI
            row.host_us = host[f"{copy_prefix}{'bulk_' if row.notes.get('bulk') else ''}call_us"]
        elif row.kernel.startswith("tmakit") and not row.kernel.startswith("tmakit.reduce_into_"):
            row.host_us = host["plain_prepared_tensors_us"]  # (a reduce's call: not measured)
    return host


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
    family = families()[args.kernel]
    work = _plan_work(args, family)
    if args.plot:
        try:
            report.check_plotting()
        except ImportError as error:
            raise CommandError(f"--plot: {error}") from None
    gpu_name = hopper_gpu("bench")

    context = report.device_context(args.commit)
    console = Console(file=text_stream(args))
    results = _time(args, family, work, gpu_name, context["l2_bytes"], console)
    rows = [row for _, plan_rows in results for row in plan_rows]
    context["host_launch"] = _host_cost(args, rows)
    if args.ncu:
        first = work[0]
        context["ncu"] = {"x".join(map(str, first.config.shape)): ncu.ncu_kernel_times(first)}
    baselines = family.compared_with(args)
    cache = "L2 hot" if args.hot_l2 else "L2 cold: inputs rotated over > 4x L2"
    title = (
        f"device time on {gpu_name}, {cache}, median of {args.samples} graph replays "
        f"({suites.STREAM_TIMED}: eager launches on a stream)"
    )
    _show(args, rows, context, baselines, title, console)
    if args.json:
        if family.study is not None:
            document = family.study(results, {**context, "samples": args.samples})
        else:
            what = f"tmakit bench --kernel {args.kernel}: device time, {cache}, every tmakit row verified"
            document = report.report(rows, {**context, "hot_l2": args.hot_l2}, baselines, args.kernel, what)
        write_json(args.json, document)
    if args.plot:
        title = f"{PLOT_TITLES[args.kernel]} on {gpu_name} ({cache})"
        with writing(args.plot, "--plot"):
            report.plot(rows, args.plot, context["peak_bandwidth"], title)
    # A study's rows are its evidence: one not verified fails the run (scripts read the status).
    unverified = [row for row in rows if row.verified is not None and not row.verified.startswith("ok")]
    return 1 if family.study is not None and unverified else 0
