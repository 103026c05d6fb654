"""Check a TMA load schedule (inits, arrivals, expect-tx, copies, waits) against mbarrier models.

A schedule is a list of events in one program order (one interleaving of the CTAs and warps
involved). `replay` runs it against `MBarrier` models and reports what would go wrong on the GPU:
a wait that never completes (and why), a phase that completes before its bytes have landed, a stage
overwritten before it was released, multicast bytes that do not match a destination's expectation.

TMA copies are asynchronous: by default (`bytes_land="at_wait"`) a copy's bytes land just before
the next wait on its barrier that actually has to wait, so a wait that returns at once (the parity
it names already completed) returns before the data is there. `bytes_land="at_issue"` lands them as
the copy is issued instead, the other extreme.

Barriers are named per CTA: the barrier key is (cta, name). A copy delivers `nbytes` to the barrier
of the same name in each destination CTA (several destinations = multicast). Events carry an
optional `tile` label: `describe` groups by it, and stage-overwrite and multicast checks use it to
tell which load bytes belong to, so give a tile's expect-tx and its copies the same label.

Pure Python: no cutlass, torch or DSL import.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from ..plan import LoadPlan
from .mbarrier import MBarrier, MBarrierError

T = TypeVar("T")

# -- events -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Init:
    """mbarrier.init: `arrivals` expected arrivals per phase."""

    barrier: str
    arrivals: int
    cta: int = 0
    tile: int | None = None  # label for `describe`; not semantic


@dataclass(frozen=True)
class Arrive:
    """A plain arrival (e.g. a consumer freeing a stage on its empty barrier)."""

    barrier: str
    count: int = 1
    cta: int = 0
    tile: int | None = None


@dataclass(frozen=True)
class ExpectTx:
    """expect-tx without an arrival."""

    barrier: str
    nbytes: int
    cta: int = 0
    tile: int | None = None


@dataclass(frozen=True)
class ArriveExpectTx:
    """mbarrier.arrive.expect_tx: declare `nbytes` for the current phase, then arrive."""

    barrier: str
    nbytes: int
    cta: int = 0
    tile: int | None = None


@dataclass(frozen=True)
class TmaCopy:
    """A TMA load issued by `cta`, writing `stage` of each destination CTA and completing `nbytes`
    on each destination's barrier `barrier` (multicast when `dest_cta` is a tuple of several CTAs)."""

    barrier: str
    nbytes: int
    stage: int
    dest_cta: int | tuple[int, ...] = 0
    cta: int = 0
    tile: int | None = None  # which tile's data it carries: a different tile into an unreleased stage
    # is an overwrite, while several copies of the same tile (multicast slices) are not

    @property
    def destinations(self) -> tuple[int, ...]:
        return self.dest_cta if isinstance(self.dest_cta, tuple) else (self.dest_cta,)


@dataclass(frozen=True)
class Wait:
    """mbarrier.try_wait.parity in a loop: blocks until the phase with `parity` has completed."""

    barrier: str
    parity: int
    cta: int = 0
    role: str = ""  # the waiting warp's role; waits are tracked per (cta, role, barrier)
    tile: int | None = None


@dataclass(frozen=True)
class Consume:
    """Threads of `cta` read `stage` (must come after a wait that saw its bytes land)."""

    stage: int
    cta: int = 0
    tile: int | None = None


@dataclass(frozen=True)
class Release:
    """`cta` is done reading `stage`: a later copy may overwrite it."""

    stage: int
    cta: int = 0
    tile: int | None = None


Event = Init | Arrive | ExpectTx | ArriveExpectTx | TmaCopy | Wait | Consume | Release

# -- findings -----------------------------------------------------------------------------------

EXPECTED_MORE_THAN_DELIVERED = "expected-more-than-delivered"  # hang
MISSING_ARRIVAL = "missing-arrival"  # hang
WRONG_PARITY = "wrong-parity"  # wait returns at once on a stale phase, or waits on one never armed
# Fewer bytes expected than delivered. The model lands bytes one by one, so the phase completes
# early (a silent race). The hardware completes them in larger steps: on the H200 a 16-byte
# undercount of a 32 KiB tile stepped the tx count past zero and the phase never completed (a
# hang). Either way a mistake; the model reports it as this finding.
EARLY_COMPLETION = "early-completion"
CONSUME_BEFORE_LANDED = "consume-before-landed"
STAGE_OVERWRITE = "stage-overwrite"
MULTICAST_MISMATCH = "multicast-mismatch"
BARRIER_ERROR = "barrier-error"  # an operation the hardware would not survive (MBarrierError)


