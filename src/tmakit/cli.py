"""The `tmakit` command: parse, check every argument, call the library, print.

It behaves as ruff, pytest, pip and git do: results on stdout, every error on stderr as one line
`tmakit: ...`; exit 0 on success, 1 when a check finds a problem, 2 for bad usage (and for a
command that needs a Hopper GPU where there is none). Every argument is checked, and every plan
built, before a GPU is looked for or a line is printed. `--json [PATH]` writes a command's result
as JSON to PATH, or prints it instead of the text.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, NoReturn, TextIO

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from . import __version__
from .bench import hostcost, ncu, report, suites
from .bench.baselines import TORCH_IN_PLACE
from .bench.timing import MIN_SAMPLES
from .check.isolate import run_isolated
from .check.run import verify_multicast_load, verify_pipelined_load
from .check.sweep import summarize, sweep_configs
from .config import SEED, LoadConfig, dtype_named, padded_strides, parse_extents
from .demo import run_demo
from .errors import TmaConfigError
from .explain import describe_plan, explain, explain_im2col, highlight_tile, im2col_to_text, to_text
from .limits import GLOBAL_STRIDE_ALIGN, MAX_RANK, SWIZZLE_MODES
from .model.schedule import (
    REPLAYED_TILES,
    SHOWN_TILES,
    Event,
    ends,
    multicast_schedule,
    pipeline_schedule,
    replay,
    seed_schedule,
    tiles_to_replay,
)
from .plan import REDUCE_OPS, CopyOptions, Im2colPlan, LoadPlan, MulticastPlan, PipelinePlan
from .plan.multicast import CLUSTER_SHAPES
from .runtime.compile import installed_dsl_version
from .runtime.device import find_hopper_gpu
from .runtime.launch import max_active_clusters
from .validate import check_load_config, check_rank

SEED_SHAPE = "x".join(map(str, SEED.shape))
SEED_TILE = "x".join(map(str, SEED.tile))
CLUSTERS = ", ".join("x".join(map(str, shape)) for shape in CLUSTER_SHAPES)
STDOUT = "-"  # `--json -` (or a bare `--json`): the JSON on stdout instead of the text
# The CLI's own remedy for rows TMA cannot address (the library's error names tmakit.padded_empty).
PAD_FIX = f"add --pad to pad the contiguous dim to a multiple of {GLOBAL_STRIDE_ALIGN} bytes"
BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a tool whose reader went away
INTERRUPTED_EXIT = 130  # 128 + SIGINT
VERIFY_TIMEOUT_SECONDS = 60.0  # per configuration's worker: ample for a compile and a load
MAX_TIMEOUT_SECONDS = 86_400  # a day: a worker still running by then has hung
MAX_SWEEP = 10_000  # configurations verified one worker at a time: hours of GPU time already
MAX_SAMPLES = 100_000  # graph replays per kernel: a median of 100,000 is as steady as one gets
MAX_BENCH_MIB = 2**20  # 1 TiB: more than a GPU's memory holds


class CommandError(Exception):
    """A command that cannot run as asked, for a reason outside the configuration (no GPU,
    no matplotlib, a path that cannot be written): one line on stderr, exit 2."""


class _Parser(argparse.ArgumentParser):
    """argparse's usage errors as one line on stderr, as every other tmakit error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"tmakit: {message} (see '{self.prog} --help')\n")


class _Version(argparse.Action):
    """`--version`: looked up only when asked (finding the DSL may import it)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print tmakit's and the DSL's versions and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> NoReturn:
        dsl = installed_dsl_version() or "not installed"
        print(f"tmakit {__version__} (nvidia-cutlass-dsl {dsl})")  # on stdout, as --help
        parser.exit(0)


# -- argument types: each value checked (and converted) as it is parsed ---------------------------
def _checked(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """An argparse type from a parser that raises TmaConfigError: its message becomes the usage error."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except TmaConfigError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    convert.__name__ = name
    return convert


def _shape(text: str) -> tuple[int, ...]:
    shape = parse_extents(text, "shape", rank=None)
    check_rank(len(shape))
    return shape


def _number(kind: type[int] | type[float], low: int, high: int, what: str = "") -> Callable[[str], Any]:
    """An argparse type: a finite `kind` (an int: whole digits, no '4.0' or '1e3') from `low` to
    `high`; a float must be above `low`. `what` names the unit ("seconds")."""
    rule = f"an integer >= {low} and <= {high}" if kind is int else f"a number{what} > {low} and <= {high}"

    def number(text: str) -> Any:
        try:
            value = kind(text)
        except (ValueError, OverflowError):  # not a number, or more digits than int() reads
            value = None
        if (
            value is None
            or not math.isfinite(value)
            or not low <= value <= high
            or (kind is float and value == low)
        ):
            raise argparse.ArgumentTypeError(f"{text!r} is not {rule}")
        return value

    return number


