"""`tmakit verify`: loads verified element for element on a Hopper GPU: one configuration (its
pipelined ring or its clusters too) or a sweep of random ones, each in a worker of its own. The
verifications are the load and cluster families' `check` parts, read by name
(`tmakit.registry.exporting`)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from .. import registry
from ..check.isolate import run_isolated
from ..check.sweep import summarize, sweep_configs
from ..config import LoadConfig
from ..plan import PipelinePlan
from .args import (
    NON_NEGATIVE,
    CommandError,
    add_count,
    add_json,
    add_schedule_arguments,
    cluster_plan,
    hopper_gpu,
    load_plan,
    number,
    refuse_given,
    text_stream,
    write_json,
)

VERIFY_TIMEOUT_SECONDS = 60.0  # per configuration's worker: ample for a compile and a load
MAX_TIMEOUT_SECONDS = 86_400  # a day: a worker still running by then has hung
MAX_SWEEP = 10_000  # configurations verified one worker at a time: hours of GPU time already
SWEEP = number(int, 0, MAX_SWEEP)
SEED_NUMBER = number(int, 0, 2**64 - 1)
SECONDS = number(float, 0, MAX_TIMEOUT_SECONDS, " of seconds")
TENSOR_FLAGS = ("shape", "dtype", "tile", "swizzle", "layout", "pad")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_schedule_arguments(
        parser,
        "> 1: verify the N-stage pipelined load (or multicast ring)",
        "verify every CTA of clusters of this shape, with multicast and without",
    )
    add_count(parser, "--sweep", SWEEP, "verify N random valid configurations instead", default=0)
    parser.add_argument("--seed", type=SEED_NUMBER, help="random seed of the sweep (default 0)")
    parser.add_argument(
        "--timeout",
        type=SECONDS,
        help="seconds each one-stage configuration's worker may run before it counts as a hang "
        f"(default {VERIFY_TIMEOUT_SECONDS:g})",
    )
    add_count(
        parser,
        "--prefetch",
        NON_NEGATIVE,
        "verify the pipelined load prefetching N tiles ahead into L2 (and the descriptor)",
        default=0,
    )
    add_json(parser, "the verdicts")


def _check_flags(args: argparse.Namespace) -> None:
    """The flags that do not go together, refused before a ring or cluster is planned."""
    if args.sweep and (args.cluster or args.stages > 1 or args.prefetch):
        raise CommandError("--sweep verifies one-stage loads: drop --cluster, --stages and --prefetch")
    if args.sweep:
        refuse_given(args, TENSOR_FLAGS, "with --sweep: it draws its own configurations")
    if args.cluster and args.prefetch:
        raise CommandError("--prefetch verifies the pipelined load of one CTA: drop --cluster")
    if args.seed is not None and not args.sweep:
        raise CommandError("--seed picks the configurations of --sweep: give --sweep N too")


def run(args: argparse.Namespace) -> int:
    load = load_plan(args)
    _check_flags(args)
    clusters = [
        cluster_plan()(load, args.cluster, multicast, args.stages)
        for multicast in (True, False)
        if args.cluster
    ]
    pipeline = None
    if not args.cluster and (args.prefetch or args.stages > 1):
        pipeline = PipelinePlan(
            load, stages=args.stages, prefetch_tiles=args.prefetch, prefetch_descriptor=args.prefetch > 0
        )
    if args.timeout is not None and (clusters or pipeline):  # those run in this process, guarded
        raise CommandError(
            "--timeout limits each one-stage load's worker: drop --cluster, --stages, --prefetch"
        )
    seed = args.seed or 0
    configs = sweep_configs(args.sweep, seed) if args.sweep else [load.config]
    gpu_name = hopper_gpu("verify")
    if clusters:
        ok, result = _verify_clusters(args, clusters)
    elif pipeline is not None:
        ok, result = _verify_pipeline(args, pipeline)
    else:
        ok, result = _verify_configs(args, configs, seed, gpu_name)
    if args.json:
        write_json(args.json, result)
    return 0 if ok else 1


def _verify_clusters(args: argparse.Namespace, clusters: list[Any]) -> tuple[bool, dict[str, Any]]:
    """Every CTA of every cluster (`MulticastPlan`s), multicast and the baseline."""
    out = text_stream(args)
    verify_multicast_load = registry.exporting("verify_multicast_load", "check").verify_multicast_load
    ctas = []
    for cluster in clusters:
        for rank, verdict in enumerate(verify_multicast_load(cluster)):
            ctas.append(
                {"multicast": cluster.multicast, "rank": rank, "ok": verdict.ok, "verdict": str(verdict)}
            )
            print(f"{'multicast' if cluster.multicast else 'baseline '} CTA {rank}: {verdict}", file=out)
    ok = all(cta["ok"] for cta in ctas)
    return ok, {"cluster": list(args.cluster), "stages": args.stages, "ok": ok, "ctas": ctas}


def _verify_pipeline(args: argparse.Namespace, pipeline: PipelinePlan) -> tuple[bool, dict[str, Any]]:
    """The pipelined load, store-back verified, guarded against a hang."""
    out = text_stream(args)
    print(pipeline.summary(), file=out)
    verify_pipelined_load = registry.exporting("verify_pipelined_load", "check").verify_pipelined_load
    verdict = verify_pipelined_load(pipeline, "store", hang_guard=True)
    print(verdict, file=out)
    result = {
        "stages": pipeline.stages,
        "prefetch_tiles": args.prefetch,
        "ok": verdict.ok,
        "verdict": str(verdict),
    }
    return verdict.ok, result


def _verify_configs(
    args: argparse.Namespace, configs: list[LoadConfig], seed: int, gpu_name: str
) -> tuple[bool, dict[str, Any]]:
    """One-stage loads, each configuration in a worker of its own, summed up in a table."""
    console = Console(file=text_stream(args))
    with Progress(console=console) as progress:
        task = progress.add_task(f"verifying on {gpu_name}", total=len(configs))

        def progress_report(config: LoadConfig, outcome: dict) -> None:
            progress.advance(task)
            if outcome["status"] != "ok":
                progress.console.print(f"[red]{outcome['status']}[/red] {config}: {outcome}")

        results = run_isolated(configs, args.timeout or VERIFY_TIMEOUT_SECONDS, progress_report)
    result = summarize(configs, results, seed)
    table = Table(title=f"{len(configs)} configurations on {gpu_name}")
    for column in ("cell (dtype/swizzle/layout)", "ok", "mismatch", "hang", "error"):
        table.add_column(column)
    for cell, counts in result["cells"].items():
        table.add_row(cell, *(str(counts.get(k, 0)) for k in ("ok", "mismatch", "hang", "error")))
    console.print(table)
    console.print(
        f"ok {result['ok']}, mismatches {result['mismatches']}, hangs {result['hangs']}, "
        f"errors {result['errors']}; partial tiles in {result['with_partial_tiles']}, "
        f"prime or unit extent in {result['with_prime_or_unit_extent']}; "
        f"cells {len(result['cells'])}/{result['cells_expected']}"
    )
    if len(configs) == 1:
        console.print(results[0])
    return result["ok"] == len(configs), result
