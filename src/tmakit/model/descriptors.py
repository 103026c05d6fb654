"""Tensor maps written on the device and then used by TMA: the protocol the PTX ISA asks for, and
a replay that reports each use the protocol does not cover.

A tensor map (TMA descriptor) written in global memory is written through the generic proxy and
read by TMA through the tensormap proxy. A grouped copy that builds one map per tensor on the
device therefore needs, per map: the write; a release fence by the writer
(`fence.proxy.tensormap::generic.release.gpu`) before it signals the user; the user's wait for
that signal; an acquire fence by the user (`fence.proxy.tensormap::generic.acquire.gpu`, on the
map's address) after the wait and before the TMA instruction that names the map. A map written
again needs the whole sequence again before its next use.

`replay_descriptors` takes the events in one global order (an interleaving the GPU may produce)
and returns one finding per use that lacks a piece. No kernel builds maps on the device yet; this
is the model its schedules will be checked against.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("write", "release", "signal", "wait", "acquire", "use")
FINDINGS = {
    "no-write": "the map is used but was never written on the device",
    "missing-release": "the writer did not fence (release) between its write and its signal",
    "no-synchronization": "the user did not wait for a signal sent after the map's last write",
    "missing-acquire": "the user did not fence (acquire) between its wait and the use",
}


@dataclass(frozen=True)
class DescriptorEvent:
    """`thread` does `kind` (one of `KINDS`) on tensor map `descriptor`."""

    thread: str
    kind: str
    descriptor: int


@dataclass(frozen=True)
class DescriptorFinding:
    """What is missing (a key of `FINDINGS`) before the use at `event` of `descriptor`."""

    kind: str
    event: int
    descriptor: int

    def describe(self) -> str:
        return f"event {self.event}: use of tensor map {self.descriptor}: {FINDINGS[self.kind]}"


def replay_descriptors(events: list[DescriptorEvent]) -> list[DescriptorFinding]:
    """The uses in `events` the protocol does not cover, each with the first piece missing."""
    findings = []
    for at, event in enumerate(events):
        if event.kind == "use":
            missing = _missing(events, at)
            if missing is not None:
                findings.append(DescriptorFinding(missing, at, event.descriptor))
    return findings


def _last(
    events: list[DescriptorEvent], start: int, stop: int, kind: str, descriptor: int, thread: str | None
) -> int | None:
    """The index of the last `kind` event on `descriptor` (by `thread`, if given) in [start, stop)."""
    for at in range(stop - 1, start - 1, -1):
        event = events[at]
        if event.kind == kind and event.descriptor == descriptor and thread in (None, event.thread):
            return at
    return None


def _missing(events: list[DescriptorEvent], use: int) -> str | None:
    """The first piece of the protocol missing before the use at `use` (None: covered)."""
    user, descriptor = events[use].thread, events[use].descriptor
    write = _last(events, 0, use, "write", descriptor, None)
    if write is None:
        return "no-write"
    writer = events[write].thread
    wait = _last(events, write, use, "wait", descriptor, user)
    signal = None if wait is None else _last(events, write, wait, "signal", descriptor, writer)
    if signal is None and writer != user:
        return "no-synchronization"
    release = _last(events, write, signal if signal is not None else use, "release", descriptor, writer)
    if release is None:
        return "missing-release"
    acquire = _last(events, wait if wait is not None else release, use, "acquire", descriptor, user)
    if acquire is None:
        return "missing-acquire"
    return None


def update_schedule(
    tensors: int, writer: str = "builder warp", user: str = "producer warp", skip: str | None = None
) -> list[DescriptorEvent]:
    """The protocol for `tensors` maps written by `writer` and used by `user`, each map's pieces
    in order (write, release, signal, wait, acquire, use); `skip` leaves out one kind of piece
    everywhere, to see the replay report it."""
    order = (
        (writer, "write"),
        (writer, "release"),
        (writer, "signal"),
        (user, "wait"),
        (user, "acquire"),
        (user, "use"),
    )
    return [
        DescriptorEvent(thread, kind, descriptor)
        for descriptor in range(tensors)
        for thread, kind in order
        if kind != skip
    ]
