"""`tmakit check`: replay a barrier schedule on the CPU model of TMA and mbarrier, a mistake
injected on request, and report hangs, races and parity errors (no GPU)."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from ..explain.common import configuration
from ..model import (
    REPLAYED_TILES,
    SHOWN_TILES,
    Event,
    ends,
    multicast_schedule,
    pipeline_schedule,
    replay,
    seed_schedule,
    tiles_to_replay,
)
from ..plan import LoadPlan, PipelinePlan
from .args import (
    CommandError,
    add_json,
    add_schedule_arguments,
    cluster_plan,
    emit,
    load_plan,
)

# --mistake: what each injects, and the schedules it applies to.
EVERY_SCHEDULE = ("one-stage", "ring", "cluster")
MISTAKES = {
    "none": ("the schedule as the kernel runs it", EVERY_SCHEDULE),
    "expect-more": ("expect 8 bytes more than a tile (the seed's 32776: tile + barrier)", EVERY_SCHEDULE),
    "expect-less": ("expect 16 bytes less than a tile", EVERY_SCHEDULE),
    "skip-arrival": ("declare the bytes without arriving", ("one-stage",)),
    "same-parity": ("wait on parity 0 every time", ("one-stage",)),
    "skip-empty-wait": ("the producer reuses a stage without waiting for its release", ("ring",)),
    "expect-slice": ("each CTA expects only its own slice, not the whole tile", ("cluster",)),
}
EXPECT_MORE_BYTES, EXPECT_LESS_BYTES = 8, -16
# `--full` replays and prints every tile: 2^13 take a second or two (a 2x2 cluster's four CTAs
# included) and a few MB of trace; a block of 2^31 would run for hours.
MAX_FULL_TILES = 1 << 13


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_schedule_arguments(
        parser,
        "replay the N-stage ring of block 0 (producer and consumer warps) instead of the seed's loop",
        "replay one cluster of this shape, each CTA multicasting its slice",
    )
    parser.add_argument(
        "--mistake",
        choices=list(MISTAKES),
        default="none",
        help="inject a mistake to see it caught: "
        + "; ".join(f"{name}: {meaning}" for name, (meaning, _) in MISTAKES.items() if name != "none"),
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help=f"replay every tile of the block (of at most {MAX_FULL_TILES}) and print the whole trace "
        f"(default: its first {REPLAYED_TILES} "
        "tiles, or two rounds of a longer ring, every pattern the schedule has; the trace's first and "
        f"last tiles, {SHOWN_TILES} per CTA)",
    )
    add_json(parser, "the findings and the trace")


# `check` replays block 0 (or cluster 0) as a block of its first tiles, as many as show every
# pattern of its schedule (model.schedule.tiles_to_replay), and prints the ends of the trace;
# `--full` replays and prints every tile.
def _schedule(args: argparse.Namespace, load: LoadPlan) -> tuple[str, str, int, int, list[Event]]:
    """(kind, title, tiles, period, events) of the schedule `tmakit check` replays, the mistake
    injected: the tiles of block (or cluster) 0, the period with which its loads repeat, and the
    events of the tiles replayed (every tile with --full)."""
    if args.cluster and args.stages > 1:
        raise CommandError(
            "check replays a cluster's loads with one stage: give --cluster or --stages, not both"
        )
    kind = "cluster" if args.cluster else "ring" if args.stages > 1 else "one-stage"
    if kind not in MISTAKES[args.mistake][1]:
        fits = ", ".join(name for name, (_, kinds) in MISTAKES.items() if kind in kinds)
        raise CommandError(f"--mistake {args.mistake} does not apply to a {kind} schedule; these do: {fits}")
    tile_bytes = load.expected_tx_bytes
    expected = {"expect-more": tile_bytes + EXPECT_MORE_BYTES, "expect-less": tile_bytes + EXPECT_LESS_BYTES}
    if kind == "cluster":
        multicast = cluster_plan()(load, args.cluster)
        expected["expect-slice"] = multicast.issued_bytes_per_cta
        tiles, period = load.tiles_per_block, 2
        cluster = "x".join(map(str, multicast.cluster))
        title = f"{cluster} cluster 0 ({multicast.cluster_size} CTAs, {tiles} tiles each)"
        mistake = {"expected_tx_bytes": expected.get(args.mistake)}
        events = multicast_schedule(
            _replayed(args, tiles, period), multicast.cluster_size, tile_bytes, **mistake
        )
    elif kind == "ring":
        ring = PipelinePlan(load, stages=args.stages)
        tiles, period = ring.tiles_of_block(0), 2 * ring.stages
        title = f"{ring.stages}-stage ring of block 0 ({tiles} tiles)"
        mistake = {
            "expected_tx_bytes": expected.get(args.mistake),
            "skip_empty_wait": args.mistake == "skip-empty-wait",
        }
        events = pipeline_schedule(_replayed(args, tiles, period), ring.stages, tile_bytes, **mistake)
    else:
        tiles, period = load.tiles_per_block, 2
        title = f"schedule of block 0 ({tiles} tiles)"
        mistake = {
            "expected_tx_bytes": expected.get(args.mistake),
            "skip_arrival": args.mistake == "skip-arrival",
            "parity_mistake": args.mistake == "same-parity",
        }
        events = seed_schedule(load, tiles=_replayed(args, tiles, period), **mistake)
    return kind, title, tiles, period, events


def _replayed(args: argparse.Namespace, tiles: int, period: int) -> int:
    """How many of a block's `tiles` `check` replays (`--full`: all, of a block of at most
    `MAX_FULL_TILES`)."""
    if args.full and tiles > MAX_FULL_TILES:
        raise CommandError(
            f"--full replays every tile of the block, at most {MAX_FULL_TILES} tiles; this block loads "
            f"{tiles}: drop --full (its first tiles show every pattern the schedule has) or use larger tiles"
        )
    return tiles if args.full else tiles_to_replay(tiles, period)


def run(args: argparse.Namespace) -> int:
    load = load_plan(args)
    kind, title, tiles, period, events = _schedule(args, load)
    replayed = _replayed(args, tiles, period)
    result = replay(events)
    cta = None if kind == "cluster" else 0
    shown = None if args.full else SHOWN_TILES
    trace, left_out = result.shown(cta, shown)
    first, last, findings_left_out = ends(result.findings, shown)
    notes = []
    if replayed < tiles:
        notes.append(
            f"replayed as a block of its first {replayed} tiles: the loads repeat every {period} tiles, so "
            f"the other {tiles - replayed} repeat what these do; --full replays all {tiles}"
        )
    if left_out:
        notes.append(
            f"the trace shows each CTA's first and last {shown // 2} tiles, {left_out} tiles left out in "
            "all; --full shows every tile"
        )
    if findings_left_out:
        notes.append(
            f"{shown} of the {len(result.findings)} findings are shown, the first and the last; "
            "--full shows all"
        )
    data = {
        "configuration": configuration(load),
        "schedule": kind,
        "title": title,
        "mistake": args.mistake,
        "ok": result.ok,
        "stopped_at": result.stopped_at,
        "tiles": tiles,
        "tiles_replayed": replayed,
        "trace_tiles_left_out": left_out,
        "notes": notes,
        "findings": [asdict(finding) for finding in [*first, *last]],
        "findings_left_out": findings_left_out,
        "trace": [asdict(entry) for entry in trace],
    }
    heading = f"{title}, replayed against the CPU model of TMA and mbarrier:"
    tensor_and_tile = load.summary().splitlines()[:2]  # what the bytes and tiles come from
    lines = [heading, *tensor_and_tile, *(f"({note})" for note in notes), result.describe(cta, shown)]
    emit(args, data, "\n".join(lines))
    return 0 if result.ok else 1
