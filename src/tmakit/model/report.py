"""What a schedule's replay found: the kinds of finding, each finding, the trace of what every
event did, and the report that walks it tile by tile (`describe`).

Pure Python: no cutlass, torch or DSL import.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

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
