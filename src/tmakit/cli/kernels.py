"""What `plan` and `explain` share: `--kernel` and each kernel's own arguments, and the plans
those arguments make (a copy's or reduce's class; each family's through its `explain` part),
every check before anything runs or prints."""

from __future__ import annotations

import argparse
import math
from types import ModuleType

from .. import registry
from ..config import SEED, LoadConfig, dtype_named, padded_strides
from ..limits import DEFAULT_L2_BYTES, DEFAULT_SM_COUNT
from ..plan import CopyOptions, CopyPlan, LoadPlan, ReducePlan
from ..plan.copy import default_as_rows
from ..plan.copy_defaults import fits_l2
from ..plan.copy_layout import copy_rows_view
from ..validate import check_load_config
from .args import PAD_FIX, REDUCE_OP, CommandError, refuse_given

KERNELS = ("load", "copy", "transpose", "reduce")  # plan's and explain's own --kernel


def call_plan(args: argparse.Namespace) -> tuple[CopyPlan | ReducePlan, str]:
    """The plan tmakit's `copy_` (`--kernel copy`: into the tensor's layout; `transpose`: into the
    other) or `reduce_into_` (`--kernel reduce`, `--reduce OP`) makes on an H200 (its SM count and
    L2), with `--copy`'s options, as `api.copy.plan_copy` makes it: the tile the call's default
    (or `--tile`, or --copy's tile), a compact tensor with `as_rows`/`bulk` as its rows view,
    swizzle 0. --highlight, --cluster, --stages, --consumer-warps and --swizzle do not apply."""
    kernel = args.kernel
    refused = (
        "highlight",
        "cluster",
        "stages",
        "consumer_warps",
        "swizzle",
        *family_flags(),
    )
    refuse_given(args, refused, f"to --kernel {kernel} (tmakit's copy plans its own ring, unswizzled)")
    if kernel == "reduce" and args.reduce is None:
        raise CommandError("--kernel reduce plans a reduce store: give --reduce OP (add, max, ...)")
    if kernel != "reduce":
        refuse_given(args, ("reduce",), f"to --kernel {kernel}")
    options = CopyOptions.parse(args.copy or "")
    if options.tile is not None and "tile" in args.given:
        raise CommandError("give the tile once: --tile or --copy tile=..., not both")
    if kernel == "reduce" and (options.as_rows or options.bulk):
        raise CommandError("--kernel reduce: a reduce takes the copy's options but as_rows and bulk")
    element = dtype_named(args.dtype)
    transpose = kernel == "transpose"
    strides = padded_strides(args.shape, element.nbytes, args.layout) if args.pad else None
    config = LoadConfig(args.shape, element.name, SEED.tile, 0, args.layout, strides)
    compact = not args.pad and not transpose
    tensor_bytes = element.nbytes * math.prod(args.shape)
    in_l2 = fits_l2(tensor_bytes, DEFAULT_L2_BYTES)
    numel = math.prod(args.shape)
    rows_default = default_as_rows(options, transpose, compact, in_l2, numel, element.nbytes)
    if kernel != "reduce" and "tile" not in args.given and rows_default:
        options = CopyOptions(as_rows=True)  # beyond the L2, as copy_ plans it
    view = copy_rows_view(options, args.shape, element.name, (config.element_strides,) * 2, compact)
    tile = args.tile if "tile" in args.given else None
    if tile is None:
        tile = options.default_tile(element.name, transpose, view, DEFAULT_SM_COUNT, tensor_bytes)
    if view is not None:  # planned as the rows of its memory, as copy_ plans it
        config = LoadConfig(view, element.name, tile, 0, "row")
    else:
        config = LoadConfig(args.shape, element.name, tile, 0, args.layout, strides)
    check_load_config(config, stride_fix=PAD_FIX)
    copy = options.plan(
        LoadPlan(config), transpose, DEFAULT_SM_COUNT, fits_l2(tensor_bytes, DEFAULT_L2_BYTES)
    )
    other = {"row": "col", "col": "row"}[args.layout] if transpose else args.layout
    rows = f", as {view[0]} rows of {view[1]}" if view is not None else ""
    head = f"{kernel:<18}{args.layout}-major source into a {other}-major destination{rows}"
    head += f" ({options.describe()})"
    return (ReducePlan(copy, args.reduce) if kernel == "reduce" else copy), head


def add_kernel_arguments(parser: argparse.ArgumentParser, kernel: str, reduce: str) -> None:
    """The options of a command that shows what one of tmakit's calls plans (`plan`, `explain`):
    `--kernel` and each kernel's own arguments (each family's: its `add_arguments`), the same flags
    on both; `kernel` and `reduce` say what the command does with those."""
    parser.add_argument("--kernel", choices=[*KERNELS, *family_kernels()], default="load", help=kernel)
    parser.add_argument(
        "--copy", metavar="NAME=VALUE,...", help="--kernel copy/transpose/reduce: tmakit.CopyOptions fields"
    )
    parser.add_argument("--reduce", type=REDUCE_OP, metavar="OP", help=reduce)
    for family in registry.parts("explain"):
        family.add_arguments(parser)


def family_kernels() -> dict[str, ModuleType]:
    """The `--kernel` names the families plan and explain, each to its `explain` part
    (`tmakit.registry`)."""
    return {kernel: family for family in registry.parts("explain") for kernel in family.KERNELS}


def family_help() -> str:
    """What the families' `--kernel` names plan, for the commands' help: each family's `WHAT`."""
    return ", ".join(family.WHAT for family in registry.parts("explain"))


def family_flags(but: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The options only one family reads (`--rows`), `but` those: every other kernel refuses them."""
    return tuple(flag for family in registry.parts("explain") for flag in family.FLAGS if flag not in but)


def explained_alone(args: argparse.Namespace) -> tuple[str, ModuleType] | None:
    """The flag given and its family where a family's flag alone picks it for `explain` (its
    `EXPLAINS_ALONE`: `explain --im2col SPEC` explains an im2col box without --kernel im2col);
    None where no such flag is given."""
    for family in registry.parts("explain"):
        if getattr(family, "EXPLAINS_ALONE", None) is None:
            continue
        for flag in family.FLAGS:
            if getattr(args, flag, None) is not None:
                return flag, family
    return None
