"""`tmakit plan`: the seed's arithmetic for a configuration, and the grid of its tiles (no GPU)."""

from __future__ import annotations

import argparse

from ..explain import describe_plan
from .args import Subparsers, add_json, add_load_arguments, emit, shown_load


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("plan", help="the seed's arithmetic for a configuration (no GPU)")
    add_load_arguments(parser, "also show each CTA's slice in a cluster sharing every tile by multicast")
    add_json(parser, "the plan's numbers")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    load, multicast, highlight = shown_load(args)
    text = "\n".join(
        [
            load.summary(multicast.grid_line(load.threads_per_block) if multicast else None),
            *([multicast.summary()] if multicast else []),
            "",
            load.diagram(highlight),
        ]
    )
    emit(args, describe_plan(load, highlight, multicast), text)
    return 0
