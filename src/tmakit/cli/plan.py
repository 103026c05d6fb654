"""`tmakit plan`: the seed's arithmetic for a configuration, and the grid of its tiles (no GPU)."""

from __future__ import annotations

import argparse
from typing import Any

from ..explain import describe_plan
from ..plan import LoadPlan, PipelinePlan
from .args import (
    COUNT,
    add_count,
    add_json,
    add_load_arguments,
    check_listed_tiles,
    cluster_plan,
    emit,
    refuse_given,
    shown_load,
)
from .kernels import add_kernel_arguments, family_flags, family_help, family_kernels


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_load_arguments(parser, "also show each CTA's slice in a cluster sharing every tile by multicast")
    add_count(parser, "--stages", COUNT, "ring stages (default 1: the seed's one-stage kernel)", default=1)
    add_kernel_arguments(
        parser,
        f"what to plan: the tile load (default), or {family_help()}",
        "--kernel reduce: the op (add, max, ...)",
    )
    add_json(parser, "the plan's numbers")


def run(args: argparse.Namespace) -> int:
    if args.kernel != "load":
        return _plan_kernel(args)
    refuse_given(
        args,
        ("copy", "reduce", "gpu", "sms", *family_flags()),
        f"without --kernel {', '.join(family_kernels())}",
    )
    load, multicast, highlight = shown_load(args)
    if multicast is not None and args.stages > 1:
        multicast = cluster_plan()(load, args.cluster, stages=args.stages)
    ring = PipelinePlan(load, stages=args.stages) if multicast is None and args.stages > 1 else None
    if multicast is not None:
        summary = "\n".join([load.summary(multicast.grid_line()), multicast.summary()])
    else:
        summary = ring.summary() if ring is not None else load.summary()
    text = "\n".join([summary, "", load.diagram(highlight)])
    numbers = _numbers(args, load, highlight, multicast, ring) if args.json else None
    emit(args, numbers, text)
    return 0


def _numbers(
    args: argparse.Namespace,
    load: LoadPlan,
    highlight: tuple[int, int],
    multicast: Any,
    ring: PipelinePlan | None,
) -> dict[str, Any]:
    """`plan --json`'s numbers: they list block 0's phases, a tile each (the text needs none);
    `multicast`: --cluster's `MulticastPlan`, or None."""
    check_listed_tiles(load.tiles_per_block, "plan --json", "use larger tiles, or drop --json")
    numbers = describe_plan(load, highlight, multicast)
    if ring is not None:
        numbers["ring"] = {
            "stages": ring.stages,
            "stage_bytes": ring.stage_bytes,
            "threads_per_block": ring.threads_per_block,
            "shared_memory_requested": ring.smem_bytes,
            "most_stages_that_fit": ring.max_stages,
        }
    if multicast is not None and args.stages > 1:
        numbers["clusters"]["stages"] = args.stages
    return numbers


def _plan_kernel(args: argparse.Namespace) -> int:
    """`plan --kernel K` of a family (its `explain` part's `plan`): the route the call takes on
    --gpu, then the plan of that route, from the tensor's flags and the kernel's options."""
    return family_kernels()[args.kernel].plan(args)  # argparse's choices leave no other
