"""What the commands share: argument types that check each value as it is parsed, the options
several commands take (written once here), the load plans built from them, and how a command writes
its JSON or gives up."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from .. import registry
from ..config import SEED, LoadConfig, dtype_from_text, dtype_named, padded_strides, parse_extents
from ..errors import TmaConfigError
from ..explain import highlight_tile
from ..limits import GLOBAL_STRIDE_ALIGN, MAX_RANK, SWIZZLE_MODES
from ..plan import LoadPlan, reduce_op
from ..runtime.device import find_hopper_gpu
from ..validate import check_load_config, check_rank

SEED_SHAPE = "x".join(map(str, SEED.shape))
SEED_TILE = "x".join(map(str, SEED.tile))
SHAPE_RULE = f"each dimension must be a positive integer, written like {SEED_SHAPE}"
# --cluster's shapes: the cluster family's (its plan part, read by name).
CLUSTER_SHAPES = registry.exporting("CLUSTER_SHAPES", "plan").CLUSTER_SHAPES
CLUSTERS = ", ".join("x".join(map(str, shape)) for shape in CLUSTER_SHAPES)
STDOUT = "-"  # `--json -` (or a bare `--json`): the JSON on stdout instead of the text
# The CLI's own remedy for rows TMA cannot address (the library's error names tmakit.padded_empty).
PAD_FIX = f"add --pad to pad the contiguous dim to a multiple of {GLOBAL_STRIDE_ALIGN} bytes"


class CommandError(Exception):
    """A command that cannot run as asked, for a reason outside the configuration (no GPU,
    no matplotlib, a path that cannot be written): one line on stderr, exit 2."""


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
    """--shape's extents: each a positive integer (TmaConfigError naming that rule otherwise), 2 to
    `MAX_RANK` of them."""
    try:
        shape = parse_extents(text, "shape", rank=None)
    except TmaConfigError:
        shape = ()
    if not shape or min(shape) < 1:
        raise TmaConfigError(f"{text!r}: {SHAPE_RULE}")
    check_rank(len(shape))
    return shape


def number(kind: type[int] | type[float], low: int, high: int, what: str = "") -> Callable[[str], Any]:
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


def output_file(example: str, stdout: bool = False) -> Callable[[str], str]:
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
DTYPE = _checked(lambda text: dtype_from_text(text).name, "dtype")  # torch's names too; tmakit's kept
REDUCE_OP = _checked(reduce_op, "op")  # torch's names too (sum, amax, amin)
# Each numeric flag's range (the commands' own beside their flags). The largest values are bounds
# no run needs, that keep an argument from asking for years of work: a count of stages or warps
# the plans bound further.
MOST = 1_000_000
COUNT = number(int, 1, MOST)
NON_NEGATIVE = number(int, 0, MOST)
JSON_PATH = output_file("out.json", stdout=True)
# `plan --json`, `demo --json` and `explain` list the barrier phase of every tile block 0 loads;
# a block of 2^31 tiles would take minutes and tens of GB, 2^20 takes a second or two.
MAX_LISTED_TILES = 1 << 20


# -- the options commands share ---------------------------------------------------------------------
def add_value(
    parser: argparse.ArgumentParser, flag: str, kind: Any, metavar: str | None, help: str, default: Any
) -> None:
    """An option that takes one value, checked and converted by `kind` as it is parsed."""
    parser.add_argument(flag, type=kind, default=default, metavar=metavar, help=help)


SHAPE_METAVAR = "[BATCHx...]ROWSxCOLS"


def add_tensor_arguments(parser: argparse.ArgumentParser) -> None:
    help = f"the tensor's extents, rank 2-{MAX_RANK} (default {SEED_SHAPE})"
    add_value(parser, "--shape", SHAPE, SHAPE_METAVAR, help, SEED.shape)
    add_element_arguments(parser)
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


def add_element_arguments(parser: argparse.ArgumentParser) -> None:
    dtype_help = (
        "element type, tmakit's name or torch's in any case "
        f"(fp16, FP16, float16 or half; default {SEED.dtype})"
    )
    add_value(parser, "--dtype", DTYPE, None, dtype_help, SEED.dtype)
    add_value(
        parser, "--tile", TILE, "ROWSxCOLS", f"the TMA box: rows x columns (default {SEED_TILE})", SEED.tile
    )
    parser.add_argument(
        "--swizzle",
        type=int,
        choices=SWIZZLE_MODES,
        default=SEED.swizzle,
        help="TMA swizzle in bytes: 0 (none, default), 32, 64 or 128",
    )


def add_highlight(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--highlight",
        type=HIGHLIGHT,
        metavar="ROW_BLOCK,COLUMN_TILE",
        help="the tile to mark (default 1,2, the seed's, or the nearest tile a smaller grid has)",
    )


def add_count(parser: argparse.ArgumentParser, flag: str, kind: Any, help: str, default: Any = None) -> None:
    """An option that takes one number N (`kind`: one of the number types above)."""
    add_value(parser, flag, kind, "N", help, default)


def add_cluster(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--cluster", type=CLUSTER, metavar="CxR", help=f"{what}: {CLUSTERS}")


def add_load_arguments(parser: argparse.ArgumentParser, cluster: str) -> None:
    """The options of a command that shows one load: the tensor, the tile to mark, and a cluster
    (`cluster` says what the command does with one)."""
    add_tensor_arguments(parser)
    add_highlight(parser)
    add_cluster(parser, cluster)


def add_schedule_arguments(parser: argparse.ArgumentParser, stages: str, cluster: str) -> None:
    """The options of a command that runs a load's schedule: the tensor, the ring's stages and a
    cluster (`stages` and `cluster` say what the command does with them)."""
    add_tensor_arguments(parser)
    add_count(parser, "--stages", COUNT, stages, default=1)
    add_cluster(parser, cluster)


def add_json(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--json",
        nargs="?",
        type=JSON_PATH,
        const=STDOUT,
        metavar="PATH",
        help=f"write {what} as JSON to PATH; without PATH (or '-'), print the JSON instead of the text",
    )


# -- from arguments to plans (every check before anything runs or prints) ---------------------------
def load_plan(args: argparse.Namespace) -> LoadPlan:
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


def cluster_plan() -> type:
    """The cluster family's `MulticastPlan` (its plan part, read by name): what `--cluster` draws."""
    return registry.exporting("MulticastPlan", "plan").MulticastPlan


