"""`tmakit plan`: the seed's arithmetic for a configuration, and the grid of its tiles (no GPU)."""

from __future__ import annotations

import argparse

from ..explain import describe_plan
from ..plan import MulticastPlan, PipelinePlan
from .args import COUNT, Subparsers, add_count, add_json, add_load_arguments, emit, shown_load


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("plan", help="the seed's arithmetic for a configuration (no GPU)")
    add_load_arguments(parser, "also show each CTA's slice in a cluster sharing every tile by multicast")
    add_count(parser, "--stages", COUNT, "ring stages (default 1: the seed's one-stage kernel)", default=1)
    add_json(parser, "the plan's numbers")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    load, multicast, highlight = shown_load(args)
    if multicast is not None and args.stages > 1:
        multicast = MulticastPlan(load, args.cluster, stages=args.stages)
    numbers = describe_plan(load, highlight, multicast)
    if multicast is not None:
        summary = "\n".join([load.summary(multicast.grid_line()), multicast.summary()])
    elif args.stages > 1:
        ring = PipelinePlan(load, stages=args.stages)
        summary = ring.summary()
        numbers["ring"] = {
            "stages": ring.stages,
            "stage_bytes": ring.stage_bytes,
            "threads_per_block": ring.threads_per_block,
            "shared_memory_requested": ring.smem_bytes,
            "most_stages_that_fit": ring.max_stages,
        }
    else:
        summary = load.summary()
    if multicast is not None and args.stages > 1:
        numbers["clusters"]["stages"] = args.stages
    emit(args, numbers, "\n".join([summary, "", load.diagram(highlight)]))
    return 0
