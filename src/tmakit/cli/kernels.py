"""What `plan` and `explain` share: `--kernel` and each kernel's own arguments (each family's
through its `explain` part: `tmakit.registry`), and what a family's call planned on a GPU prints
first (its route, the GPU, the facts assumed), every check before anything runs or prints."""

from __future__ import annotations

import argparse
import dataclasses
from types import ModuleType

from .. import registry
from ..limits import DEFAULT_GPU, GPUS
from ..plan import CopyOptions
from ..plan.route import Route
from .args import COUNT, REDUCE_OP, CommandError, add_count, refuse_given

KERNELS = ("load",)  # plan's and explain's own --kernel (the families' are theirs)
TOO_MANY_TILES_FIX = "use larger tiles; `tmakit plan` shows the block without listing it"


# What `plan`/`explain --kernel` assume of a call's tensors besides their flags: the facts a route
# reads that flags do not give.
ASSUMED = (
    "the tensors on one GPU of --gpu, their base addresses 16-byte aligned and apart (no overlap), "
    "none recorded by autograd, not inside a CUDA-graph capture"
)


NO_TMA_PLAN = "no TMA plan       torch's op serves the call"


def route_lines(route: Route, gpu: str, plan: list[str]) -> list[str]:
    """What `plan`/`explain --kernel` print first: the `route` the call takes on `gpu` (a key of
    `GPUS`) and the facts assumed, then the `plan` of that route's kernel (none: torch's op)."""
    name, sm_count, l2_bytes = GPUS[gpu]
    found = [
        f"route             {route.path} ({route.reason})",
        f"on                an {name} ({sm_count} SMs, {l2_bytes >> 20} MiB of L2)",
        f"assumes           {ASSUMED}",
    ]
    if plan:
        return [*found, *plan]
    return [*found, "no kernel         nothing to move" if route.path == "empty" else NO_TMA_PLAN]


def described_route(route: Route, gpu: str, lines: list[str]) -> dict:
    """`--json`'s kernel entry of a routed call: its route, the GPU, the facts assumed, the lines."""
    path = {"path": route.path, "reason": route.reason, "moved_as": route.moved_as}
    return {"gpu": gpu, "route": path, "assumes": ASSUMED, "summary": lines}


def refuse_call_flags(args: argparse.Namespace) -> None:
    """What a family's call on the copy's ring (a reduce's) refuses: --highlight, --cluster,
    --stages, --consumer-warps, --swizzle and the families' own options (`--gpu` it reads)."""
    refused = (
        "highlight",
        "cluster",
        "stages",
        "consumer_warps",
        "swizzle",
        *family_flags(),
    )
    refuse_given(args, refused, f"to --kernel {args.kernel} (tmakit's copy plans its own ring, unswizzled)")


def call_options(args: argparse.Namespace) -> CopyOptions:
    """`--copy`'s options (tmakit.CopyOptions), the tile given once (--tile or --copy's) and the
    budget once (--sms or --copy sms=)."""
    options = CopyOptions.parse(args.copy or "")
    if options.tile is not None and "tile" in args.given:
        raise CommandError("give the tile once: --tile or --copy tile=..., not both")
    return with_sms(args, options)


def with_sms(args: argparse.Namespace, options: CopyOptions) -> CopyOptions:
    """`options` with --sms's budget, given once (--sms or --copy sms=)."""
    if args.sms is None:
        return options
    if options.sms is not None:
        raise CommandError("give the budget once: --sms or --copy sms=..., not both")
    return dataclasses.replace(options, sms=args.sms)


def add_kernel_arguments(parser: argparse.ArgumentParser, kernel: str, reduce: str) -> None:
    """The options of a command that shows what one of tmakit's calls plans (`plan`, `explain`):
    `--kernel` and each kernel's own arguments (each family's: its `add_arguments`), the same flags
    on both; `kernel` and `reduce` say what the command does with those."""
    parser.add_argument("--kernel", choices=[*KERNELS, *family_kernels()], default="load", help=kernel)
    parser.add_argument(
        "--gpu",
        choices=tuple(GPUS),
        default=DEFAULT_GPU,
        help=f"the GPU whose call --kernel plans (its SMs and L2; default {DEFAULT_GPU})",
    )
    parser.add_argument(
        "--copy", metavar="NAME=VALUE,...", help="--kernel copy/transpose/reduce: tmakit.CopyOptions fields"
    )
    parser.add_argument("--reduce", type=REDUCE_OP, metavar="OP", help=reduce)
    add_count(
        parser,
        "--sms",
        COUNT,
        "--kernel copy/transpose/reduce/rows/many/im2col/moe: an SM budget, the call's sms=N (a grid of N "
        "blocks, one an SM); for copy/transpose/reduce also --copy sms=N",
    )
    for family in registry.parts("explain"):
        family.add_arguments(parser)


def family_kernels() -> dict[str, ModuleType]:
    """The `--kernel` names the families plan and explain, each to its `explain` part
    (`tmakit.registry`)."""
    return {kernel: family for family in registry.parts("explain") for kernel in family.KERNELS}


def family_help() -> str:
    """What the families' `--kernel` names plan, for the commands' help: each family's `WHAT`
    (a family with no `--kernel` of its own has none)."""
    return ", ".join(family.WHAT for family in registry.parts("explain") if family.KERNELS)


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
