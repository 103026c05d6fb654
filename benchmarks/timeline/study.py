"""Where a cluster ring's time goes: the instrumented multicast ring (`kernels`, its stamps laid
out as `layout` says) launched on the GPU, its stamps summarised, and the uninstrumented kernels
timed beside it - tmakit's ring with each consumer-release protocol, the same ring written with
CUTLASS's `PipelineTmaAsync`, each with multicast and without. `scripts/multicast_timeline.py`
runs it."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from tmakit.bench.timing import graph_samples_us
from tmakit.check.inputs import make_input_tensor
from tmakit.cluster.check import verify_multicast_kernel
from tmakit.cluster.plan import MulticastPlan
from tmakit.load.launch import compile_pipelined_load
from tmakit.plan import RELEASES, LoadPlan, PipelinePlan
from tmakit.runtime.compile import to_cute_tensor
from tmakit.runtime.device import current_stream
from tmakit.runtime.launch import new_guard

from .kernels import PIPELINE_TMA_ASYNC, compile_cluster_ring
from .layout import IDENTITY, STEP_EVENTS, TimelineLayout


@dataclass(frozen=True)
class RingVariant:
    """One kernel of the comparison: a cluster, multicast or not, and the release protocol."""

    cluster: tuple[int, int]
    multicast: bool
    protocol: str
    persistent_clusters: int | None = None  # `MulticastPlan.persistent_clusters`

    @property
    def name(self) -> str:
        what = "multicast" if self.multicast else "no-multicast"
        walk = "" if self.persistent_clusters is None else f" {self.persistent_clusters} persistent clusters"
        return f"{self.cluster[0]}x{self.cluster[1]} {what} {self.protocol}{walk}"

    def plan(self, load: LoadPlan, stages: int) -> MulticastPlan:
        return MulticastPlan(load, self.cluster, self.multicast, stages, self.persistent_clusters)


def variants(
    clusters: list[tuple[int, int]], protocols: list[str], persistent: tuple[int | None, ...] = (None,)
) -> list[RingVariant]:
    """Every protocol with multicast; without multicast a CTA releases only itself, so tmakit's
    protocols are one kernel there (the first of them named) beside PipelineTmaAsync's. Each
    once per entry of `persistent` (None: one cluster per strip; N: N persistent clusters)."""
    found = []
    for walk in persistent:
        for cluster in clusters:
            found += [RingVariant(cluster, True, protocol, walk) for protocol in protocols]
            tmakit = [p for p in protocols if p in RELEASES][:1]
            found += [
                RingVariant(cluster, False, p, walk)
                for p in tmakit + [p for p in protocols if p == PIPELINE_TMA_ASYNC]
            ]
    return found


def stamps_of(multicast: MulticastPlan, protocol: str, warm_launches: int = 3):
    """One launch of the instrumented ring on the seed input after `warm_launches` (L2 hot):
    its stamps, int64 of `TimelineLayout.of(multicast).shape`, on the host."""
    import torch

    plan = multicast.load
    compiled = compile_cluster_ring(multicast, protocol, store=False, timeline=True)
    src = make_input_tensor(plan)
    scratch = torch.empty(multicast.copies_shape, dtype=src.dtype, device="cuda")  # never written
    stamps = torch.zeros(TimelineLayout.of(multicast).shape, dtype=torch.int64, device="cuda")
    args = (to_cute_tensor(src), to_cute_tensor(scratch), current_stream(), to_cute_tensor(stamps))
    for _ in range(warm_launches):
        compiled(*args)
    stamps.zero_()
    compiled(*args)
    torch.cuda.synchronize()
    return stamps.cpu().numpy()


def measure(plan: LoadPlan, variant: RingVariant, stages: int, samples: int) -> tuple[dict, object]:
    """(report, raw stamps) of one variant: every CTA's copy verified (store-back kernel), the
    uninstrumented load-only kernel timed L2-hot (graph replays), and one instrumented launch."""
    import torch

    multicast = variant.plan(plan, stages)
    layout = TimelineLayout.of(multicast)
    verdicts = verify_multicast_kernel(multicast, compile_cluster_ring(multicast, variant.protocol))
    compiled = compile_cluster_ring(multicast, variant.protocol, store=False)
    src = make_input_tensor(plan)
    scratch = torch.empty(multicast.copies_shape, dtype=src.dtype, device="cuda")
    src_c, scratch_c = to_cute_tensor(src), to_cute_tensor(scratch)
    times = graph_samples_us([lambda: compiled(src_c, scratch_c, current_stream())], samples)
    raw = stamps_of(multicast, variant.protocol)
    # What the stamps cost: the instrumented kernel timed the same way.
    instrumented = compile_cluster_ring(multicast, variant.protocol, store=False, timeline=True)
    stamped_c = to_cute_tensor(torch.zeros(layout.shape, dtype=torch.int64, device="cuda"))
    instrumented_us = graph_samples_us(
        [lambda: instrumented(src_c, scratch_c, current_stream(), stamped_c)], samples
    )
    report = {
        "variant": variant.name,
        "cluster": list(variant.cluster),
        "multicast": variant.multicast,
        "protocol": variant.protocol,
        "persistent_clusters": variant.persistent_clusters,
        "stages": stages,
        "verified": f"{sum(v.ok for v in verdicts)}/{len(verdicts)} CTA ranks hold every tile "
        f"({verdicts[0]})",
        "all_ok": all(v.ok for v in verdicts),
        "median_us": statistics.median(times),
        "min_us": min(times),
        "instrumented_median_us": statistics.median(instrumented_us),
        "timeline": summarise(layout, raw, multicast.cluster_size, stages, steps_of(multicast)),
    }
    return report, raw


def plain_ring_us(plan: LoadPlan, stages: int, samples: int) -> float:
    """The same tiles through tmakit's one-CTA ring, no cluster (load-only), L2 hot."""
    compiled = compile_pipelined_load(PipelinePlan(plan, stages), "none")
    src = make_input_tensor(plan)
    guard = to_cute_tensor(new_guard())
    src_c = to_cute_tensor(src)
    return statistics.median(
        graph_samples_us([lambda: compiled(src_c, src_c, guard, current_stream())], samples)
    )


