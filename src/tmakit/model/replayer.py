"""Check a TMA load schedule (inits, arrivals, expect-tx, copies, waits) against mbarrier models.

`replay` runs a schedule's events (`events`) in order against `MBarrier` models and reports what
would go wrong on the GPU: a wait that never completes (and why), a phase that completes before its
bytes have landed, a stage overwritten before it was released, multicast bytes that do not match a
destination's expectation.

TMA copies are asynchronous: by default (`bytes_land="at_wait"`) a copy's bytes land just before
the next wait on its barrier that actually has to wait, so a wait that returns at once (the parity
it names already completed) returns before the data is there. `bytes_land="at_issue"` lands them as
the copy is issued instead, the other extreme.

Pure Python: no cutlass, torch or DSL import.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Literal

from .events import Arrive, ArriveExpectTx, Consume, Event, ExpectTx, Init, Release, TmaCopy, Wait
from .mbarrier import MBarrier, MBarrierError
from .report import (
    BARRIER_ERROR,
    CONSUME_BEFORE_LANDED,
    EARLY_COMPLETION,
    EXPECTED_MORE_THAN_DELIVERED,
    MISSING_ARRIVAL,
    MULTICAST_MISMATCH,
    STAGE_OVERWRITE,
    WRONG_PARITY,
    Finding,
    ScheduleReport,
    TraceEntry,
)

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
