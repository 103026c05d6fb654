"""Where the instrumented cluster ring (`kernels.TimelineMulticastKernel`) writes its time
stamps. Pure Python (`study.summarise` reads them).

Every CTA owns one record of int64 words in each of two planes: plane 0 holds `%globaltimer`
(nanoseconds, one clock for the whole GPU: comparable across CTAs and SMs), plane 1 holds
`%clock64` (cycles of this SM's clock: finer, but only comparable within one CTA). A record is
the CTA's identity (SM, cluster, rank), its four whole-kernel events, then six events per step of
the ring: the producer warp before and after waiting for a free stage and right after issuing the
load; the consumer warp before and after waiting for the stage to fill and right after releasing
it. CTA `cluster * cluster_size + rank` writes record number `cta`; a persistent CTA with fewer loads
than cluster 0's leaves its last step words as they were.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from tmakit.cluster.plan import MulticastPlan

IDENTITY = ("smid", "cluster", "rank")  # written once per CTA, the same in both planes
CTA_EVENTS = (
    "start",
    "ready",
    "done",
    "exit",
)  # kernel entry, after barrier set-up, loop end, after the producer's drain (its exit)
PRODUCER_EVENTS = ("acquire_begin", "acquire_end", "issued")
CONSUMER_EVENTS = ("wait_begin", "wait_end", "released")
STEP_EVENTS = PRODUCER_EVENTS + CONSUMER_EVENTS
PLANES = ("globaltimer_ns", "clock64_cycles")


@dataclass(frozen=True)
class TimelineLayout:
    """The stamp buffer of `ctas` CTAs that each run `steps` steps of a ring: int64, shape
    (len(PLANES), ctas, words_per_cta)."""

    ctas: int
    steps: int

    @classmethod
    def of(cls, multicast: MulticastPlan) -> TimelineLayout:
        """The stamps of `multicast`'s ring: one record per CTA, one step per load of the CTA
        that runs the most (cluster 0)."""
        return cls(multicast.grid, multicast.most_steps)

    @property
    def words_per_cta(self) -> int:
        return len(IDENTITY) + len(CTA_EVENTS) + len(STEP_EVENTS) * self.steps

    @property
    def shape(self) -> tuple[int, int, int]:
        return (len(PLANES), self.ctas, self.words_per_cta)

    def identity_word(self, name: str) -> int:
        return IDENTITY.index(name)

    def cta_word(self, event: str) -> int:
        return len(IDENTITY) + CTA_EVENTS.index(event)

    def step_word(self, event: str, step):
        """Word of `event` at `step` (a Python or a device integer)."""
        return len(IDENTITY) + len(CTA_EVENTS) + step * len(STEP_EVENTS) + STEP_EVENTS.index(event)

    def step_events(self, stamps: np.ndarray, event: str) -> np.ndarray:
        """(ctas, steps) of one event's stamps in one plane (`stamps`: (ctas, words))."""
        first = self.step_word(event, 0)
        return stamps[:, first : first + len(STEP_EVENTS) * self.steps : len(STEP_EVENTS)]
