"""`tmakit plan`: the seed's arithmetic for a configuration, and the grid of its tiles (no GPU)."""

from __future__ import annotations

import argparse

from ..explain import describe_plan, highlight_tile
from .args import (
    Subparsers,
    add_cluster,
    add_highlight,
    add_json,
    add_tensor_arguments,
    emit,
    load_plan,
    multicast_plan,
)


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("plan", help="the seed's arithmetic for a configuration (no GPU)")
    add_tensor_arguments(parser)
    add_highlight(parser)
    add_cluster(parser, "also show each CTA's slice in a cluster sharing every tile by multicast")
    add_json(parser, "the plan's numbers")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    load = load_plan(args)
    multicast = multicast_plan(args, load)
    highlight = highlight_tile(load, args.highlight)
    text = "\n".join(
        [load.summary(), *([multicast.summary()] if multicast else []), "", load.diagram(highlight)]
    )
    emit(args, describe_plan(load, highlight, multicast), text)
    return 0
