"""The schedules the CLI, the demo and the tests replay: the seed kernel's loop, an N-stage ring,
a multicast cluster; and how many of a long block's tiles to replay and show.

Pure Python: no cutlass, torch or DSL import.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..plan import LoadPlan
from .events import Arrive, ArriveExpectTx, Consume, Event, ExpectTx, Init, Release, TmaCopy, Wait

__all__ = [
    "REPLAYED_TILES",
    "SEED_BARRIER",
    "SHOWN_TILES",
    "multicast_schedule",
    "pipeline_schedule",
    "seed_schedule",
    "tiles_to_replay",
]

# A long block's schedule repeats its first tiles: its loads repeat with a period of two rounds
# (the parity flips each round; a ring's round is its stages), so REPLAYED_TILES tiles, or one
# period where that is longer, show every pattern it has, its start and its drain. A description
# of the replay lists SHOWN_TILES tiles of each CTA, the first and the last.
REPLAYED_TILES = 64
SHOWN_TILES = 16


def tiles_to_replay(tiles: int, period: int) -> int:
    """How many of a block's `tiles` to replay to see every pattern of a schedule whose loads
    repeat every `period` tiles."""
    return min(tiles, max(REPLAYED_TILES, period))


SEED_BARRIER = "mbar"


def seed_schedule(
    plan: LoadPlan,
    *,
    expected_tx_bytes: int | None = None,
    delivered_bytes: int | None = None,
    parity_mistake: bool = False,
    skip_arrival: bool = False,
    blocks: int = 1,
    tiles: int | None = None,
) -> list[Event]:
    """The seed kernel's loop for the first `blocks` blocks of `plan` (one CTA each), each over its
    first `tiles` column tiles (all of them by default): init the barrier
    with one arrival; per column tile j: arrive + expect plan.expected_tx_bytes, copy the tile into
    the one shared tile, wait parity plan.phase_parity(j), read the tile, then let the next load
    overwrite it.

    The keyword overrides inject mistakes: a different expected or delivered byte count, waiting
    parity 0 every time, or expect-tx without the arrival.
    """
    expected = plan.expected_tx_bytes if expected_tx_bytes is None else expected_tx_bytes
    delivered = plan.expected_tx_bytes if delivered_bytes is None else delivered_bytes
    events: list[Event] = []
    for row_block in range(min(blocks, plan.grid)):
        events.append(Init(SEED_BARRIER, 1, cta=row_block))
        for column_tile in range(plan.tiles_per_block if tiles is None else min(tiles, plan.tiles_per_block)):
            tag = {"cta": row_block, "tile": column_tile}
            parity = 0 if parity_mistake else plan.phase_parity(column_tile)
            if skip_arrival:
                events.append(ExpectTx(SEED_BARRIER, expected, **tag))
            else:
                events.append(ArriveExpectTx(SEED_BARRIER, expected, **tag))
            events += [
                TmaCopy(SEED_BARRIER, delivered, stage=0, dest_cta=row_block, **tag),
                Wait(SEED_BARRIER, parity, **tag),
                Consume(0, **tag),
                Release(0, **tag),  # the next iteration's copy reuses the one shared tile
            ]
    return events


def pipeline_schedule(
    tiles: int,
    stages: int,
    tx_bytes: int | Sequence[int],
    *,
    expected_tx_bytes: int | Sequence[int] | None = None,
    skip_empty_wait: bool = False,
    consumer_arrivals: int = 1,
) -> list[Event]:
    """An N-stage ring in one CTA: a producer warp and a consumer warp, full[s] and empty[s] barriers.

    Producer, tile t into stage s = t % stages, round r = t // stages: wait empty[s] with parity
    (r & 1) ^ 1 (the first round passes at once: parity 1 "completed" before phase 0), arrive +
    expect on full[s], copy. Consumer: wait full[s] with parity r & 1, read, release, arrive on
    empty[s] (`consumer_arrivals` arrivals, e.g. one per consumer warp).

    The interleaving lets the producer run `stages` tiles ahead; with `skip_empty_wait` it is not
    held back and runs one tile further, into a stage the consumer still holds.

    `tx_bytes` (and `expected_tx_bytes`) may be one count per tile: a bulk copy moves exactly a
    run's bytes, so its last, shorter run completes fewer (a tensor-map load always completes the
    whole box, zero-filled past the edge).
    """
    if stages < 1 or tiles < 0:
        raise ValueError(f"need stages >= 1 and tiles >= 0, not stages={stages}, tiles={tiles}")
    delivered = _per_tile(tx_bytes, tiles)
    expected = delivered if expected_tx_bytes is None else _per_tile(expected_tx_bytes, tiles)
    events: list[Event] = []
    for stage in range(stages):
        events += [Init(f"full[{stage}]", 1), Init(f"empty[{stage}]", consumer_arrivals)]

    def produce(tile: int) -> None:
        stage, ring_round = tile % stages, tile // stages
        if not skip_empty_wait:
            events.append(Wait(f"empty[{stage}]", (ring_round & 1) ^ 1, role="producer", tile=tile))
        events.append(ArriveExpectTx(f"full[{stage}]", expected[tile], tile=tile))
        events.append(TmaCopy(f"full[{stage}]", delivered[tile], stage=stage, tile=tile))

    def consume(tile: int) -> None:
        stage, ring_round = tile % stages, tile // stages
        events.append(Wait(f"full[{stage}]", ring_round & 1, role="consumer", tile=tile))
        events.extend([Consume(stage, tile=tile), Release(stage, tile=tile)])
        events.append(Arrive(f"empty[{stage}]", consumer_arrivals, tile=tile))

    lead = stages + 1 if skip_empty_wait else stages
    for tile in range(min(lead, tiles)):
        produce(tile)
    for tile in range(tiles):
        consume(tile)
        if tile + lead < tiles:
            produce(tile + lead)
    return events


def _per_tile(nbytes: int | Sequence[int], tiles: int) -> list[int]:
    """One byte count per tile: a single count repeated, or the counts given (one per tile)."""
    if isinstance(nbytes, int):
        return [nbytes] * tiles
    if len(nbytes) != tiles:
        raise ValueError(f"{len(nbytes)} byte counts for {tiles} tiles")
    return list(nbytes)


def multicast_schedule(
    tiles: int,
    cluster_size: int,
    tx_bytes: int,
    *,
    expected_tx_bytes: int | None = None,
) -> list[Event]:
    """A cluster of `cluster_size` CTAs sharing each tile: every CTA expects the whole tile
    (`tx_bytes`) on its own barrier and issues one slice (tx_bytes / cluster_size) multicast to all
    CTAs, so each barrier is completed by slices from every CTA, some before it declared them.
    `expected_tx_bytes` overrides what each CTA expects (e.g. only its own slice: a mismatch)."""
    if cluster_size < 1 or tx_bytes % cluster_size:
        raise ValueError(f"tx_bytes {tx_bytes} must split evenly over a cluster of {cluster_size}")
    slice_bytes = tx_bytes // cluster_size
    expected = tx_bytes if expected_tx_bytes is None else expected_tx_bytes
    cluster = tuple(range(cluster_size))
    events: list[Event] = [Init("full", 1, cta=cta) for cta in cluster]
    for tile in range(tiles):
        for cta in cluster:
            events.append(ArriveExpectTx("full", expected, cta=cta, tile=tile))
            events.append(TmaCopy("full", slice_bytes, stage=0, dest_cta=cluster, cta=cta, tile=tile))
        for cta in cluster:
            events += [Wait("full", tile & 1, cta=cta, tile=tile), Consume(0, cta=cta, tile=tile)]
        for cta in cluster:  # stands in for the cluster-wide "everyone is done" the next tile needs
            events.append(Release(0, cta=cta, tile=tile))
    return events
