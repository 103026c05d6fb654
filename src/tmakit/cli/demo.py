"""`tmakit demo`: run and verify the seed's kernel on a Hopper GPU, or compile it without one."""

from __future__ import annotations

import argparse
from typing import Any

from ..demo import run_demo
from ..explain import describe_plan
from .args import (
    add_json,
    add_load_arguments,
    check_listed_tiles,
    shown_load,
    text_stream,
    write_json,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_load_arguments(parser, "run (or compile) the multicast kernel of this cluster shape instead")
    add_json(parser, "the plan and what the run found (verdict, device time; or the PTX's instructions)")


def run(args: argparse.Namespace) -> int:
    load, multicast, highlight = shown_load(args)
    if args.json:  # its plan lists block 0's phases, a tile each; refused before anything runs
        check_listed_tiles(load.tiles_per_block, "demo --json", "use larger tiles, or drop --json")
    out = text_stream(args)
    report: dict[str, Any] = {}
    ok = run_demo(load, highlight, lambda line="": print(line, file=out), multicast, report)
    if args.json:
        write_json(args.json, {"plan": describe_plan(load, highlight, multicast), "run": report, "ok": ok})
    return 0 if ok else 1
