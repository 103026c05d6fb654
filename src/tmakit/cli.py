"""The `tmakit` command: parse, call the library, print."""

from __future__ import annotations

import argparse
import sys

from .config import SEED, LoadConfig, dtype_named, parse_extents
from .errors import TmaConfigError
from .plan import LoadPlan


def _add_config_arguments(parser: argparse.ArgumentParser) -> None:
    default_shape = "x".join(map(str, SEED.shape))
    default_tile = "x".join(map(str, SEED.tile))
    parser.add_argument("--shape", default=default_shape, help=f"ROWSxCOLS (default {default_shape})")
    parser.add_argument("--dtype", default=SEED.dtype, help=f"element type (default {SEED.dtype})")
    parser.add_argument("--tile", default=default_tile, help=f"ROWSxCOLS (default {default_tile})")
    parser.add_argument("--highlight", default="1,2", help="tile ROW_BLOCK,COLUMN_TILE to mark (default 1,2)")


def _plan_from(args: argparse.Namespace) -> LoadPlan:
    dtype_named(args.dtype)
    config = LoadConfig(
        shape=parse_extents(args.shape, "shape"),
        dtype=args.dtype,
        tile=parse_extents(args.tile, "tile"),
    )
    return LoadPlan(config)


def _highlight(args: argparse.Namespace) -> tuple[int, int]:
    return parse_extents(args.highlight, "highlight")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tmakit", description="TMA tile loads in CuTe DSL.")
    commands = parser.add_subparsers(dest="command", required=True)
    plan_cmd = commands.add_parser("plan", help="the seed's arithmetic for a configuration")
    _add_config_arguments(plan_cmd)
    demo_cmd = commands.add_parser(
        "demo", help="run and verify the seed's kernel (or compile it, without a GPU)"
    )
    _add_config_arguments(demo_cmd)
    args = parser.parse_args(argv)

    try:
        plan = _plan_from(args)
        if args.command == "plan":
            print(plan.summary())
            print()
            print(plan.diagram(_highlight(args)))
            return 0
        from .demo import run_demo

        return 0 if run_demo(plan, _highlight(args)) else 1
    except (TmaConfigError, ValueError) as error:
        print(f"tmakit: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
