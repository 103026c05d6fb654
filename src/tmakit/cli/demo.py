"""`tmakit demo`: run and verify the seed's kernel on a Hopper GPU, or compile it without one."""

from __future__ import annotations

import argparse

from ..demo import run_demo
from .args import Subparsers, add_load_arguments, shown_load


def add_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "demo", help="run and verify the seed's kernel (or compile it, without a GPU)"
    )
    add_load_arguments(parser, "run (or compile) the multicast kernel of this cluster shape instead")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    load, multicast, highlight = shown_load(args)
    return 0 if run_demo(load, highlight, print, multicast) else 1