def _sizes(text: str) -> list[float]:
    """ "1,16,1024" -> MiB sizes ("" for none)."""
    return [MIB(item) for item in filter(None, (part.strip() for part in text.split(",")))]


def _why_unwritable(path: str, example: str) -> str | None:
    """Why the command could not write the file `path` (None: it can, as far as a look shows; a
    full disk shows only as it writes). `example` is a file name to suggest in a folder."""
    if not path:
        return "the path is empty; name a file"
    if "\0" in path:
        return "a path cannot hold a NUL character"
    file = Path(path)
    try:
        if file.is_dir():
            return f"it is a folder; name a file in it, e.g. {file / example}"
        folder = file.parent
        if not folder.exists():
            return f"folder {folder} does not exist; create it first or name a file in another"
        if not folder.is_dir():
            return f"{folder} is not a folder"
        if file.exists() and not os.access(file, os.W_OK):
            return "the file is not writable (permission denied); name another"
        if not file.exists() and not os.access(folder, os.W_OK | os.X_OK):
            return f"folder {folder} is not writable (permission denied); name a file in another"
    except OSError as error:  # a name too long, a loop of links
        return f"{error.strerror or error}; name another file"
    return None


def _output_file(example: str, stdout: bool = False) -> Callable[[str], str]:
    """An argparse type: a file path the command can write (refused before any work is done);
    with `stdout`, '-' for standard output."""

    def output_file(text: str) -> str:
        if stdout and text == STDOUT:
            return text
        problem = _why_unwritable(text, example)
        if problem:
            raise argparse.ArgumentTypeError(f"cannot write {text!r}: {problem}")
        return text

    return output_file


SHAPE = _checked(_shape, "shape")
OPTIONAL_SHAPE = _checked(lambda text: _shape(text) if text else None, "shape")
TILE = _checked(lambda text: parse_extents(text, "tile"), "tile")
HIGHLIGHT = _checked(lambda text: parse_extents(text, "highlight"), "highlight")
CLUSTER = _checked(lambda text: parse_extents(text, "cluster"), "cluster")
DTYPE = _checked(lambda text: dtype_named(text).name, "dtype")  # torch's names too; tmakit's kept
# Each numeric flag's range. The largest values are bounds no run needs, that keep an
# argument from asking for years of work: a count of stages or warps the plans bound further.
MOST = 1_000_000
COUNT = _number(int, 1, MOST)
NON_NEGATIVE = _number(int, 0, MOST)
SEED_NUMBER = _number(int, 0, 2**64 - 1)
SAMPLES = _number(int, 1, MAX_SAMPLES)
SWEEP = _number(int, 0, MAX_SWEEP)
BENCH_STAGES = _number(int, 2, MOST)
SECONDS = _number(float, 0, MAX_TIMEOUT_SECONDS, " of seconds")
MIB = _number(float, 0, MAX_BENCH_MIB, " of MiB")
JSON_PATH = _output_file("out.json", stdout=True)
PLOT_PATH = _output_file("plot.png")


def PERSISTENT_CLUSTERS(text: str) -> int | str:  # noqa: N802 - an argparse type, named as the others
    """ "auto" or a count of clusters >= 1."""
    return "auto" if text == "auto" else COUNT(text)


# -- the options commands share ---------------------------------------------------------------------
def _add_tensor_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shape",
        type=SHAPE,
        default=SEED.shape,
        metavar="[BATCHx...]ROWSxCOLS",
        help=f"the tensor's extents, rank 2-{MAX_RANK} (default {SEED_SHAPE})",
    )
    _add_element_arguments(parser)
    parser.add_argument(
        "--layout",
        choices=("row", "col"),
        default="row",
        help="the contiguous dim: the columns (row, default) or the rows (col, e.g. a transposed view)",
    )
    parser.add_argument(
        "--pad",
        action="store_true",
        help=f"pad the contiguous dim to a multiple of {GLOBAL_STRIDE_ALIGN} bytes (as tmakit.padded_empty)",
    )


def _add_element_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dtype",
        type=DTYPE,
        default=SEED.dtype,
        help=f"element type, tmakit's name or torch's (fp16 or float16; default {SEED.dtype})",
    )
    parser.add_argument(
        "--tile",
        type=TILE,
        default=SEED.tile,
        metavar="ROWSxCOLS",
        help=f"the TMA box: rows x columns (default {SEED_TILE})",
    )
    parser.add_argument(
        "--swizzle",
        type=int,
        choices=SWIZZLE_MODES,
        default=SEED.swizzle,
        help="TMA swizzle in bytes: 0 (none, default), 32, 64 or 128",
    )


def _add_highlight(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--highlight",
        type=HIGHLIGHT,
        metavar="ROW_BLOCK,COLUMN_TILE",
        help="the tile to mark (default 1,2, the seed's, or the nearest tile a smaller grid has)",
    )


