"""`TileRing`: an N-stage ring of shared-memory tiles filled by TMA, its full and empty barriers,
parities and hang guard; `kernels.ring.TmaRingKernel` is the ring kernel written on it.

Which barrier guards what:
- `full[s]` (1 arrival + the tile's bytes): "stage s holds the tile the consumers wait for".
  The producer arrives with expect_tx; TMA completes the bytes; consumers wait on it.
- `empty[s]` (one arrival per consumer warp): "every consumer warp is done reading stage s".
  Consumers arrive after their reads; the producer waits on it before the next load into s.
Each barrier completes once per trip round the ring, so the parity a waiter names is the trip
number mod 2 (`PipelinePlan.stage_and_parity`). The producer's first trip waits on the empty
barriers with parity 1, which a fresh barrier reports as already complete: all stages start free.

A kernel of your own may use `TileRing` directly (`examples/ring_rowmax.py`: `allocate`,
`init_barriers`, then `acquire_free`/`load` per step on the producer warp and `wait_full`/`release`
on the consumers). Keep the ring an attribute (`self.ring`): the DSL carries no plain Python object
through a device loop.

`hang_guard=True` bounds every wait (also pass `guard=`, a GUARD_WORDS int32 tensor, and `block=`): a wait
that runs out records (block, stage, parity, expected bytes, step) and that thread waits no more,
so the kernel ends and the host can raise instead of hanging.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass._mlir.dialects import nvvm
from cutlass.cute.nvgpu import cpasync

from ..plan import DEFAULT_RELEASE, RELEASES, PipelinePlan
from ..plan.ring import CONSUMER, GUARD_RECORD, PRODUCER
from .tma import (
    issue_tile_copy,
    matrix_first_view,
    shared_tile_layout,
)

# Polls before a guarded wait gives up. Non-blocking `test_wait` polls (a blocking try_wait may
# suspend for a system-defined time each round, so a count of those bounds nothing): about 0.1-1 s,
# far past any real wait for one tile.
GUARD_SPINS = 1 << 22


class TileRing:
    """The ring's host-side construction and device-side protocol for one `PipelinePlan`.

    `multicast_peers` > 1: the ring of one CTA in a cluster whose producers multicast every slice
    into every CTA's stage (the cluster family's kernels). A stage is then free only when the
    consumers of *every* CTA released it: each CTA's empty barrier expects consumer_warps x peers
    arrivals and a consumer warp releases a stage by arriving on that barrier in every CTA of the
    cluster.

    `remote_release` (multicast peers only): how a consumer warp's arrivals reach the peers'
    empty barriers, one of `plan.RELEASES`."""

    def __init__(
        self,
        pipeline: PipelinePlan,
        hang_guard: bool = False,
        multicast_peers: int = 1,
        remote_release: str = DEFAULT_RELEASE,
    ):
        if remote_release not in RELEASES:
            raise ValueError(f"remote release {remote_release!r} is not one of {RELEASES}")
        self.pipeline = pipeline
        self.plan = pipeline.load
        self.hang_guard = hang_guard
        self.multicast_peers = multicast_peers
        self.remote_release = remote_release
        self.element_type = getattr(cutlass, self.plan.config.element.cutlass_name)

    @property
    def declared_bytes(self) -> int:
        """What the producer declares per tile: the plan's expected bytes."""
        return self.plan.expected_tx_bytes

    # -- host ---------------------------------------------------------------------------------
    def make_load_atom(self, src: cute.Tensor):
        """(load atom, TMA coordinate tensor, shared tile layout) for `src`, inside a @cute.jit."""
        plan = self.plan
        shared_layout = shared_tile_layout(plan.config.tile, plan.rows_contiguous, plan.swizzle_bits)
        load_atom, coordinate_view = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(),
            matrix_first_view(src, len(plan.config.shape)),
            shared_layout,
            plan.config.tile,
        )
        return load_atom, coordinate_view, shared_layout

    # -- device -------------------------------------------------------------------------------
    def allocate(self, shared_layout: cute.ComposedLayout):
        """(tiles, full, empty): the stages first, at offset 0 of the 1024-aligned dynamic shared
        memory, each `stage_bytes` apart (a multiple of the TMA alignment); then full[], empty[].
        `tiles[None, None, stage]` is one stage's tile."""
        pipeline = self.pipeline
        smem = cutlass.memory.SmemAllocator()
        tiles = self.allocate_stages(smem, shared_layout)
        full = smem.allocate_array(cutlass.Int64, pipeline.stages)
        empty = smem.allocate_array(cutlass.Int64, pipeline.stages)
        return tiles, full, empty

    def allocate_stages(self, smem, shared_layout: cute.ComposedLayout) -> cute.Tensor:
        """The stages' tiles from `smem` (an `SmemAllocator`), tile-aligned, each `stage_bytes`
        apart, as one tensor whose last mode is the stage. A kernel whose stage holds more than
        one tile calls it once per tile."""
        plan, pipeline = self.plan, self.pipeline
        ring_ptr = smem.allocate(pipeline.ring_bytes, byte_alignment=plan.tile_alignment)
        outer = shared_layout.outer
        return cute.make_tensor(
            cute.recast_ptr(ring_ptr, shared_layout.inner, dtype=self.element_type),
            cute.make_layout(
                (*outer.shape, pipeline.stages), stride=(*outer.stride, pipeline.stage_elements)
            ),
        )

    def physical_rows(self, tiles: cute.Tensor) -> cute.Tensor:
        """The stages of a row-major ring as stored, (row, 16-byte chunk, element, stage), the
        swizzle left out: for reads whose order within a row does not matter (a row sum). A
        swizzled tile is one span wide, so the swizzle only permutes chunks within each row."""
        plan, pipeline = self.plan, self.pipeline
        tile_rows, tile_cols = plan.config.tile
        mapping = pipeline.rowsum_mapping
        return cute.make_tensor(
            cute.recast_ptr(tiles.iterator, dtype=self.element_type),  # no swizzle: as stored
            cute.make_layout(
                (tile_rows, mapping.chunks, mapping.vector, pipeline.stages),
                stride=(tile_cols, mapping.vector, 1, pipeline.stage_elements),
            ),
        )

    @cute.jit
    def init_barriers(self, full: cute.Pointer, empty: cute.Pointer, warp):
        """Each barrier initialised exactly once per block: elect_one elects one thread *per
        warp*, so the election is inside warp 0's branch. Then the fence and a block barrier - a
        cluster barrier with multicast peers, whose loads and arrivals target these barriers. The
        fence already releases the initialisation to the cluster, so the arrive is relaxed (no
        second memory barrier), as CUTLASS's pipelines do."""
        pipeline = self.pipeline
        if warp == 0:
            with cute.arch.elect_one():
                for stage in cutlass.range_constexpr(pipeline.stages):
                    cute.arch.mbarrier_init(full + stage, 1)
                    cute.arch.mbarrier_init(empty + stage, pipeline.consumer_warps * self.multicast_peers)
        cute.arch.mbarrier_init_fence()
        if cutlass.const_expr(self.multicast_peers > 1):
            cute.arch.cluster_arrive_relaxed()
            cute.arch.cluster_wait()
        else:
            cute.arch.barrier()

    @cute.jit
    def wait(self, barrier, parity, failed, guard, where):
        """mbarrier wait; with the hang guard, bounded, recording what timed out, `where`: (block,
        stage, step, role). Returns the (possibly newly set) `failed` flag; a failed thread waits
        no more."""
        if cutlass.const_expr(not self.hang_guard):
            cute.arch.mbarrier_wait(barrier, parity)
        else:
            done = failed
            spins = cutlass.Int32(0)
            while not done and spins < GUARD_SPINS:
                done = cute.arch.mbarrier_test_wait(barrier, parity)
                spins += 1
            if not done:
                failed = cutlass.Boolean(True)
                block, stage, step, role = where
                record = role * GUARD_RECORD
                # The first thread to time out (of any block) claims the record; the rest leave it,
                # so one report never mixes fields from different waits.
                if cute.arch.atomic_add((guard.iterator + record).llvm_ptr, cutlass.Int32(1)) == 0:
                    guard[record + 1] = block
                    guard[record + 2] = stage
                    guard[record + 3] = parity
                    guard[record + 4] = self.declared_bytes
                    guard[record + 5] = step
        return failed

    @cute.jit
    def acquire_free(self, empty, step, failed, guard=None, block=0):
        """Producer: the stage of the `step`-th load, once every consumer warp released it one
        trip ago (parity 1 on trip 0: free). Returns (stage, failed)."""
        stage, trip_parity = self.pipeline.stage_and_parity(step)
        failed = self.wait(empty + stage, trip_parity ^ 1, failed, guard, (block, stage, step, PRODUCER))
        return stage, failed

    @cute.jit
    def load(self, load_atom, global_part, shared_part, full, stage, failed):
        """Producer: declare the stage's bytes on its full barrier and start the TMA load. After a
        guard timeout, issue nothing more: a block must not exit with loads in flight."""
        self.issue(((load_atom, global_part, shared_part, None),), full, stage, failed)

    @cute.jit
    def issue(self, copies, full, stage, failed):
        """Producer: one arrival declaring the stage's bytes (`declared_bytes`: every copy's),
        then each copy, (atom, global part, shared part, multicast mask or None), completing on
        the stage's full barrier. A multicast copy moves this CTA's slice into every CTA its mask
        names; the declared bytes stay the whole tile's, since every peer's slice lands here too.
        A second arrival would complete the phase early, so there is one for all the copies."""
        if not failed:
            barrier = full + stage
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(barrier, self.declared_bytes)
            for index in cutlass.range_constexpr(len(copies)):
                atom, global_part, shared_part, mask = copies[index]
                issue_tile_copy(atom, global_part, shared_part, barrier, mask, self.pipeline.load_policy)

    @cute.jit
    def drain(self, empty, steps, failed, guard=None, block=0):
        """Producer, after its `steps` loads, with multicast peers: wait until the consumers of
        every CTA released each stage's last tile (one more acquire per stage; a stage never used
        is free at once). Then no peer arrives on this CTA's barriers or multicasts into its
        stages any more, and the CTA may exit - without a cluster barrier, whose arrive would
        also wait for all of the CTA's memory operations (CUTLASS's `producer_tail`).

        Every CTA of the cluster must run the same `steps` over the same stages: a CTA that ran
        fewer would find its last trips' phases already complete and exit while a peer still
        multicasts into it. (Both cluster kernels give every CTA its cluster's walk.) A GPU run
        cannot show an early exit, so the CPU tests count the drain's waits in the PTX."""
        for extra in cutlass.range_constexpr(self.pipeline.stages):
            _, failed = self.acquire_free(empty, steps + extra, failed, guard, block)
        return failed

    @cute.jit
    def wait_full(self, full, step, failed, guard=None, block=0):
        """Consumer: the stage of the `step`-th load, once its bytes have landed. Returns
        (stage, failed)."""
        stage, parity = self.pipeline.stage_and_parity(step)
        failed = self.wait(full + stage, parity, failed, guard, (block, stage, step, CONSUMER))
        return stage, failed

    @cute.jit
    def release(self, empty, stage, failed):
        """Consumer warp: every lane's reads of the stage are done before the warp's one arrival
        frees it. A consumer whose guarded wait gave up frees nothing more: the producer then
        times out too and stops issuing, so the block never exits with loads still landing."""
        cute.arch.sync_warp()
        if not failed:
            if cutlass.const_expr(self.multicast_peers > 1 and self.remote_release == "lanes"):
                # Every peer's producer multicasts into this stage: lane i frees it in CTA i.
                lane = cute.arch.lane_idx()
                if lane < self.multicast_peers:
                    cute.arch.mbarrier_arrive(empty + stage, lane)
            else:
                with cute.arch.elect_one():
                    if cutlass.const_expr(self.multicast_peers > 1):
                        # Every peer's producer multicasts into this stage: free it in each of them.
                        scope = {"elected-cluster": nvvm.MemScopeKind.CLUSTER, "elected-cta": None}
                        for peer in cutlass.range_constexpr(self.multicast_peers):
                            cute.arch.mbarrier_arrive(empty + stage, peer, scope=scope[self.remote_release])
                    else:
                        cute.arch.mbarrier_arrive(empty + stage)


class PairRing(TileRing):
    """A `TileRing` whose stage holds two tiles of the plan's layout (so the same offset of a stage
    is the same (row, column) in both, whatever the swizzle): `allocate` returns both rings'
    stages, and the one arrival on the full barrier declares `pair_bytes` (both tiles' loads).
    The parities, waits, releases and the drain are `TileRing`'s."""

    def __init__(self, pipeline: PipelinePlan, pair_bytes: int, **ring_options):
        super().__init__(pipeline, **ring_options)
        self.pair_bytes = pair_bytes

    @property
    def declared_bytes(self) -> int:
        return self.pair_bytes

    def allocate(self, shared_layout: cute.ComposedLayout):
        """((first tiles, second tiles), full, empty): the two rings, then the barriers, in the
        order the plans count their shared memory."""
        stages = self.pipeline.stages
        smem = cutlass.memory.SmemAllocator()
        first = self.allocate_stages(smem, shared_layout)
        second = self.allocate_stages(smem, shared_layout)
        full = smem.allocate_array(cutlass.Int64, stages)
        empty = smem.allocate_array(cutlass.Int64, stages)
        return (first, second), full, empty
