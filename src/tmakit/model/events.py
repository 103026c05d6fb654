"""The steps of a TMA load schedule: what each role (a producer thread, a consumer warp, a CTA of a
cluster) does to the mbarriers and the shared stages, one event at a time.

A schedule is a list of these events in one program order (one interleaving of the CTAs and warps
involved); `replayer.replay` runs it against mbarrier models and `schedule` builds the seed loop's,
a ring's and a multicast cluster's.

Barriers are named per CTA: the barrier key is (cta, name). A copy delivers `nbytes` to the barrier
of the same name in each destination CTA (several destinations = multicast). Events carry an
optional `tile` label: the report groups by it, and stage-overwrite and multicast checks use it to
tell which load bytes belong to, so give a tile's expect-tx and its copies the same label.

Pure Python: no cutlass, torch or DSL import.
"""

from __future__ import annotations

from dataclasses import dataclass


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
class _Expecting:
    """What an expect-tx names: `nbytes` for the current phase of `cta`'s barrier `barrier`. Its
    kinds add no field: they are this dataclass under their own names (equal only to their kind)."""

    barrier: str
    nbytes: int
    cta: int = 0
    tile: int | None = None


class ExpectTx(_Expecting):
    """expect-tx without an arrival."""


class ArriveExpectTx(_Expecting):
    """mbarrier.arrive.expect_tx: declare `nbytes` for the current phase, then arrive."""


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
class _OfStage:
    """What a reader's event names: `stage` of `cta`'s shared memory. Its kinds add no field, as
    `_Expecting`'s."""

    stage: int
    cta: int = 0
    tile: int | None = None


class Consume(_OfStage):
    """Threads of `cta` read `stage` (must come after a wait that saw its bytes land)."""


class Release(_OfStage):
    """`cta` is done reading `stage`: a later copy may overwrite it."""


Event = Init | Arrive | ExpectTx | ArriveExpectTx | TmaCopy | Wait | Consume | Release