def _add_cluster(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--cluster", type=CLUSTER, metavar="CxR", help=f"{what}: {CLUSTERS}")


def _add_json(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--json",
        nargs="?",
        type=JSON_PATH,
        const=STDOUT,
        metavar="PATH",
        help=f"write {what} as JSON to PATH; without PATH (or '-'), print the JSON instead of the text",
    )


# -- from arguments to plans (every check before anything runs or prints) ---------------------------
def _load_plan(args: argparse.Namespace) -> LoadPlan:
    element = dtype_named(args.dtype)
    config = LoadConfig(
        shape=args.shape,
        dtype=element.name,
        tile=args.tile,
        swizzle=args.swizzle,
        major=args.layout,
        strides=padded_strides(args.shape, element.nbytes, args.layout) if args.pad else None,
    )
    check_load_config(config, stride_fix=PAD_FIX)
    return LoadPlan(config)


def _multicast_plan(args: argparse.Namespace, load: LoadPlan, stages: int = 1) -> MulticastPlan | None:
    return MulticastPlan(load, args.cluster, stages=stages) if args.cluster else None


def _hopper_gpu(command: str) -> str:
    """The GPU's name; CommandError saying why there is none to use."""
    name, why = find_hopper_gpu()
    if name is None:
        raise CommandError(f"{command} needs a Hopper GPU: {why}")
    return name


def _write_json(path: str, data: Any) -> None:
    """Every command's JSON, one way: printed (`--json -`) or written to the file `path`, which
    the parser has already checked; what only the write shows (a full disk) is a CommandError."""
    text = json.dumps(data, indent=1) + "\n"
    if path == STDOUT:
        sys.stdout.write(text)
        return
    with _writing(path, "--json"):
        with open(path, "w", encoding="utf-8") as file:
            file.write(text)


@contextmanager
def _writing(path: str, flag: str) -> Iterator[None]:
    """Writing `path`: an OSError (a full disk, a file gone read-only) as one CommandError line."""
    try:
        yield
    except OSError as error:
        raise CommandError(
            f"cannot write {path}: {error.strerror or error}; give {flag} another file"
        ) from None


def _text_stream(args: argparse.Namespace) -> TextIO:
    """Where the human-readable output goes: stderr when stdout carries the JSON."""
    return sys.stderr if getattr(args, "json", None) == STDOUT else sys.stdout


# -- the commands -----------------------------------------------------------------------------------
def _cmd_plan(args: argparse.Namespace) -> int:
    load = _load_plan(args)
    multicast = _multicast_plan(args, load)
    highlight = highlight_tile(load, args.highlight)
    text = "\n".join(
        [load.summary(), *([multicast.summary()] if multicast else []), "", load.diagram(highlight)]
    )
    if args.json:
        _write_json(args.json, describe_plan(load, highlight, multicast))
    if args.json != STDOUT:
        print(text)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    load = _load_plan(args)
    multicast = _multicast_plan(args, load)
    highlight = highlight_tile(load, args.highlight)
    return 0 if run_demo(load, highlight, print, multicast) else 1


def _cmd_explain(args: argparse.Namespace) -> int:
    if args.im2col is not None:
        return _explain_im2col(args)
    load = _load_plan(args)
    if args.consumer_warps > 1 and args.stages == 1:
        raise CommandError("--consumer-warps sets the consumers of a ring: give --stages 2 or more")
    pipeline = PipelinePlan(load, stages=args.stages, consumer_warps=args.consumer_warps)
    multicast = _multicast_plan(args, load)
    result = explain(pipeline, highlight_tile(load, args.highlight), multicast, args.reduce)
    if args.json:
        _write_json(args.json, result)
    if args.json != STDOUT:
        print(to_text(result))
    return 0


def _explain_im2col(args: argparse.Namespace) -> int:
    """`explain --im2col SPEC`: --shape is the NHWC activation; the box comes from SPEC's tile
    (the plan's default otherwise), so --tile, --swizzle, --layout and --pad do not apply."""
    plan = Im2colPlan.parse(args.shape, dtype_named(args.dtype).name, args.im2col)
    result = explain_im2col(plan, args.highlight)
    if args.json:
        _write_json(args.json, result)
    if args.json != STDOUT:
        print(im2col_to_text(result))
    return 0


# --mistake: what each injects, and the schedules it applies to.
EVERY_SCHEDULE = ("one-stage", "ring", "cluster")
MISTAKES = {
    "none": ("the schedule as the kernel runs it", EVERY_SCHEDULE),
    "expect-more": ("expect 8 bytes more than a tile (the seed's 32776: tile + barrier)", EVERY_SCHEDULE),
    "expect-less": ("expect 16 bytes less than a tile", EVERY_SCHEDULE),
    "skip-arrival": ("declare the bytes without arriving", ("one-stage",)),
    "same-parity": ("wait on parity 0 every time", ("one-stage",)),
    "skip-empty-wait": ("the producer reuses a stage without waiting for its release", ("ring",)),
    "expect-slice": ("each CTA expects only its own slice, not the whole tile", ("cluster",)),
}
EXPECT_MORE_BYTES, EXPECT_LESS_BYTES = 8, -16


# `check` replays block 0 (or cluster 0) as a block of its first tiles, as many as show every
# pattern of its schedule (model.schedule.tiles_to_replay), and prints the ends of the trace;
# `--full` replays and prints every tile.
def _schedule(args: argparse.Namespace, load: LoadPlan) -> tuple[str, str, int, int, list[Event]]:
    """(kind, title, tiles, period, events) of the schedule `tmakit check` replays, the mistake
    injected: the tiles of block (or cluster) 0, the period with which its loads repeat, and the
    events of the tiles replayed (every tile with --full)."""
    if args.cluster and args.stages > 1:
        raise CommandError(
            "check replays a cluster's loads with one stage: give --cluster or --stages, not both"
        )
    kind = "cluster" if args.cluster else "ring" if args.stages > 1 else "one-stage"
    if kind not in MISTAKES[args.mistake][1]:
        fits = ", ".join(name for name, (_, kinds) in MISTAKES.items() if kind in kinds)
        raise CommandError(f"--mistake {args.mistake} does not apply to a {kind} schedule; these do: {fits}")
    tile_bytes = load.expected_tx_bytes
    expected = {"expect-more": tile_bytes + EXPECT_MORE_BYTES, "expect-less": tile_bytes + EXPECT_LESS_BYTES}
    if kind == "cluster":
        multicast = MulticastPlan(load, args.cluster)
        expected["expect-slice"] = multicast.issued_bytes_per_cta
        cluster = "x".join(map(str, multicast.cluster))
        tiles, period = load.tiles_per_block, 2
        title = f"{cluster} cluster 0 ({multicast.cluster_size} CTAs, {tiles} tiles each)"
        events = multicast_schedule(
            _replayed(args, tiles, period),
            multicast.cluster_size,
            tile_bytes,
            expected_tx_bytes=expected.get(args.mistake),
        )
    elif kind == "ring":
        ring = PipelinePlan(load, stages=args.stages)
        tiles, period = ring.tiles_of_block(0), 2 * ring.stages
        title = f"{ring.stages}-stage ring of block 0 ({tiles} tiles)"
        events = pipeline_schedule(
            _replayed(args, tiles, period),
            ring.stages,
            tile_bytes,
            expected_tx_bytes=expected.get(args.mistake),
            skip_empty_wait=args.mistake == "skip-empty-wait",
        )
    else:
        tiles, period = load.tiles_per_block, 2
        title = f"schedule of block 0 ({tiles} tiles)"
        events = seed_schedule(
            load,
            expected_tx_bytes=expected.get(args.mistake),
            skip_arrival=args.mistake == "skip-arrival",
            parity_mistake=args.mistake == "same-parity",
            tiles=_replayed(args, tiles, period),
        )
    return kind, title, tiles, period, events


def _replayed(args: argparse.Namespace, tiles: int, period: int) -> int:
    """How many of a block's `tiles` `check` replays."""
    return tiles if args.full else tiles_to_replay(tiles, period)


def _cmd_check(args: argparse.Namespace) -> int:
    load = _load_plan(args)
    kind, title, tiles, period, events = _schedule(args, load)
    replayed = _replayed(args, tiles, period)
    result = replay(events)
    cta = None if kind == "cluster" else 0
    shown = None if args.full else SHOWN_TILES
    trace, left_out = result.shown(cta, shown)
    first, last, findings_left_out = ends(result.findings, shown)
    notes = []
    if replayed < tiles:
        notes.append(
            f"replayed as a block of its first {replayed} tiles: the loads repeat every {period} tiles, so "
            f"the other {tiles - replayed} repeat what these do; --full replays all {tiles}"
        )
    if left_out:
        notes.append(
            f"the trace shows each CTA's first and last {shown // 2} tiles, {left_out} tiles left out in "
            "all; --full shows every tile"
        )
    if findings_left_out:
        notes.append(
            f"{shown} of the {len(result.findings)} findings are shown, the first and the last; "
            "--full shows all"
        )
    if args.json:
        _write_json(
            args.json,
            {
                "schedule": kind,
                "title": title,
                "mistake": args.mistake,
                "ok": result.ok,
                "stopped_at": result.stopped_at,
                "tiles": tiles,
                "tiles_replayed": replayed,
                "trace_tiles_left_out": left_out,
                "notes": notes,
                "findings": [asdict(finding) for finding in [*first, *last]],
                "findings_left_out": findings_left_out,
                "trace": [asdict(entry) for entry in trace],
            },
        )
    if args.json != STDOUT:
        print(f"{title}, replayed against the CPU model of TMA and mbarrier:")
        for note in notes:
            print(f"({note})")
        print(result.describe(cta, shown))
    return 0 if result.ok else 1


def _cmd_verify(args: argparse.Namespace) -> int:
    load = _load_plan(args)
    if args.sweep and (args.cluster or args.stages > 1 or args.prefetch):
        raise CommandError("--sweep verifies one-stage loads: drop --cluster, --stages and --prefetch")
    defaults = build_parser().parse_args(["verify"])  # the flags' own defaults, read where they are set
    tensor_flags = ("shape", "dtype", "tile", "swizzle", "layout", "pad")
    given = [f"--{name}" for name in tensor_flags if getattr(args, name) != getattr(defaults, name)]
    if args.sweep and given:
        raise CommandError(f"--sweep draws its own configurations: drop {', '.join(given)}")
    if args.cluster and args.prefetch:
        raise CommandError("--prefetch verifies the pipelined load of one CTA: drop --cluster")
    if args.seed is not None and not args.sweep:
        raise CommandError("--seed picks the configurations of --sweep: give --sweep N too")
    clusters = [
        MulticastPlan(load, args.cluster, multicast, args.stages)
        for multicast in (True, False)
        if args.cluster
    ]
    pipeline = None
    if not args.cluster and (args.prefetch or args.stages > 1):
        pipeline = PipelinePlan(
            load, stages=args.stages, prefetch_tiles=args.prefetch, prefetch_descriptor=args.prefetch > 0
        )
    if args.timeout is not None and (clusters or pipeline):  # those run in this process, guarded
        raise CommandError(
            "--timeout limits each one-stage load's worker: drop --cluster, --stages, --prefetch"
        )
    seed = args.seed or 0
    configs = sweep_configs(args.sweep, seed) if args.sweep else [load.config]
    gpu_name = _hopper_gpu("verify")
    out = _text_stream(args)

    if args.cluster:  # every CTA of every cluster, multicast and the baseline
        ctas = []
        for cluster in clusters:
            for rank, verdict in enumerate(verify_multicast_load(cluster)):
                ctas.append(
                    {"multicast": cluster.multicast, "rank": rank, "ok": verdict.ok, "verdict": str(verdict)}
                )
                print(f"{'multicast' if cluster.multicast else 'baseline '} CTA {rank}: {verdict}", file=out)
        ok = all(cta["ok"] for cta in ctas)
        result: dict[str, Any] = {
            "cluster": list(args.cluster),
            "stages": args.stages,
            "ok": ok,
            "ctas": ctas,
        }
    elif pipeline is not None:  # the pipelined load, store-back verified, guarded
        print(pipeline.summary(), file=out)
        verdict = verify_pipelined_load(pipeline, "store", hang_guard=True)
        print(verdict, file=out)
        ok = verdict.ok
        result = {
            "stages": pipeline.stages,
            "prefetch_tiles": args.prefetch,
            "ok": ok,
            "verdict": str(verdict),
        }
    else:
        console = Console(file=out)
        with Progress(console=console) as progress:
            task = progress.add_task(f"verifying on {gpu_name}", total=len(configs))

            def progress_report(config: LoadConfig, outcome: dict) -> None:
                progress.advance(task)
                if outcome["status"] != "ok":
                    progress.console.print(f"[red]{outcome['status']}[/red] {config}: {outcome}")

            results = run_isolated(configs, args.timeout or VERIFY_TIMEOUT_SECONDS, progress_report)
        result = summarize(configs, results, seed)
        table = Table(title=f"{len(configs)} configurations on {gpu_name}")
        for column in ("cell (dtype/swizzle/layout)", "ok", "mismatch", "hang", "error"):
            table.add_column(column)
        for cell, counts in result["cells"].items():
            table.add_row(cell, *(str(counts.get(k, 0)) for k in ("ok", "mismatch", "hang", "error")))
        console.print(table)
        console.print(
            f"ok {result['ok']}, mismatches {result['mismatches']}, hangs {result['hangs']}, "
            f"errors {result['errors']}; partial tiles in {result['with_partial_tiles']}, "
            f"prime or unit extent in {result['with_prime_or_unit_extent']}; "
            f"cells {len(result['cells'])}/{result['cells_expected']}"
        )
        if len(configs) == 1:
            console.print(results[0])
        ok = result["ok"] == len(configs)
    if args.json:
        _write_json(args.json, result)
    return 0 if ok else 1


SIZE_SWEEP_MIB = (1, 4, 16, 64, 256, 1024, 2048)
BENCH_CLUSTER_STAGES = 4
PLOT_TITLES = {
    "load": "tmakit loads vs torch",
    "copy": "tmakit.copy_ vs torch copy_",
    "transpose": "transposing tmakit.copy_ vs torch copy_",
    "reduce": "tmakit.reduce_into_ vs torch's in-place ops",
}


def bench_shape(mebibytes: float, itemsize: int) -> tuple[int, int]:
    """A matrix of about `mebibytes`: 4096 columns up to 64 MiB, 16384 beyond (1 GiB fp16 is the
    32768 x 16384 of the reference numbers)."""
    cols = 4096 if mebibytes <= 64 else 16384
    return max(1, round(mebibytes * 2**20 / itemsize / cols)), cols


def _cmd_bench(args: argparse.Namespace) -> int:
    element = dtype_named(args.dtype)
    shapes = [args.shape] if args.shape else []
    shapes += [bench_shape(size, element.nbytes) for size in args.sizes]
    if not shapes:
        raise CommandError("nothing to time: give --shape or --sizes")
    plans = [LoadPlan(LoadConfig(shape, element.name, args.tile, args.swizzle)) for shape in shapes]
    copying = args.kernel in ("copy", "transpose")
    reducing = args.kernel == "reduce"
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
        for shape in [*([args.shape] if args.shape else []),
                      *(bench_shape(size, dtype_named(case.dtype).nbytes) for size in args.sizes)]
    ]  # fmt: skip
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
    if args.plot:
        try:
            report.check_plotting()
        except ImportError as error:
            raise CommandError(f"--plot: {error}") from None
    gpu_name = _hopper_gpu("bench")

    context = report.device_context(args.commit)
    console = Console(file=_text_stream(args))
    rows = []
    with Progress(console=console) as progress:
        task = progress.add_task(f"timing on {gpu_name}", total=len(reduce_plans) if reducing else len(plans))
        for case, plan in reduce_plans:
            rows += suites.bench_reduce(
                plan, case.op, options, context["l2_bytes"], args.hot_l2, args.samples
            )
            progress.advance(task)
        for plan in [] if reducing else plans:
            if copying:
                rows += suites.bench_copy(
                    plan,
                    args.kernel == "transpose",
                    options,
                    context["l2_bytes"],
                    args.hot_l2,
                    args.samples,
                    args.specialised,
                )
            else:
                rows += suites.bench_size(plan, context["l2_bytes"], args.hot_l2, args.samples)
            if variants:
                rows += suites.bench_pipelines(plan, variants, context["l2_bytes"], args.hot_l2, args.samples)
            if args.cluster:
                walk = args.persistent_clusters
                if walk == "auto":
                    walk = max_active_clusters(args.cluster[0] * args.cluster[1])
                rows += suites.bench_multicast(
                    plan, args.cluster, cluster_stages, context["l2_bytes"], args.hot_l2, args.samples, walk
                )
            progress.advance(task)
    context["host_launch"] = hostcost.measure_host_overhead()
    if copying:
        context["host_launch"].update(hostcost.measure_copy_host_cost(args.kernel == "transpose"))
    host = context["host_launch"]
    copy_prefix = "tmakit_copy_transpose_" if args.kernel == "transpose" else "tmakit_copy_"
    for row in rows:  # the compiled-call cost applies to every tmakit kernel (same launch path)
        if row.kernel.startswith("tmakit.copy_"):  # the public call, through TVM-FFI
            row.host_us = host[f"{copy_prefix}{'bulk_' if row.notes.get('bulk') else ''}call_us"]
        elif row.kernel.startswith("tmakit") and not row.kernel.startswith("tmakit.reduce_into_"):
            row.host_us = host["plain_prepared_tensors_us"]  # (a reduce's call: not measured)
    if args.ncu:
        context["ncu"] = {"x".join(map(str, plans[0].config.shape)): ncu.ncu_kernel_times(plans[0])}
    baselines = {
        "copy": ["torch copy_", f"torch copy_ {suites.STREAM_TIMED}"],
        "transpose": ["torch copy_ (transpose)", f"torch copy_ (transpose) {suites.STREAM_TIMED}"],
        "reduce": [
            name
            for op in dict.fromkeys(case.op for case in reduce_cases)
            for name in (TORCH_IN_PLACE[op][0], f"{TORCH_IN_PLACE[op][0]} {suites.STREAM_TIMED}")
        ],
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
        what = f"tmakit bench --kernel {args.kernel}: device time, {cache}, every tmakit row verified"
        _write_json(
            args.json, report.report(rows, {**context, "hot_l2": args.hot_l2}, baselines, args.kernel, what)
        )
    if args.plot:
        title = f"{PLOT_TITLES[args.kernel]} on {gpu_name} ({cache})"
        with _writing(args.plot, "--plot"):
            report.plot(rows, args.plot, context["peak_bandwidth"], title)
    return 0


# -- the parser -------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tmakit",
        description="Hopper TMA tile loads, pipelines and copies in CuTe DSL: planned, explained, "
        "verified, timed.",
        epilog="Exit status: 0 success, 1 a check found a problem, 2 bad usage (or no Hopper GPU for "
        "verify and bench).",
    )
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    plan_cmd = commands.add_parser("plan", help="the seed's arithmetic for a configuration (no GPU)")
    _add_tensor_arguments(plan_cmd)
    _add_highlight(plan_cmd)
    _add_cluster(plan_cmd, "also show each CTA's slice in a cluster sharing every tile by multicast")
    _add_json(plan_cmd, "the plan's numbers")
    plan_cmd.set_defaults(run=_cmd_plan)

    demo_cmd = commands.add_parser(
        "demo", help="run and verify the seed's kernel (or compile it, without a GPU)"
    )
    _add_tensor_arguments(demo_cmd)
    _add_highlight(demo_cmd)
    _add_cluster(demo_cmd, "run (or compile) the multicast kernel of this cluster shape instead")
    demo_cmd.set_defaults(run=_cmd_demo)

    verify_cmd = commands.add_parser("verify", help="verify loads on the GPU: one configuration or a sweep")
    _add_tensor_arguments(verify_cmd)
    _add_cluster(verify_cmd, "verify every CTA of clusters of this shape, with multicast and without")
    verify_cmd.add_argument(
        "--sweep",
        type=SWEEP,
        default=0,
        metavar="N",
        help="verify N random valid configurations instead",
    )
    verify_cmd.add_argument("--seed", type=SEED_NUMBER, help="random seed of the sweep (default 0)")
    verify_cmd.add_argument(
        "--timeout",
        type=SECONDS,
        help="seconds each one-stage configuration's worker may run before it counts as a hang "
        f"(default {VERIFY_TIMEOUT_SECONDS:g})",
    )
    verify_cmd.add_argument(
        "--stages",
        type=COUNT,
        default=1,
        metavar="N",
        help="> 1: verify the N-stage pipelined load (or multicast ring)",
    )
    verify_cmd.add_argument(
        "--prefetch",
        type=NON_NEGATIVE,
        default=0,
        metavar="N",
        help="verify the pipelined load prefetching N tiles ahead into L2 (and the descriptor)",
    )
    _add_json(verify_cmd, "the verdicts")
    verify_cmd.set_defaults(run=_cmd_verify)

    explain_cmd = commands.add_parser(
        "explain", help="the seed's three questions answered from the real CuTe objects (no GPU)"
    )
    _add_tensor_arguments(explain_cmd)
    _add_highlight(explain_cmd)
    _add_cluster(explain_cmd, "also trace each CTA's slice of the tile in a cluster of this shape")
    explain_cmd.add_argument(
        "--stages", type=COUNT, default=1, metavar="N", help="ring stages (default 1: the seed's kernel)"
    )
    explain_cmd.add_argument(
        "--consumer-warps", type=COUNT, default=1, metavar="N", help="warps consuming each stage (default 1)"
    )
    explain_cmd.add_argument(
        "--reduce",
        choices=REDUCE_OPS,
        metavar="OP",
        help=f"also explain the reduce store of the tile with this op ({', '.join(REDUCE_OPS)})",
    )
    explain_cmd.add_argument(
        "--im2col",
        metavar="kernel=K[,stride=S][,padding=P][,dilation=D][,tile=PIXELSxCHANNELS][,stages=N]",
        help="explain a box of tmakit.im2col instead: --shape is the NHWC activation (NxHxWxC), "
        "--highlight picks (row block, column tile) of the patch matrix; K, S, P, D an int or HxW",
    )
    _add_json(explain_cmd, "the explanation")
    explain_cmd.set_defaults(run=_cmd_explain)

    check_cmd = commands.add_parser(
        "check", help="replay a barrier schedule on the CPU model: hangs, races, parity (no GPU)"
    )
    _add_tensor_arguments(check_cmd)
    check_cmd.add_argument(
        "--stages",
        type=COUNT,
        default=1,
        metavar="N",
        help="replay the N-stage ring of block 0 (producer and consumer warps) instead of the seed's loop",
    )
    _add_cluster(check_cmd, "replay one cluster of this shape, each CTA multicasting its slice")
    check_cmd.add_argument(
        "--mistake",
        choices=list(MISTAKES),
        default="none",
        help="inject a mistake to see it caught: "
        + "; ".join(f"{name}: {meaning}" for name, (meaning, _) in MISTAKES.items() if name != "none"),
    )
    check_cmd.add_argument(
        "--full",
        action="store_true",
        help=f"replay every tile of the block and print the whole trace (default: its first {REPLAYED_TILES} "
        "tiles, or two rounds of a longer ring, every pattern the schedule has; the trace's first and "
        f"last tiles, {SHOWN_TILES} per CTA)",
    )
    _add_json(check_cmd, "the findings and the trace")
    check_cmd.set_defaults(run=_cmd_check)

    bench_cmd = commands.add_parser(
        "bench", help="device time vs the hardware peak and torch, same run (GPU)"
    )
    bench_cmd.add_argument(
        "--shape",
        type=OPTIONAL_SHAPE,
        default=SEED.shape,
        metavar="[BATCHx...]ROWSxCOLS",
        help=f"one shape to time besides --sizes (default {SEED_SHAPE}; '' for none)",
    )
    bench_cmd.add_argument(
        "--sizes",
        type=_sizes,
        default=list(SIZE_SWEEP_MIB),
        metavar="MIB,...",
        help=f"matrix sizes in MiB to sweep (default {','.join(map(str, SIZE_SWEEP_MIB))}; '' for none)",
    )
    _add_element_arguments(bench_cmd)
    bench_cmd.add_argument(
        "--kernel",
        choices=("load", "copy", "transpose", "reduce"),
        default="load",
        help="load (default): tile loads against torch's sum and copy_; copy: tmakit.copy_ against "
        "torch's copy_; transpose: the same from a column-major source (x.t()) into a row-major "
        "destination; reduce: tmakit.reduce_into_ against torch's in-place op (see --reduce)",
    )
    bench_cmd.add_argument(
        "--reduce",
        action="append",
        metavar="OP[:DTYPE,...]",
        help="--kernel reduce: one op and the dtypes to time it on (repeatable; without dtypes, --dtype's), "
        f"e.g. add:fp32,bf16 or max:fp16; default {' '.join(suites.DEFAULT_REDUCE_CASES)}. GB/s count 3x "
        "the tensor's bytes (src read, dst read and written)",
    )
    bench_cmd.add_argument(
        "--copy",
        action="append",
        metavar="NAME=VALUE,...",
        help="one tmakit.copy_ (or reduce_into_) configuration for --kernel copy/transpose/reduce "
        "(repeatable; default: the "
        f"defaults), by the names of tmakit.CopyOptions: {', '.join(CopyOptions.names())}; "
        "e.g. tile=16x256,stages=8 or bulk",
    )
    bench_cmd.add_argument(
        "--specialised",
        action="store_true",
        help="--kernel copy/transpose: time each configuration also through a kernel compiled for the "
        "exact shape, beside the shape-generic one tmakit.copy_ uses",
    )
    bench_cmd.add_argument(
        "--pipeline",
        action="append",
        metavar="NAME=VALUE,...",
        help="a pipelined variant to time too (repeatable), by name: stages=N (required), "
        "consumer_warps=N, persistent, consumer=none|rowsum|copy, prefetch_tiles=N, prefetch_descriptor",
    )
    bench_cmd.add_argument(
        "--prefetch",
        type=NON_NEGATIVE,
        default=0,
        metavar="N",
        help="also time each --pipeline variant (default stages=4 and stages=7) prefetching N tiles ahead",
    )
    _add_cluster(bench_cmd, "also time multicast loads against the same cluster without")
    bench_cmd.add_argument(
        "--stages",
        type=BENCH_STAGES,
        metavar="N",
        help=f"ring stages per CTA for --cluster (default {BENCH_CLUSTER_STAGES})",
    )
    bench_cmd.add_argument(
        "--persistent-clusters",
        type=PERSISTENT_CLUSTERS,
        metavar="N|auto",
        help="also time --cluster with N resident clusters walking the tiles (auto: as many as the GPU "
        "keeps resident)",
    )
    bench_cmd.add_argument(
        "--samples",
        type=SAMPLES,
        default=MIN_SAMPLES,
        metavar="N",
        help=f"graph replays timed per kernel; the median is reported (default {MIN_SAMPLES})",
    )
    bench_cmd.add_argument("--hot-l2", action="store_true", help="no rotation: time with the L2 warm")
    bench_cmd.add_argument(
        "--ncu", action="store_true", help="cross-check the first shape with Nsight Compute"
    )
    bench_cmd.add_argument("--commit", help="the git commit being measured (recorded in the JSON)")
    _add_json(bench_cmd, "every sample and the context")
    bench_cmd.add_argument(
        "--plot",
        type=PLOT_PATH,
        metavar="PATH",
        help="write a PNG of GB/s against size here (needs the plot extra: matplotlib)",
    )
    bench_cmd.set_defaults(run=_cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version, or a usage error already reported
        return done.code if isinstance(done.code, int) else 2
    try:
        code = args.run(args)
        sys.stdout.flush()  # a reader that went away shows here, not at interpreter exit
    except BrokenPipeError:  # `tmakit plan | head -1`: stop quietly, as other Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE_EXIT
    except KeyboardInterrupt:
        return INTERRUPTED_EXIT
    except (TmaConfigError, ValueError, CommandError) as error:
        print(f"tmakit: {error}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
