"""Where an instrumented cluster ring writes its time stamps, and what they say. Pure Python
(the summary takes a NumPy array).

Every CTA owns one record of int64 words in each of two planes: plane 0 holds `%globaltimer`
(nanoseconds, one clock for the whole GPU: comparable across CTAs and SMs), plane 1 holds
`%clock64` (cycles of this SM's clock: finer, but only comparable within one CTA). A record is
the CTA's identity (SM, cluster, rank), its four whole-kernel events, then six events per step of
the ring: the producer warp before and after waiting for a free stage and right after issuing the
load; the consumer warp before and after waiting for the stage to fill and right after releasing
it. CTA `strip * cluster_size + rank` writes record number `cta`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

IDENTITY = ("smid", "cluster", "rank")  # written once per CTA, the same in both planes
CTA_EVENTS = (
    "start",
    "ready",
    "done",
    "exit",
)  # kernel entry, after barrier set-up, loop end, after the last sync
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


def _quantiles(values) -> dict[str, float]:
    import numpy as np

    values = np.asarray(values, dtype=np.float64).ravel()
    if values.size == 0:
        return {}
    p10, p50, p90 = np.percentile(values, [10, 50, 90])
    return {"p10": float(p10), "median": float(p50), "p90": float(p90), "max": float(values.max())}


def summarise(layout: TimelineLayout, stamps: np.ndarray, cluster_size: int, stages: int) -> dict:
    """Intervals (ns, from the globaltimer plane) of a run: per step, medians over CTAs of the
    producer's wait for a free stage, the consumer's wait for a full one, the time from this
    CTA's issue (and from the cluster's last issue) until the stage filled, from a release
    until the producers that needed it saw the stage free, and the spread of issue times
    across a cluster; whole-kernel phases per CTA; how many CTAs ran on each SM."""
    import numpy as np

    ns = stamps[0].astype(np.int64)
    ctas = layout.ctas
    start = ns[:, layout.cta_word("start")]
    origin = start.min()
    event = {name: layout.step_events(ns, name) - origin for name in STEP_EVENTS}
    clusters = ctas // cluster_size
    by_cluster = {
        name: values.reshape(clusters, cluster_size, layout.steps) for name, values in event.items()
    }
    last_issue = by_cluster["issued"].max(axis=1, keepdims=True)  # the tile is complete after the last slice
    producer_wait = event["acquire_end"] - event["acquire_begin"]
    consumer_wait = event["wait_end"] - event["wait_begin"]
    fill_from_own_issue = event["wait_end"] - event["issued"]
    fill_from_last_issue = (by_cluster["wait_end"] - last_issue).reshape(ctas, layout.steps)
    issue_spread = by_cluster["issued"].max(axis=1) - by_cluster["issued"].min(axis=1)
    # Step s + stages reuses the stage released at step s: its producer waited for the last release.
    reuse = {}
    if layout.steps > stages:
        last_release = by_cluster["released"].max(axis=1, keepdims=True)[..., : layout.steps - stages]
        acquired = by_cluster["acquire_end"][..., stages:]
        reuse = _quantiles(acquired - last_release)
    # The same intra-CTA intervals in this SM's cycles: both warps of a CTA read one clock, and
    # the globaltimer may tick coarsely (its resolution is reported below).
    cycles = stamps[1].astype(np.int64)
    cyc = {name: layout.step_events(cycles, name) for name in STEP_EVENTS}
    in_cycles = {
        "producer_wait": _quantiles(cyc["acquire_end"] - cyc["acquire_begin"]),
        "consumer_wait": _quantiles(cyc["wait_end"] - cyc["wait_begin"]),
        "fill_after_own_issue": _quantiles(cyc["wait_end"] - cyc["issued"]),
        "issue_to_next_issue": _quantiles(np.diff(cyc["issued"], axis=1)),
        "release_cost (wait_end->released)": _quantiles(cyc["released"] - cyc["wait_end"]),
        "ring (ready->done)": _quantiles(
            cycles[:, layout.cta_word("done")] - cycles[:, layout.cta_word("ready")]
        ),
    }
    deltas = np.diff(np.sort(np.unique(ns[:, len(IDENTITY) :].ravel())))
    resolution = int(deltas[deltas > 0].min()) if (deltas > 0).any() else 0
    per_step = []
    for step in range(layout.steps):
        per_step.append(
            {
                "step": step,
                "producer_wait_ns": _quantiles(producer_wait[:, step]),
                "consumer_wait_ns": _quantiles(consumer_wait[:, step]),
                "fill_after_own_issue_ns": _quantiles(fill_from_own_issue[:, step]),
                "fill_after_cluster_last_issue_ns": _quantiles(fill_from_last_issue[:, step]),
                "issue_spread_in_cluster_ns": _quantiles(issue_spread[:, step]),
                "issue_to_next_issue_ns": _quantiles(event["issued"][:, step + 1] - event["issued"][:, step])
                if step + 1 < layout.steps
                else {},
            }
        )
    ready = ns[:, layout.cta_word("ready")] - origin
    done = ns[:, layout.cta_word("done")] - origin
    exit_ = ns[:, layout.cta_word("exit")] - origin
    start_rel = start - origin
    smids = stamps[0][:, layout.identity_word("smid")]
    per_sm = np.bincount(smids.astype(np.int64))
    return {
        "ctas": int(ctas),
        "clusters": int(clusters),
        "steps": int(layout.steps),
        "kernel_span_ns": int(exit_.max()),
        "globaltimer_smallest_tick_ns": resolution,
        "intra_cta_cycles": in_cycles,
        "cta_phases_ns": {
            "start": _quantiles(start_rel),
            "setup (start->ready)": _quantiles(ready - start_rel),
            "ring (ready->done)": _quantiles(done - ready),
            "final sync (done->exit)": _quantiles(exit_ - done),
            "lifetime (start->exit)": _quantiles(exit_ - start_rel),
        },
        "start_skew_in_cluster_ns": _quantiles(
            start_rel.reshape(clusters, cluster_size).max(axis=1)
            - start_rel.reshape(clusters, cluster_size).min(axis=1)
        ),
        "waves": _quantiles(per_sm[per_sm > 0]),
        "sms_used": int((per_sm > 0).sum()),
        "stage_reuse_after_last_release_ns": reuse,
        "totals_per_cta_ns": {
            "producer_wait": _quantiles(producer_wait.sum(axis=1)),
            "consumer_wait": _quantiles(consumer_wait.sum(axis=1)),
        },
        "per_step": per_step,
    }
