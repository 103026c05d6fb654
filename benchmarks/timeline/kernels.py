"""The cluster ring instrumented and compared, kept out of tmakit (whose ring is
`tmakit.cluster.kernel.PipelinedMulticastKernel`), for `scripts/multicast_timeline.py`:

- `TimelineMulticastKernel`: tmakit's ring whose hooks (`TmaRingKernel`'s `acquire_stage`,
  `load_stage`, `wait_stage`, `release_stage`, `producer_end`, and the set-up) are wrapped in time
  stamps: lane 0 of each warp writes `%globaltimer` and `%clock64` around every wait, issue and
  release (`layout.TimelineLayout`) into the stamps, a fourth host argument, int64 of
  `TimelineLayout.of(multicast).shape`. tmakit's ring takes no such argument, so this kernel's
  `kernel` takes it and hands its hooks a context that carries it (`StampedContext`).
- `PipelineTmaAsyncMulticastKernel`: the same cluster ring written with CUTLASS's own pipeline,
  for comparison.
- `compile_cluster_ring`: the ring of a protocol (`PROTOCOLS`) compiled for sm_90a, stamped or not.
"""

from __future__ import annotations

from collections import namedtuple

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import pipeline as cutlass_pipeline
from cutlass.cute.nvgpu import cpasync

from tmakit.cluster.kernel import PipelinedMulticastKernel, cluster_slice_views
from tmakit.cluster.launch import compile_multicast_load, multicast_load_arguments
from tmakit.cluster.plan import MulticastPlan
from tmakit.config import DTYPES
from tmakit.kernels.ring import RingContext
from tmakit.plan import DEFAULT_RELEASE, RELEASES
from tmakit.runtime.compile import CompiledKernel, compiles, fake_tensor

from .layout import TimelineLayout

PIPELINE_TMA_ASYNC = "pipeline-tma-async"  # the ring written with CUTLASS's PipelineTmaAsync
PROTOCOLS = (*RELEASES, PIPELINE_TMA_ASYNC)
STAMP_ELEMENT = DTYPES["int64"]

# The ring's context with the stamps beside it: tmakit's hooks read the ring's fields by name.
StampedContext = namedtuple("StampedContext", (*RingContext._fields, "stamps"))


