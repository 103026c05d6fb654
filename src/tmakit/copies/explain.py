"""`tmakit plan` and `tmakit explain` of a copy: `--kernel copy` (a destination in the tensor's
layout) and `--kernel transpose` (one in the other), with `--copy`'s options and `--tile`: the
decision `tmakit.copy_` makes on --gpu (`copies.plan.decide_copy`, what `copy_path` reads), then the
plan of its ring where TMA serves it and, explained, the seed's three questions of that ring."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

from ..cli.args import PAD_FIX, CommandError, check_listed_tiles, emit, refuse_given
from ..cli.kernels import TOO_MANY_TILES_FIX, described_route, family_flags, route_lines, with_sms
from ..config import DTYPES, SEED, LoadConfig, dtype_named, padded_strides
from ..errors import TmaConfigError
from ..explain import explain as explain_ring
from ..explain import highlight_tile, to_text
from ..limits import GPUS
from ..plan import CopyOptions, CopyPlan, LoadPlan
from ..plan.route import PairFacts, TensorFacts, moved_dtype
from ..validate import check_load_config
from .plan import CopyDecision, decide_copy

KERNELS = ("copy", "transpose")  # the --kernel names this family plans and explains
FLAGS = ()  # no option only it reads: --copy and --gpu are the reduce's too
WHAT = "tmakit.copy_ of the tensor into one of its layout (copy) or of the other (transpose)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Nothing of its own: `--copy` and `--gpu` are the commands' (`cli.kernels`)."""


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


def copy_choice(args: argparse.Namespace) -> CopyChoice:
    """`--kernel copy|transpose`: the decision `tmakit.copy_` makes for a destination in the
    tensor's layout (copy: the source's strides) or the other (transpose: compact), on --gpu, with
    `--copy`'s options and `--tile` (`copies.plan.decide_copy`, what `copy_path` reads), and
    the plan of its ring where TMA serves it."""
    kernel = args.kernel
    refused = ("highlight", "cluster", "stages", "consumer_warps", "swizzle", "reduce")
    refuse_given(
        args,
        (*refused, *family_flags()),
        f"to --kernel {kernel} (tmakit's copy plans its own ring, unswizzled)",
    )
    options = with_sms(args, CopyOptions.parse(args.copy or ""))
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


def plan(args: argparse.Namespace) -> int:
    """`plan --kernel copy|transpose`: the route the call takes on --gpu, then the plan of its ring."""
    choice = copy_choice(args)
    lines = choice.lines(args.gpu)
    emit(args, {"kernel": {"kind": args.kernel, **choice.described(args.gpu)}}, "\n".join(lines))
    return 0


def explain(args: argparse.Namespace) -> int:
    """`explain --kernel copy|transpose`: the route `tmakit.copy_` takes on --gpu, then, where TMA
    serves it, the seed's three questions of its ring."""
    choice = copy_choice(args)
    lines = choice.lines(args.gpu)
    if choice.plan is None:
        emit(args, {"kernel": {"kind": args.kernel, **choice.described(args.gpu)}}, "\n".join(lines))
        return 0
    copy = choice.plan
    check_listed_tiles(copy.ring.tiles_of_block(0), "explain", TOO_MANY_TILES_FIX)
    result = explain_ring(copy.ring, highlight_tile(copy.load, None), None, None)
    result["kernel"] = {"kind": args.kernel, **choice.described(args.gpu)}
    emit(args, result, "\n".join([*lines, "", to_text(result)]))
    return 0
