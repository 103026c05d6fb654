"""`tmakit demo`: run and verify the seed's kernel on a Hopper GPU, or compile it without one."""

from __future__ import annotations

import argparse

from ..demo import run_demo
from ..explain import highlight_tile
from .args import Subparsers, add_cluster, add_highlight, add_tensor_arguments, load_plan, multicast_plan


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "demo", help="run and verify the seed's kernel (or compile it, without a GPU)"
    )
    add_tensor_arguments(parser)
    add_highlight(parser)
    add_cluster(parser, "run (or compile) the multicast kernel of this cluster shape instead")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    load = load_plan(args)
    multicast = multicast_plan(args, load)
    highlight = highlight_tile(load, args.highlight)
    return 0 if run_demo(load, highlight, print, multicast) else 1