@dataclass(frozen=True)
class Finding:
    """One problem: `kind` is one of the constants above, `message` says what and why."""

    kind: str
    message: str
    event_index: int | None = None
    cta: int | None = None
    hang: bool = False

    def __str__(self) -> str:
        where = f"event {self.event_index}: " if self.event_index is not None else ""
        return f"[{self.kind}] {where}{self.message}"


@dataclass(frozen=True)
class TraceEntry:
    event_index: int
    cta: int
    tile: int | None
    text: str


@dataclass
class ScheduleReport:
    """What `replay` found. `ok` when there are no findings."""

    findings: list[Finding] = field(default_factory=list)
    trace: list[TraceEntry] = field(default_factory=list)
    stopped_at: int | None = None  # index of the event that hangs, if one does

    @property
    def ok(self) -> bool:
        return not self.findings

    def kinds(self) -> set[str]:
        return {f.kind for f in self.findings}

    def _tiles(self, cta: int | None, limit: int | None) -> dict[int, tuple[list[int], list[int], int]]:
        """Per CTA shown (one, or all when `cta` is None): `ends` of its tiles."""
        labels: dict[int, set[int]] = {} if cta is None else {cta: set()}
        for entry in self.trace:
            if cta is None or entry.cta == cta:
                found = labels.setdefault(entry.cta, set())  # a CTA with setup alone is still shown
                if entry.tile is not None:
                    found.add(entry.tile)
        return {shown: ends(sorted(found), limit) for shown, found in labels.items()}

    def shown(self, cta: int | None = 0, limit: int | None = None) -> tuple[list[TraceEntry], int]:
        """The trace of one CTA (all CTAs when `cta` is None) with at most `limit` tiles per CTA,
        the first and the last (every tile when `limit` is None), and how many tiles were left
        out, summed over the CTAs. (The setup, before the first tile, is kept whole.)"""
        tiles = self._tiles(cta, limit)
        kept = {shown: {*head, *tail} for shown, (head, tail, _) in tiles.items()}
        entries = [e for e in self.trace if e.cta in kept and (e.tile is None or e.tile in kept[e.cta])]
        return entries, sum(left_out for _, _, left_out in tiles.values())

    def describe(self, cta: int | None = 0, limit: int | None = None) -> str:
        """The run walked tile by tile for one CTA (all CTAs when `cta` is None), then the findings;
        with a `limit`, at most that many tiles per CTA, setup steps and findings are listed (the
        first and the last, the number between said)."""
        lines: list[str] = []
        tiles = self._tiles(cta, limit)
        for shown in sorted(tiles):
            lines.append(f"CTA {shown}:")
            head, tail, left_out = ends(
                [e.text for e in self.trace if e.cta == shown and e.tile is None], limit
            )
            if head:
                lines.append(
                    "  setup: " + ", ".join([*head, *([f"... {left_out} more"] if left_out else []), *tail])
                )
            head, tail, left_out = tiles[shown]
            by_tile: dict[int, list[str]] = defaultdict(list)
            kept = {*head, *tail}
            for entry in self.trace:
                if entry.cta == shown and entry.tile in kept:
                    by_tile[entry.tile].append(entry.text)
            for tile in head:
                lines.append(f"  tile {tile}: " + ", ".join(by_tile[tile]))
            if left_out:
                lines.append(f"  ... {left_out} tiles not shown, between tile {head[-1]} and tile {tail[0]}")
            for tile in tail:
                lines.append(f"  tile {tile}: " + ", ".join(by_tile[tile]))
        if self.stopped_at is not None:
            lines.append(f"replay stopped at event {self.stopped_at}: that wait never completes")
        if self.ok:
            lines.append("ok: every wait completes after its bytes land; no races found")
        else:
            lines.append(f"{len(self.findings)} finding(s):")
            head, tail, left_out = ends(self.findings, limit)
            lines.extend(f"  {finding}" for finding in head)
            if left_out:
                lines.append(f"  ... {left_out} findings not shown")
            lines.extend(f"  {finding}" for finding in tail)
        return "\n".join(lines)


