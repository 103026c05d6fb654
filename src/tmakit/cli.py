"""The `tmakit` command: parse, call the library, print."""

from __future__ import annotations

import argparse
import json
import sys

from .config import SEED, LoadConfig, dtype_named, parse_extents
from .errors import TmaConfigError
from .plan import LoadPlan


def _add_config_arguments(parser: argparse.ArgumentParser) -> None:
    default_shape = "x".join(map(str, SEED.shape))
    default_tile = "x".join(map(str, SEED.tile))
    parser.add_argument(
        "--shape", default=default_shape, help=f"[BATCHx...]ROWSxCOLS, rank 2-5 (default {default_shape})"
    )
    parser.add_argument("--dtype", default=SEED.dtype, help=f"element type (default {SEED.dtype})")
    parser.add_argument("--tile", default=default_tile, help=f"ROWSxCOLS (default {default_tile})")
    parser.add_argument("--swizzle", type=int, default=0, help="TMA swizzle in bytes: 0, 32, 64, 128")
    parser.add_argument(
        "--layout", choices=("row", "col"), default="row", help="contiguous dim: columns (row) or rows (col)"
    )
    parser.add_argument(
        "--pad", action="store_true", help="pad the contiguous dim to 16 bytes (tmakit.padded_empty)"
    )
    parser.add_argument("--highlight", default="1,2", help="tile ROW_BLOCK,COLUMN_TILE to mark (default 1,2)")


def _plan_from(args: argparse.Namespace) -> LoadPlan:
    from .sweep import padded_strides

    element = dtype_named(args.dtype)
    shape = parse_extents(args.shape, "shape", rank=None)
    config = LoadConfig(
        shape=shape,
        dtype=args.dtype,
        tile=parse_extents(args.tile, "tile"),
        swizzle=args.swizzle,
        major=args.layout,
        strides=padded_strides(shape, element.nbytes, args.layout) if args.pad else None,
    )
    return LoadPlan(config)


def _cmd_plan(args: argparse.Namespace) -> int:
    plan = _plan_from(args)
    print(plan.summary())
    print()
    print(plan.diagram(parse_extents(args.highlight, "highlight")))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return 0 if run_demo(_plan_from(args), parse_extents(args.highlight, "highlight")) else 1


def _cmd_verify(args: argparse.Namespace) -> int:
    from .gpu import find_hopper_gpu
    from .isolate import run_isolated
    from .sweep import summarize, sweep_configs

    gpu_name, why = find_hopper_gpu()
    if gpu_name is None:
        print(f"tmakit verify needs a Hopper GPU: {why}", file=sys.stderr)
        return 2
    configs = sweep_configs(args.sweep, args.seed) if args.sweep else [_plan_from(args).config]
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    console = Console()
    with Progress(console=console) as progress:
        task = progress.add_task(f"verifying on {gpu_name}", total=len(configs))

        def report(config: LoadConfig, result: dict) -> None:
            progress.advance(task)
            if result["status"] != "ok":
                progress.console.print(f"[red]{result['status']}[/red] {config}: {result}")

        results = run_isolated(configs, args.timeout, report)
    summary = summarize(configs, results, args.seed)
    table = Table(title=f"{len(configs)} configurations on {gpu_name}")
    for column in ("cell (dtype/swizzle/layout)", "ok", "mismatch", "hang", "error"):
        table.add_column(column)
    for cell, counts in summary["cells"].items():
        table.add_row(cell, *(str(counts.get(k, 0)) for k in ("ok", "mismatch", "hang", "error")))
    console.print(table)
    console.print(
        f"ok {summary['ok']}, mismatches {summary['mismatches']}, hangs {summary['hangs']}, "
        f"errors {summary['errors']}; partial tiles in {summary['with_partial_tiles']}, "
        f"prime or unit extent in {summary['with_prime_or_unit_extent']}; "
        f"cells {len(summary['cells'])}/{summary['cells_expected']}"
    )
    if len(configs) == 1:
        console.print(results[0])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
        console.print(f"wrote {args.json}")
    return 0 if summary["ok"] == len(configs) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tmakit", description="TMA tile loads in CuTe DSL.")
    commands = parser.add_subparsers(dest="command", required=True)
    plan_cmd = commands.add_parser("plan", help="the seed's arithmetic for a configuration")
    _add_config_arguments(plan_cmd)
    plan_cmd.set_defaults(run=_cmd_plan)
    demo_cmd = commands.add_parser(
        "demo", help="run and verify the seed's kernel (or compile it, without a GPU)"
    )
    _add_config_arguments(demo_cmd)
    demo_cmd.set_defaults(run=_cmd_demo)
    verify_cmd = commands.add_parser("verify", help="verify loads on the GPU: one configuration or a sweep")
    _add_config_arguments(verify_cmd)
    verify_cmd.add_argument("--sweep", type=int, default=0, help="N random valid configurations")
    verify_cmd.add_argument("--seed", type=int, default=0, help="random seed of the sweep")
    verify_cmd.add_argument("--timeout", type=float, default=60.0, help="seconds per configuration")
    verify_cmd.add_argument("--json", help="write the report here")
    verify_cmd.set_defaults(run=_cmd_verify)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (TmaConfigError, ValueError) as error:
        print(f"tmakit: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
