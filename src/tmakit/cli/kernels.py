"""What `plan` and `explain` share: `--kernel` and each kernel's own arguments, and the plans
those arguments make (a copy's decision and plan; each family's through its `explain` part:
`tmakit.registry`), every check before anything runs or prints."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from types import ModuleType

from .. import registry
from ..config import DTYPES, SEED, LoadConfig, dtype_named, padded_strides
from ..errors import TmaConfigError
from ..limits import DEFAULT_GPU, GPUS
from ..plan import CopyOptions, CopyPlan, LoadPlan
from ..plan.copy_layout import CopyDecision, decide_copy
from ..plan.route import PairFacts, Route, TensorFacts, moved_dtype
from ..validate import check_load_config
from .args import PAD_FIX, REDUCE_OP, CommandError, refuse_given

KERNELS = ("load", "copy", "transpose")  # plan's and explain's own --kernel
TOO_MANY_TILES_FIX = "use larger tiles; `tmakit plan` shows the block without listing it"


# What `plan`/`explain --kernel` assume of a call's tensors besides their flags: the facts a route
# reads that flags do not give.
ASSUMED = (
    "the tensors on one GPU of --gpu, their base addresses 16-byte aligned and apart (no overlap), "
    "none recorded by autograd, not inside a CUDA-graph capture"
)


NO_TMA_PLAN = "no TMA plan       torch's op serves the call"


@dataclass(frozen=True)
class CopyChoice:
    """What `--kernel copy|transpose` plans: the decision `tmakit.copy_` makes on the named GPU
    (`decision`: its route, then the plan of its pair, as `tmakit.copy_path` reads it), the
    concrete plan of a TMA route's ring (None: torch's copy_ serves the call) and its head line."""

    decision: CopyDecision
    plan: CopyPlan | None
    head: str

    def lines(self, gpu: str) -> list[str]:
        """The route on `gpu`, the facts assumed, then the plan (or why there is none)."""
        plan = [] if self.plan is None else [self.head, *self.plan.summary().splitlines()]
        return route_lines(self.decision.route, gpu, plan)

    def described(self, gpu: str) -> dict:
        """`--json`'s kernel entry: the route, the GPU, the facts assumed and the summary lines."""
        return described_route(self.decision.route, gpu, self.lines(gpu))


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


def copy_choice(args: argparse.Namespace) -> CopyChoice:
    """`--kernel copy|transpose`: the decision `tmakit.copy_` makes for a destination in the
    tensor's layout (copy: the source's strides) or the other (transpose: compact), on --gpu, with
    `--copy`'s options and `--tile` (`plan.copy_layout.decide_copy`, what `copy_path` reads), and
    the plan of its ring where TMA serves it."""
    kernel = args.kernel
    refused = ("highlight", "cluster", "stages", "consumer_warps", "swizzle", "reduce")
    refuse_given(
        args,
        (*refused, *family_flags()),
        f"to --kernel {kernel} (tmakit's copy plans its own ring, unswizzled)",
    )
    options = CopyOptions.parse(args.copy or "")
    if "tile" in args.given:
        if options.tile is not None:
            raise CommandError("give the tile once: --tile or --copy tile=..., not both")
        options = replace(options, tile=args.tile)
    element = dtype_named(args.dtype)
    transpose = kernel == "transpose"
    strides = padded_strides(args.shape, element.nbytes, args.layout) if args.pad else None
    source = LoadConfig(args.shape, element.name, SEED.tile, 0, args.layout, strides)
    other = {"row": "col", "col": "row"}[args.layout] if transpose else args.layout
    destination = LoadConfig(args.shape, element.name, SEED.tile, 0, other) if transpose else source
    name, sm_count, l2_bytes = GPUS[args.gpu]
    facts = PairFacts(*(
        TensorFacts(args.shape, config.element_strides, element.torch_name, element.nbytes, address, 0)
        for config, address in ((destination, 1 << 40), (source, 1 << 41))
    ))  # fmt: skip
    decision = decide_copy(facts, options, (sm_count, l2_bytes), l2_bytes)
    pair = decision.pair
    if pair is None:
        return CopyChoice(decision, None, "")
    moved = DTYPES[moved_dtype(element.torch_name)].name
    if pair.view is not None:  # planned as the rows of its memory, as copy_ plans it
        config = LoadConfig(pair.view, moved, pair.tile, 0, "row")
    else:
        shape, src_strides, _ = decision.route.view or (args.shape, source.element_strides, None)
        config = LoadConfig(shape, moved, pair.tile, 0, pair.majors[0], src_strides)
    rows = f", as {pair.view[0]} rows of {pair.view[1]}" if pair.view is not None else ""
    try:
        check_load_config(config, stride_fix=PAD_FIX)
    except TmaConfigError:  # a view only its class takes (extent-1 dims dropped): the class's plan
        plan, rows = pair.copy, f"{rows}, its class (extents given at each call)"
    else:
        plan = pair.options.plan(LoadPlan(config), pair.transpose, sm_count, pair.fits_l2)
    head = f"{kernel:<18}{args.layout}-major source into a {other}-major destination{rows}"
    return CopyChoice(decision, plan, f"{head} ({pair.options.describe()})")


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
    """`--copy`'s options (tmakit.CopyOptions), the tile given once (--tile or --copy's)."""
    options = CopyOptions.parse(args.copy or "")
    if options.tile is not None and "tile" in args.given:
        raise CommandError("give the tile once: --tile or --copy tile=..., not both")
    return options


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