def ends(items: Sequence[T], limit: int | None) -> tuple[list[T], list[T], int]:
    """(the first, the last, how many between): at most `limit` of `items` in all, the first
    half and the last (all of them first when `limit` is None or they are no more)."""
    if limit is None or len(items) <= limit:
        return list(items), [], 0
    head = max(1, limit // 2)
    tail = max(1, limit - head)
    return list(items[:head]), list(items[-tail:]), len(items) - head - tail


# -- replay -------------------------------------------------------------------------------------

BarrierKey = tuple[int, str]  # (cta, name)


@dataclass
class _Delivery:
    """One copy's bytes on their way to one destination barrier."""

    key: BarrierKey
    nbytes: int
    phase_index: int  # the destination barrier's phase when the copy was issued
    tile: int | None
    landed_phase: int | None = None  # phase during which its last byte landed


@dataclass
class _Stage:
    tile: int | None
    deliveries: list[_Delivery]
    consumed: bool = False


class _Replay:
    def __init__(self, bytes_land: str) -> None:
        if bytes_land not in ("at_wait", "at_issue"):
            raise ValueError(f"bytes_land is {bytes_land!r}; use 'at_wait' or 'at_issue'")
        self.bytes_land = bytes_land
        self.report = ScheduleReport()
        self.barriers: dict[BarrierKey, MBarrier] = {}
        # Per barrier, so that a wait touches only its own barrier's copies (the replay stays
        # linear in the tiles): copies still in flight, in issue order, and landed copies no wait
        # has seen yet, in landing order (so their landed phases never decrease).
        self.in_flight: dict[BarrierKey, list[_Delivery]] = defaultdict(list)
        self.unseen: dict[BarrierKey, deque[_Delivery]] = defaultdict(deque)
        self.visible: set[int] = set()  # id() of deliveries a passing wait has made visible
        self.expected_bytes: dict[tuple[BarrierKey, int], int] = defaultdict(int)
        self.sent_bytes: dict[tuple[BarrierKey, int], int] = defaultdict(int)
        # per (barrier, tile label): what each destination expects and what multicast sends it; by
        # tile rather than phase, so bytes that spill into a later phase still count for their tile
        self.expected_by_tile: dict[tuple[BarrierKey, str], int] = defaultdict(int)
        self.sent_by_tile: dict[tuple[BarrierKey, str], int] = defaultdict(int)
        self.multicast_tiles: set[tuple[BarrierKey, str]] = set()
        self.last_observed: dict[tuple[int, str, BarrierKey], int] = {}
        self.stages: dict[tuple[int, int], _Stage] = {}
        self.index = 0

    # helpers
    def find(self, kind: str, message: str, cta: int | None, hang: bool = False) -> None:
        self.report.findings.append(Finding(kind, message, self.index, cta, hang))

    def trace(self, cta: int, tile: int | None, text: str) -> None:
        self.report.trace.append(TraceEntry(self.index, cta, tile, text))

    def barrier(self, key: BarrierKey) -> MBarrier | None:
        bar = self.barriers.get(key)
        if bar is None:
            self.find(BARRIER_ERROR, f"barrier {key[1]!r} of CTA {key[0]} is used before its init", key[0])
        return bar

    # events
    def run(self, events: list[Event]) -> ScheduleReport:
        for self.index, event in enumerate(events):
            try:
                if not self.step(event):
                    self.report.stopped_at = self.index
                    break
            except MBarrierError as error:
                self.find(BARRIER_ERROR, str(error), getattr(event, "cta", None))
                self.trace(event.cta, event.tile, f"{type(event).__name__} -> error")
        self.check_multicast()
        return self.report

    def step(self, event: Event) -> bool:
        """Apply one event; False when it is a wait that never completes."""
        handler = self.handlers.get(type(event))
        if handler is None:
            raise TypeError(f"not a schedule event: {event!r}")
        return handler(self, event) is not False

    def init(self, event: Init) -> None:
        self.barriers[(event.cta, event.barrier)] = MBarrier(event.arrivals)
        self.trace(event.cta, event.tile, f"init {event.barrier!r} ({event.arrivals} arrival(s))")

    def arrive(self, event: Arrive) -> None:
        if bar := self.barrier((event.cta, event.barrier)):
            bar.arrive(event.count)
            self.trace(event.cta, event.tile, f"arrive on {event.barrier!r}")

    def expect(self, event: ExpectTx | ArriveExpectTx) -> None:
        key = (event.cta, event.barrier)
        if bar := self.barrier(key):
            phase_index = bar.completed_phases
            if isinstance(event, ArriveExpectTx):
                bar.arrive_expect_tx(event.nbytes)
                self.trace(event.cta, event.tile, f"arrive + expect {event.nbytes} B")
            else:
                bar.expect_tx(event.nbytes)
                self.trace(event.cta, event.tile, f"expect {event.nbytes} B (no arrival)")
            self.expected_bytes[(key, phase_index)] += event.nbytes
            self.expected_by_tile[(key, _label(event.tile, phase_index))] += event.nbytes

    def release(self, event: Release) -> None:
        self.stages.pop((event.cta, event.stage), None)
        self.trace(event.cta, event.tile, f"release stage {event.stage}")

    def copy(self, event: TmaCopy) -> None:
        destinations = event.destinations
        multicast = len(destinations) > 1 or destinations != (event.cta,)
        for dest in destinations:
            key = (dest, event.barrier)
            bar = self.barrier(key)
            if bar is None:
                continue
            stage = self.stages.get((dest, event.stage))
            if stage is not None and (stage.tile != event.tile or stage.consumed):
                self.find(
                    STAGE_OVERWRITE,
                    f"tile {event.tile}'s copy overwrites stage {event.stage} of CTA {dest} while it still "
                    f"holds tile {stage.tile}, which was never released",
                    dest,
                )
                stage = None
            delivery = _Delivery(key, event.nbytes, bar.completed_phases, event.tile)
            if stage is None:
                stage = self.stages[(dest, event.stage)] = _Stage(event.tile, [])
            stage.deliveries.append(delivery)
            self.sent_bytes[(key, delivery.phase_index)] += event.nbytes
            label = _label(event.tile, delivery.phase_index)
            self.sent_by_tile[(key, label)] += event.nbytes
            if multicast:
                self.multicast_tiles.add((key, label))
            if self.bytes_land == "at_issue":
                self.deliver(delivery)
            else:
                self.in_flight[key].append(delivery)
        to = f" (multicast to CTAs {list(destinations)})" if multicast else ""
        self.trace(event.cta, event.tile, f"copy {event.nbytes} B -> stage {event.stage}{to}")

    def deliver(self, delivery: _Delivery) -> None:
        """Land a copy's bytes, noticing when they complete a phase with bytes still to come."""
        key, nbytes = delivery.key, delivery.nbytes
        bar = self.barriers[key]
        where = f"barrier {key[1]!r} of CTA {key[0]}"
        if bar.completed_phases > delivery.phase_index:
            self.find(
                EARLY_COMPLETION,
                f"{nbytes} B of tile {delivery.tile}'s copy land after phase {delivery.phase_index} of "
                f"{where}, which they belong to, already completed: fewer bytes expected than delivered "
                "(silent race)",
                key[0],
            )
        elif bar.pending_arrivals == 0 and 0 < bar.tx_count < nbytes:
            landed_first = bar.tx_count  # the bytes land in order: these complete the phase
            bar.complete_tx(landed_first)
            self.find(
                EARLY_COMPLETION,
                f"phase {delivery.phase_index} of {where} completes with {nbytes - landed_first} of tile "
                f"{delivery.tile}'s {nbytes} B still in flight: fewer bytes expected than delivered "
                "(silent race: waiters read the stage before it is written)",
                key[0],
            )
            nbytes -= landed_first
        delivery.landed_phase = bar.completed_phases
        bar.complete_tx(nbytes)
        self.unseen[key].append(delivery)

    def land_all(self, key: BarrierKey) -> None:
        """Land every copy still in flight to `key`, in issue order."""
        for delivery in self.in_flight.pop(key, []):
            self.deliver(delivery)

    def observe(self, event: Wait, key: BarrierKey, observed_phase: int) -> None:
        """A wait passed having seen `observed_phase` complete: bytes landed by then are visible."""
        self.last_observed[(event.cta, event.role, key)] = observed_phase
        unseen = self.unseen[key]
        while unseen and unseen[0].landed_phase <= observed_phase:
            self.visible.add(id(unseen.popleft()))

    def wait(self, event: Wait) -> bool:
        key = (event.cta, event.barrier)
        bar = self.barrier(key)
        if bar is None:
            return False
        parity = event.parity
        waiter = (event.cta, event.role, key)
        if bar.try_wait(parity):  # returns at once: the phase with this parity has completed
            observed = bar.completed_phases - 1
            if observed <= self.last_observed.get(waiter, -2):
                pending = sum(d.nbytes for d in self.in_flight.get(key, ()))
                landing = (
                    f"; {pending} B of copies to it are still in flight and get read early" if pending else ""
                )
                self.find(
                    WRONG_PARITY,
                    f"wait on {event.barrier!r} with parity {parity} returns at once: phase {observed} "
                    f"(parity {parity}) completed and this waiter already saw it; the phase now filling "
                    f"(phase {bar.completed_phases}) has parity {bar.phase}{landing}",
                    event.cta,
                )
                self.trace(event.cta, event.tile, f"wait parity {parity} -> returns at once (stale phase)")
                self.land_all(key)  # the bytes still land, but after the waiter moved on
                return True
            self.observe(event, key, observed)
            if observed < 0:  # parity 1 on a fresh barrier: the phase before phase 0 counts as completed
                self.trace(event.cta, event.tile, f"wait parity {parity} -> returns at once (fresh barrier)")
            else:
                self.trace(event.cta, event.tile, f"wait parity {parity} -> complete (phase {observed})")
            return True

        self.land_all(key)
        if bar.try_wait(parity):
            last = bar.completed_phases - 1
            observed = last if last & 1 == parity else last - 1
            self.observe(event, key, observed)
            self.trace(event.cta, event.tile, f"wait parity {parity} -> complete (phase {observed})")
            return True

        self.find(*self.why_hung(bar, key, parity, waiter), event.cta, hang=True)
        self.trace(event.cta, event.tile, f"wait parity {parity} -> never completes")
        return False

    def why_hung(self, bar: MBarrier, key: BarrierKey, parity: int, waiter: tuple) -> tuple[str, str]:
        phase_index = bar.completed_phases
        expected = self.expected_bytes.get((key, phase_index), 0)
        sent = self.sent_bytes.get((key, phase_index), 0)
        head = f"wait on {key[1]!r} (CTA {key[0]}) with parity {parity} never completes: phase {phase_index}"
        idle = bar.pending_arrivals == bar.expected_arrivals and bar.tx_count == 0
        if idle and phase_index > 0:
            seen = self.last_observed.get(waiter)
            return WRONG_PARITY, (
                f"{head} has no arrivals and no bytes armed; phase {phase_index - 1} (parity "
                f"{1 - parity}) already completed"
                + (f" and this waiter last saw phase {seen}" if seen is not None else "")
                + ": the wait names the wrong parity (or a phase was skipped)"
            )
        if bar.pending_arrivals > 0:
            missing_bytes = f"; {bar.tx_count} B also still expected" if bar.tx_count > 0 else ""
            return MISSING_ARRIVAL, (
                f"{head} still waits for {bar.pending_arrivals} of {bar.expected_arrivals} arrival(s), "
                f"which never come{missing_bytes}"
            )
        if bar.tx_count > 0:
            return EXPECTED_MORE_THAN_DELIVERED, (
                f"{head} expects {bar.tx_count} B more than its copies delivered (expected {expected} B, "
                f"copies sent {sent} B): more bytes expected than delivered"
            )
        return EARLY_COMPLETION, (
            f"{head} has its arrivals but a tx count of {bar.tx_count}: {-bar.tx_count} B more landed in it "
            f"than it expected (it expected {expected} B; bytes of earlier copies spilled into it): "
            "fewer bytes expected than delivered"
        )

    def consume(self, event: Consume) -> None:
        stage = self.stages.get((event.cta, event.stage))
        if stage is None or not stage.deliveries:
            self.find(CONSUME_BEFORE_LANDED, f"stage {event.stage} is read but no copy wrote it", event.cta)
        else:
            unseen = [d for d in stage.deliveries if id(d) not in self.visible]
            if unseen:
                self.find(
                    CONSUME_BEFORE_LANDED,
                    f"stage {event.stage} (tile {stage.tile}) is read before a wait saw "
                    f"{sum(d.nbytes for d in unseen)} B of its copies land: the read races the copy",
                    event.cta,
                )
            stage.consumed = True
        self.trace(event.cta, event.tile, f"consume stage {event.stage}")

    def check_multicast(self) -> None:
        self.index = None  # findings about the whole run
        for key, label in sorted(self.multicast_tiles):
            expected = self.expected_by_tile.get((key, label), 0)
            sent = self.sent_by_tile[(key, label)]
            if expected != sent:
                self.find(
                    MULTICAST_MISMATCH,
                    f"barrier {key[1]!r} of CTA {key[0]}, {label}: expects {expected} B but the multicast "
                    f"copies into it deliver {sent} B",
                    key[0],
                )


# What each event does to the replay (one lookup per event: the replay of a block of 16,384 tiles
# stays under a second).
_Replay.handlers = {
    Init: _Replay.init,
    Arrive: _Replay.arrive,
    ExpectTx: _Replay.expect,
    ArriveExpectTx: _Replay.expect,
    TmaCopy: _Replay.copy,
    Wait: _Replay.wait,
    Consume: _Replay.consume,
    Release: _Replay.release,
}


def _label(tile: int | None, phase_index: int) -> str:
    """Which load a byte count belongs to: the event's tile label, else the barrier phase."""
    return f"tile {tile}" if tile is not None else f"phase {phase_index}"


def replay(events: list[Event], *, bytes_land: Literal["at_wait", "at_issue"] = "at_wait") -> ScheduleReport:
    """Run `events` in order against mbarrier models; report hangs, races and overwrites."""
    return _Replay(bytes_land).run(list(events))


# -- schedules ----------------------------------------------------------------------------------

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