class TimelineMulticastKernel(PipelinedMulticastKernel):
    """`PipelinedMulticastKernel` with time stamps (`timeline`, on by default); the host function
    takes a fourth tensor, the stamps. Off, nothing is stamped."""

    def __init__(
        self,
        multicast: MulticastPlan,
        store: bool = True,
        release: str = DEFAULT_RELEASE,
        timeline: bool = True,
    ):
        super().__init__(multicast, store, release)
        self.timeline = timeline
        self.layout = TimelineLayout.of(multicast)

    @cute.jit
    def __call__(self, src: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream, stamps: cute.Tensor = None):
        source, copies, shared_layout = self.ring_arguments(src, out)
        self.kernel(source, copies, None, shared_layout, None, stamps).launch(**self.launch_options(stream))

    @cute.kernel
    def kernel(self, source, sink, guard: cute.Tensor, shared_layout: cute.ComposedLayout, run_time, stamps):
        """`TmaRingKernel.kernel` whose hooks get the stamps in their context."""
        context = self.stamped_begin(shared_layout, self.walk(run_time), guard, stamps)
        if context.warp == 0:
            self.produce(context, source)
        else:
            self.consume(context, sink, context.warp - 1)

    @cute.jit
    def stamp(self, stamps, cta, word, lane):
        """With the timeline on: lane 0 records the global timer and this SM's cycle counter at
        `word` of CTA `cta`'s record. Off: nothing is traced."""
        if cutlass.const_expr(self.timeline):
            now = cute.arch.globaltimer()
            cycles = cute.arch.clock64()
            if lane == 0:
                stamps[0, cta, word] = now
                stamps[1, cta, word] = cycles

    @cute.jit
    def stamp_identity(self, stamps, cta, cluster, rank, lane):
        if cutlass.const_expr(self.timeline):
            if lane == 0:
                layout = self.layout
                for plane in cutlass.range_constexpr(2):
                    stamps[plane, cta, layout.identity_word("smid")] = cutlass.Int64(cute.arch.smid())
                    stamps[plane, cta, layout.identity_word("cluster")] = cutlass.Int64(cluster)
                    stamps[plane, cta, layout.identity_word("rank")] = cutlass.Int64(rank)

    @cute.jit
    def stamped_wait(self, where, event: cutlass.Constexpr, step, wait, *args):
        """`wait(*args)`, a wait for the `step`-th stage, between its stamps `<event>_begin` and
        `<event>_end` (`layout`) at `where` (stamps, CTA, lane); its result returned."""
        stamps, cta, lane = where
        self.stamp(stamps, cta, self.layout.step_word(f"{event}_begin", step), lane)
        result = wait(*args)
        self.stamp(stamps, cta, self.layout.step_word(f"{event}_end", step), lane)
        return result

    @cute.jit
    def step_stamp(self, context: StampedContext, event: cutlass.Constexpr, step):
        self.cta_stamp(context, self.layout.step_word(event, step))

    @cute.jit
    def cta_stamp(self, context: StampedContext, word):
        self.stamp(context.stamps, self.cta_of(context), word, cute.arch.lane_idx())

    @cute.jit
    def cta_of(self, context: StampedContext):
        """The CTA's index in the stamps: its cluster's first, plus its rank in the cluster."""
        return context.block * self.multicast.cluster_size + context.rank

    @cute.jit
    def ring_wait(self, context: StampedContext, event: cutlass.Constexpr, wait, step, failed):
        """A ring hook's wait (`acquire_stage`, `wait_stage`: (stage, failed)), stamped."""
        where = (context.stamps, self.cta_of(context), cute.arch.lane_idx())
        return self.stamped_wait(where, event, step, wait, self, context, step, failed)

    @cute.jit
    def stamped_begin(self, shared_layout, walk, guard, stamps) -> StampedContext:
        """`begin`, with the stamps: warp 0 stamps the CTA's start and identity before the set-up,
        and "ready" after it."""
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        cluster, rank = self.position()
        lane = cute.arch.lane_idx()
        cta = cluster * self.multicast.cluster_size + rank
        if warp == 0:
            self.stamp(stamps, cta, self.layout.cta_word("start"), lane)
            self.stamp_identity(stamps, cta, cluster, rank, lane)
        context = self.begin(shared_layout, walk, guard)
        if warp == 0:
            self.stamp(stamps, cta, self.layout.cta_word("ready"), lane)
        return StampedContext(*context, stamps)

    @cute.jit
    def acquire_stage(self, context: StampedContext, step, failed):
        return self.ring_wait(context, "acquire", PipelinedMulticastKernel.acquire_stage, step, failed)

    @cute.jit
    def load_stage(self, context: StampedContext, source, stage, step, failed):
        PipelinedMulticastKernel.load_stage(self, context, source, stage, step, failed)
        self.step_stamp(context, "issued", step)

    @cute.jit
    def wait_stage(self, context: StampedContext, step, failed):
        return self.ring_wait(context, "wait", PipelinedMulticastKernel.wait_stage, step, failed)

    @cute.jit
    def release_stage(self, context: StampedContext, stage, step, failed):
        PipelinedMulticastKernel.release_stage(self, context, stage, step, failed)
        self.step_stamp(context, "released", step)

    @cute.jit
    def producer_end(self, context: StampedContext, failed):
        self.cta_stamp(context, self.layout.cta_word("done"))
        PipelinedMulticastKernel.producer_end(self, context, failed)
        self.cta_stamp(context, self.layout.cta_word("exit"))