def multicast_plan(args: argparse.Namespace, load: LoadPlan, stages: int = 1) -> Any:
    """The `MulticastPlan` of --cluster on `load` (None without --cluster)."""
    return cluster_plan()(load, args.cluster, stages=stages) if args.cluster else None


def shown_load(args: argparse.Namespace) -> tuple[LoadPlan, Any, tuple[int, int]]:
    """The load the options of `add_load_arguments` name, its cluster (a `MulticastPlan`; None
    without --cluster) and the tile to mark."""
    load = load_plan(args)
    return load, multicast_plan(args, load), highlight_tile(load, args.highlight)


def refuse_given(args: argparse.Namespace, dests: tuple[str, ...], why: str) -> None:
    """CommandError naming the options among `dests` the command line gave (`args.given`, filled
    by the parser): they do not apply to this run, and `why` says so ("with --im2col: ...")."""
    named = [f"--{dest.replace('_', '-')}" for dest in dests if dest in getattr(args, "given", ())]
    if named:
        verb = "does" if len(named) == 1 else "do"
        raise CommandError(f"{', '.join(named)} {verb} not apply {why}")


def needed(value: Any, flag: str, kernel: str, form: str, example: str) -> Any:
    """`value`, of the option `flag` that `--kernel kernel` cannot plan without; where the command
    line gave none, CommandError saying what to give: the flag, its `form` and an `example` value."""
    if value is None:
        raise CommandError(f"--kernel {kernel} needs {flag} {form}, e.g. {flag} {example}")
    return value


def check_listed_tiles(tiles: int, what: str, fix: str) -> None:
    """CommandError for a block of more `tiles` than `what` lists the phases of (`MAX_LISTED_TILES`);
    `fix` says what to do instead."""
    if tiles > MAX_LISTED_TILES:
        raise CommandError(
            f"{what} lists the barrier phase of each tile block 0 loads, at most {MAX_LISTED_TILES} tiles; "
            f"this block loads {tiles}: {fix}"
        )


def hopper_gpu(command: str) -> str:
    """The GPU's name; CommandError saying why there is none to use."""
    name, why = find_hopper_gpu()
    if name is None:
        raise CommandError(f"{command} needs a Hopper GPU: {why}")
    return name


# -- where the results go ---------------------------------------------------------------------------
def write_json(path: str, data: Any) -> None:
    """Every command's JSON, one way: printed (`--json -`) or written to the file `path`, which
    the parser has already checked; what only the write shows (a full disk) is a CommandError."""
    text = json.dumps(data, indent=1) + "\n"
    if path == STDOUT:
        sys.stdout.write(text)
        return
    with writing(path, "--json"):
        with open(path, "w", encoding="utf-8") as file:
            file.write(text)


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """A command's result: its JSON where --json says, and its text unless the JSON took stdout."""
    if args.json:
        write_json(args.json, data)
    if args.json != STDOUT:
        print(text)


@contextmanager
def writing(path: str, flag: str) -> Iterator[None]:
    """Writing `path`: an OSError (a full disk, a file gone read-only) as one CommandError line."""
    try:
        yield
    except OSError as error:
        raise CommandError(
            f"cannot write {path}: {error.strerror or error}; give {flag} another file"
        ) from None


def text_stream(args: argparse.Namespace) -> TextIO:
    """Where the human-readable output goes: stderr when stdout carries the JSON."""
    return sys.stderr if getattr(args, "json", None) == STDOUT else sys.stdout


def digits_at_most(text: str, most: int) -> bool:
    """Whether the decimal digits `text` are a number <= `most`, read without converting more
    digits than `most` has (int() refuses past 4300 digits, in words that name no tmakit limit)."""
    digits = text.lstrip("0") or "0"
    return len(digits) <= len(str(most)) and int(digits) <= most