def steps_of(multicast: MulticastPlan) -> np.ndarray:
    """Loads each CTA of the launch ran (persistent clusters may run one fewer than cluster 0)."""
    walk = multicast.walk
    return np.repeat([walk.tiles_of_block(k) for k in range(multicast.clusters)], multicast.cluster_size)


def quantiles(values) -> dict[str, float]:
    values = np.asarray(values, dtype=np.float64).ravel()
    values = values[~np.isnan(values)]  # steps a CTA never ran
    if values.size == 0:
        return {}
    p10, p50, p90 = np.percentile(values, [10, 50, 90])
    return {"p10": float(p10), "median": float(p50), "p90": float(p90), "max": float(values.max())}


def summarise(
    layout: TimelineLayout,
    stamps: np.ndarray,
    cluster_size: int,
    stages: int,
    steps: np.ndarray | None = None,
) -> dict:
    """Intervals (ns, from the globaltimer plane) of a run: per step, medians over CTAs of the
    producer's wait for a free stage, the consumer's wait for a full one, the time from this
    CTA's issue (and from the cluster's last issue) until the stage filled, from a release
    until the producers that needed it saw the stage free, and the spread of issue times
    across a cluster; whole-kernel phases per CTA (a CTA ends at its producer's exit stamp or its
    consumer's last release, whichever is later); how many CTAs ran on each SM. `steps`: the
    loads each CTA ran (default: every CTA all of `layout.steps`); the others are left out."""
    ns = stamps[0].astype(np.int64)
    ctas = layout.ctas
    start = ns[:, layout.cta_word("start")]
    origin = start.min()
    ran = np.arange(layout.steps)[None, :] < (layout.steps if steps is None else np.asarray(steps)[:, None])
    event = {name: np.where(ran, layout.step_events(ns, name) - origin, np.nan) for name in STEP_EVENTS}
    clusters = ctas // cluster_size
    by_cluster = {
        name: values.reshape(clusters, cluster_size, layout.steps) for name, values in event.items()
    }
    # The tile is complete after the last slice (a cluster's CTAs all ran the same steps).
    last_issue = by_cluster["issued"].max(axis=1, keepdims=True)
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
        reuse = quantiles(acquired - last_release)
    # The same intra-CTA intervals in this SM's cycles: both warps of a CTA read one clock, and
    # the globaltimer may tick coarsely (its resolution is reported below).
    cycles = stamps[1].astype(np.int64)
    cyc = {name: np.where(ran, layout.step_events(cycles, name), np.nan) for name in STEP_EVENTS}
    in_cycles = {
        "producer_wait": quantiles(cyc["acquire_end"] - cyc["acquire_begin"]),
        "consumer_wait": quantiles(cyc["wait_end"] - cyc["wait_begin"]),
        "fill_after_own_issue": quantiles(cyc["wait_end"] - cyc["issued"]),
        "issue_to_next_issue": quantiles(np.diff(cyc["issued"], axis=1)),
        "release_cost (wait_end->released)": quantiles(cyc["released"] - cyc["wait_end"]),
        "ring (ready->done)": quantiles(
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
                "producer_wait_ns": quantiles(producer_wait[:, step]),
                "consumer_wait_ns": quantiles(consumer_wait[:, step]),
                "fill_after_own_issue_ns": quantiles(fill_from_own_issue[:, step]),
                "fill_after_cluster_last_issue_ns": quantiles(fill_from_last_issue[:, step]),
                "issue_spread_in_cluster_ns": quantiles(issue_spread[:, step]),
                "issue_to_next_issue_ns": quantiles(event["issued"][:, step + 1] - event["issued"][:, step])
                if step + 1 < layout.steps
                else {},
            }
        )
    ready = ns[:, layout.cta_word("ready")] - origin
    done = ns[:, layout.cta_word("done")] - origin
    exit_ = ns[:, layout.cta_word("exit")] - origin
    start_rel = start - origin
    # A CTA ends when both warps have: the producer's exit stamp (after its drain, with multicast)
    # or the consumer's last release, whichever is later.
    last_landed = np.nanmax(event["wait_end"], axis=1)
    end = np.maximum(exit_, np.nanmax(event["released"], axis=1))
    smids = stamps[0][:, layout.identity_word("smid")]
    per_sm = np.bincount(smids.astype(np.int64))
    return {
        "ctas": int(ctas),
        "clusters": int(clusters),
        "steps": int(layout.steps),
        "kernel_span_ns": int(end.max()),
        "globaltimer_smallest_tick_ns": resolution,
        "intra_cta_cycles": in_cycles,
        "cta_phases_ns": {
            "start": quantiles(start_rel),
            "setup (start->ready)": quantiles(ready - start_rel),
            "ring (ready->done)": quantiles(done - ready),
            "first issue (start->issued)": quantiles(event["issued"][:, 0] - start_rel),
            "producer exit (done->exit)": quantiles(exit_ - done),
            "after the last tile (landed->end)": quantiles(end - last_landed),
            "lifetime (start->end)": quantiles(end - start_rel),
        },
        "start_skew_in_cluster_ns": quantiles(
            start_rel.reshape(clusters, cluster_size).max(axis=1)
            - start_rel.reshape(clusters, cluster_size).min(axis=1)
        ),
        "waves": quantiles(per_sm[per_sm > 0]),
        "sms_used": int((per_sm > 0).sum()),
        "stage_reuse_after_last_release_ns": reuse,
        "totals_per_cta_ns": {
            "producer_wait": quantiles(np.nansum(producer_wait, axis=1)),
            "consumer_wait": quantiles(np.nansum(consumer_wait, axis=1)),
        },
        "per_step": per_step,
    }