class PipelineTmaAsyncMulticastKernel(TimelineMulticastKernel):
    """The same cluster ring written with CUTLASS's own pipeline, `cutlass.pipeline.PipelineTmaAsync`,
    for comparison (`scripts/multicast_timeline.py`): the same tiles, slices, multicast mask, shared
    memory, host side and time stamps as `TimelineMulticastKernel`; only the
    protocol is the DSL's - its barrier set-up (a relaxed cluster barrier), the producer's acquire
    (wait on empty, then arrive with expect_tx on its own full barrier), the consumer's release
    (lane i of the warp arrives on CTA i's empty barrier at CTA scope) and its phase bookkeeping
    (`PipelineState`) and its exit (`producer_tail`). The cluster is given to the pipeline as one
    row of CTAs, (1, 1, size, 1), multicasting along it, since every CTA here multicasts to every
    other (a GEMM's A operand)."""

    def __init__(self, multicast: MulticastPlan, store: bool = True, timeline: bool = False):
        super().__init__(multicast, store, timeline=timeline)

    @cute.jit
    def identify(self, stamps, load_atom):
        """(warp, lane, rank in the cluster, cluster index, CTA index, the cluster's loads); warp 0
        stamps the CTA's start and identity, and prefetches the tensor map."""
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        lane = cute.arch.lane_idx()
        rank = cute.arch.block_idx_in_cluster()
        cluster, _, _ = cute.arch.cluster_idx()
        cta = cluster * self.multicast.cluster_size + rank
        if warp == 0:
            self.stamp(stamps, cta, self.layout.cta_word("start"), lane)
            self.stamp_identity(stamps, cta, cluster, rank, lane)
        steps = self.multicast.walk.tiles_of_block(cluster)
        if warp == 0:
            with cute.arch.elect_one():
                cpasync.prefetch_descriptor(load_atom)
        return warp, lane, rank, cluster, cta, steps

    @cute.kernel
    def kernel(
        self, source, copies: cute.Tensor, guard, shared_layout: cute.ComposedLayout, run_time, stamps
    ):
        multicast, layout = self.multicast, self.layout
        stages = self.pipeline.stages
        load_atom, coordinate_view = source
        warp, lane, rank, cluster, cta, steps = self.identify(stamps, load_atom)
        # TileRing's allocation: the stages, then full[stages] and empty[stages] back to back -
        # the barrier storage PipelineTmaAsync expects (its empty barriers at storage + stages).
        ring, full, _ = self.ring.allocate(shared_layout)
        tma_pipeline = cutlass_pipeline.PipelineTmaAsync.create(
            num_stages=stages,
            producer_group=cutlass_pipeline.CooperativeGroup(cutlass_pipeline.Agent.Thread),
            consumer_group=cutlass_pipeline.CooperativeGroup(cutlass_pipeline.Agent.Thread, 32),
            tx_count=self.plan.expected_tx_bytes,
            barrier_storage=full,
            cta_layout_vmnk=cute.make_layout((1, 1, multicast.num_multicast, 1)),
            tidx=lane,
            mcast_mode_mn=(1, 0),
            enable_multicast_signaling=True,
        )
        if warp == 0:
            self.stamp(stamps, cta, layout.cta_word("ready"), lane)

        mask = cutlass.Int16(multicast.multicast_mask) if cutlass.const_expr(multicast.multicast) else None
        if warp == 0:
            state = cutlass_pipeline.make_pipeline_state(cutlass_pipeline.PipelineUserType.Producer, stages)
            for step in cutlass.range(steps, unroll=1):
                self.stamped_wait((stamps, cta, lane), "acquire", step, tma_pipeline.producer_acquire, state)
                tile_coord = self.tile_of(cluster, step)
                global_part, shared_part = cluster_slice_views(
                    multicast, load_atom, coordinate_view, ring[None, None, state.index], tile_coord, rank
                )
                barrier = tma_pipeline.producer_get_barrier(state)
                if cutlass.const_expr(mask is None):
                    cute.copy(load_atom, global_part, shared_part, tma_bar_ptr=barrier)
                else:
                    cute.copy(load_atom, global_part, shared_part, tma_bar_ptr=barrier, mcast_mask=mask)
                tma_pipeline.producer_commit(state)
                self.stamp(stamps, cta, layout.step_word("issued", step), lane)
                state.advance()
            self.stamp(stamps, cta, layout.cta_word("done"), lane)
            if cutlass.const_expr(multicast.num_multicast > 1):
                tma_pipeline.producer_tail(state)
        else:
            state = cutlass_pipeline.make_pipeline_state(cutlass_pipeline.PipelineUserType.Consumer, stages)
            for step in cutlass.range(steps, unroll=1):
                self.stamped_wait((stamps, cta, lane), "wait", step, tma_pipeline.consumer_wait, state)
                tile_coord = self.tile_of(cluster, step)
                self.store_tile(ring[None, None, state.index], copies, tile_coord, rank, lane)
                if cutlass.const_expr(self.store):
                    cute.arch.sync_warp()  # every lane's reads before any lane's release
                tma_pipeline.consumer_release(state)
                self.stamp(stamps, cta, layout.step_word("released", step), lane)
                state.advance()
        if warp == 0:
            self.stamp(stamps, cta, layout.cta_word("exit"), lane)


def compile_cluster_ring(
    multicast: MulticastPlan,
    protocol: str = DEFAULT_RELEASE,
    store: bool = True,
    timeline: bool = False,
    keep_ptx: bool = False,
) -> CompiledKernel:
    """The cluster ring of `protocol` (`PROTOCOLS`) for sm_90a, called with (src, copies, stream)
    as tmakit's ring is, plus the stamps when `timeline`: tmakit's own ring
    (`compile_multicast_load`) for one of its release protocols unstamped, else this lab's."""
    if protocol in RELEASES and not timeline:
        return compile_multicast_load(multicast, keep_ptx=keep_ptx, store=store, release=protocol)
    return compile_lab_ring(multicast, protocol, store, timeline, keep_ptx=keep_ptx)


@compiles
def compile_lab_ring(multicast: MulticastPlan, protocol: str, store: bool, timeline: bool) -> tuple:
    """`PipelineTmaAsyncMulticastKernel` for "pipeline-tma-async", else `TimelineMulticastKernel`
    with that release protocol; stamped when `timeline` (int64 of `TimelineLayout.of(multicast).shape`)."""
    if multicast.stages == 1:
        raise ValueError("the instrumented rings take stages > 1")
    multicast.load.check_specialised()
    if protocol == PIPELINE_TMA_ASYNC:
        kernel = PipelineTmaAsyncMulticastKernel(multicast, store, timeline)
    else:
        kernel = TimelineMulticastKernel(multicast, store, protocol, timeline)
    stamps = (fake_tensor(STAMP_ELEMENT, TimelineLayout.of(multicast).shape),) if timeline else ()
    return kernel, *multicast_load_arguments(multicast), *stamps
