"""Where a cluster ring's time goes: the instrumented multicast ring (`plan.timeline`) launched on
the GPU, its stamps summarised, and the uninstrumented kernels timed beside it - tmakit's ring
with each consumer-release protocol, the same ring written with CUTLASS's `PipelineTmaAsync`, each
with multicast and without. `scripts/multicast_timeline.py` runs it."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..check.inputs import make_input_tensor
from ..check.run import verify_multicast_load
from ..plan import RELEASES, LoadPlan, MulticastPlan, PipelinePlan
from ..plan.timeline import summarise
from ..runtime.compile import to_cute_tensor
from ..runtime.device import current_stream
from ..runtime.launch import PIPELINE_TMA_ASYNC, compile_multicast_load, compile_pipelined_load, new_guard
from .timing import graph_samples_us

PROTOCOLS = (*RELEASES, PIPELINE_TMA_ASYNC)


@dataclass(frozen=True)
class RingVariant:
    """One kernel of the comparison: a cluster, multicast or not, and the release protocol."""

    cluster: tuple[int, int]
    multicast: bool
    protocol: str

    @property
    def name(self) -> str:
        what = "multicast" if self.multicast else "no-multicast"
        return f"{self.cluster[0]}x{self.cluster[1]} {what} {self.protocol}"


def variants(clusters: list[tuple[int, int]], protocols: list[str]) -> list[RingVariant]:
    """Every protocol with multicast; without multicast a CTA releases only itself, so tmakit's
    protocols are one kernel there (the first of them named) beside PipelineTmaAsync's."""
    found = []
    for cluster in clusters:
        found += [RingVariant(cluster, True, protocol) for protocol in protocols]
        tmakit = [p for p in protocols if p in RELEASES][:1]
        found += [
            RingVariant(cluster, False, p) for p in tmakit + [p for p in protocols if p == PIPELINE_TMA_ASYNC]
        ]
    return found


def stamps_of(multicast: MulticastPlan, protocol: str, warm_launches: int = 3):
    """One launch of the instrumented ring on the seed input after `warm_launches` (L2 hot):
    its stamps, int64 of `multicast.timeline.shape`, on the host."""
    import torch

    plan = multicast.load
    compiled = compile_multicast_load(multicast, store=False, timeline=True, release=protocol)
    src = make_input_tensor(plan)
    scratch = torch.empty(multicast.copies_shape, dtype=src.dtype, device="cuda")  # never written
    stamps = torch.zeros(multicast.timeline.shape, dtype=torch.int64, device="cuda")
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

    multicast = MulticastPlan(plan, variant.cluster, variant.multicast, stages=stages)
    verdicts = verify_multicast_load(multicast, release=variant.protocol)
    compiled = compile_multicast_load(multicast, store=False, release=variant.protocol)
    src = make_input_tensor(plan)
    scratch = torch.empty(multicast.copies_shape, dtype=src.dtype, device="cuda")
    src_c, scratch_c = to_cute_tensor(src), to_cute_tensor(scratch)
    times = graph_samples_us([lambda: compiled(src_c, scratch_c, current_stream())], samples)
    raw = stamps_of(multicast, variant.protocol)
    # What the stamps cost: the instrumented kernel timed the same way.
    instrumented = compile_multicast_load(multicast, store=False, timeline=True, release=variant.protocol)
    stamped_c = to_cute_tensor(torch.zeros(multicast.timeline.shape, dtype=torch.int64, device="cuda"))
    instrumented_us = graph_samples_us(
        [lambda: instrumented(src_c, scratch_c, current_stream(), stamped_c)], samples
    )
    report = {
        "variant": variant.name,
        "cluster": list(variant.cluster),
        "multicast": variant.multicast,
        "protocol": variant.protocol,
        "stages": stages,
        "verified": f"{sum(v.ok for v in verdicts)}/{len(verdicts)} CTA ranks hold every tile "
        f"({verdicts[0]})",
        "all_ok": all(v.ok for v in verdicts),
        "median_us": statistics.median(times),
        "min_us": min(times),
        "instrumented_median_us": statistics.median(instrumented_us),
        "timeline": summarise(multicast.timeline, raw, multicast.cluster_size, stages),
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
