"""The N-stage ring on the CPU: plan arithmetic, schedule replay, compiled PTX."""

import re

import pytest

from tmakit import SEED, LoadConfig, LoadPlan, TmaConfigError
from tmakit.limits import L2_HINTS
from tmakit.load.launch import compile_pipelined_load
from tmakit.model import pipeline_schedule, replay
from tmakit.plan import TILE_ORDERS, CopyPlan, PipelinePlan
from tmakit.ptx import expect_tx_byte_counts, find_instructions
from tmakit.runtime.launch import compile_copy


def test_seed_ring_fits_seven_stages_and_refuses_eight():
    plan = LoadPlan(SEED)
    assert PipelinePlan(plan, stages=7).max_stages == 7
    assert PipelinePlan(plan, stages=7).smem_bytes == 7 * 32768 + 7 * 16
    with pytest.raises(TmaConfigError, match="8 stages of 32768 bytes.*1..7 stages fit"):
        PipelinePlan(plan, stages=8)
    with pytest.raises(TmaConfigError, match="consumer warps is 0"):
        PipelinePlan(plan, consumer_warps=0)


class CountingDivisor:
    """A stand-in for the DSL's fast divisor: `//` by it counts, and divides by its count."""

    def __init__(self, count, uses):
        self.count, self.uses = count, uses

    def __rfloordiv__(self, dividend):
        self.uses.append(self.count)
        return dividend // self.count


@pytest.mark.parametrize("order", ["interleaved", "columns", "blocked"])
def test_a_walk_with_fast_divisors_walks_the_same_tiles_dividing_only_through_them(order):
    """A shape-generic kernel's walk divides by the run-time counts' fast divisors, never by the
    counts (a division instruction per tile): the same tiles, every division through a divisor."""
    load = LoadPlan(LoadConfig((3, 200, 136), "bf16", (64, 64)))
    pipeline = PipelinePlan(load, persistent=True, sm_count=5, tile_order=order)
    plain = pipeline.walk
    uses = []

    class Divisors:
        row_blocks = CountingDivisor(plain.row_blocks, uses)
        column_tiles = CountingDivisor(plain.column_tiles, uses)
        matrix_tiles = CountingDivisor(plain.matrix_tiles, uses)
        grid = CountingDivisor(plain.grid, uses)

    class Counts(int):  # a count that refuses to be divided by
        def __rfloordiv__(self, other):
            raise AssertionError("divided by a count, not its divisor")

    fast = pipeline.walk_of(
        Counts(plain.row_blocks), Counts(plain.column_tiles), plain.batch_count, Counts(plain.grid), Divisors
    )
    for block in range(plain.grid):
        assert fast.tiles_of_block(block) == plain.tiles_of_block(block)
        for step in range(plain.tiles_of_block(block)):
            assert fast.tile_of(block, step) == plain.tile_of(block, step)
    assert uses


def test_swizzled_stages_stay_1024_aligned():
    pipeline = PipelinePlan(LoadPlan(LoadConfig((512, 512), "fp16", (24, 64), 128)), stages=3)
    assert pipeline.load.expected_tx_bytes == 3072 and pipeline.stage_bytes == 3072
    pipeline = PipelinePlan(LoadPlan(LoadConfig((512, 512), "fp16", (20, 64), 128)), stages=3)
    assert pipeline.stage_bytes == 3072  # 2560 rounded up to the 1024-byte swizzle alignment


@pytest.mark.parametrize("order", ["interleaved", "columns", "blocked"])
@pytest.mark.parametrize("shape", [(1000, 776), (64, 64), (4, 3, 200, 136)])
def test_persistent_grid_covers_every_tile_once(order, shape):
    load = LoadPlan(LoadConfig(shape, "bf16", (64, 64)))
    pipeline = PipelinePlan(load, persistent=True, sm_count=7, tile_order=order)
    assert pipeline.grid == min(7, load.total_tile_loads)
    runs = [[pipeline.tile_of(b, s) for s in range(pipeline.tiles_of_block(b))] for b in range(pipeline.grid)]
    seen = [tile for run in runs for tile in run]
    assert len(seen) == len(set(seen)) == load.total_tile_loads
    assert max(map(len, runs)) - min(map(len, runs)) <= 1  # balanced either way
    if order == "blocked":  # each block one contiguous run, in the blocks' order
        assert seen == sorted(seen)
    if order == "columns":  # the grid's first step: down the first column of tiles
        first_step = [run[0] for run in runs]
        assert [tile[2] for tile in first_step] == sorted(tile[2] for tile in first_step)
        if len(first_step) > 1:
            assert first_step[1][1] == (first_step[0][1] + 1) % load.row_blocks
    assert pipeline.threads_per_block == 64


@pytest.mark.parametrize("stages", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("tiles", [1, 5, 7, 9, 16])
def test_ring_phases_replay_clean_across_wrap_around(stages, tiles):
    """Every stage's parity, for tile counts that are and are not multiples of the ring."""
    pipeline = PipelinePlan(LoadPlan(SEED), stages=stages)
    assert [pipeline.stage_and_parity(step) for step in range(tiles)] == [
        (step % stages, (step // stages) % 2) for step in range(tiles)
    ]
    report = replay(pipeline_schedule(tiles, stages, pipeline.load.expected_tx_bytes))
    assert report.ok, report.describe()
    assert not replay(pipeline_schedule(tiles, stages, 32768, skip_empty_wait=True)).ok or tiles <= stages


@pytest.mark.parametrize("consumer", ["none", "store", "rowsum"])
@pytest.mark.parametrize("persistent", [False, True])
def test_pipelined_kernel_compiles_with_one_init_per_barrier(consumer, persistent):
    pipeline = PipelinePlan(LoadPlan(SEED), stages=4, consumer_warps=2, persistent=persistent)
    ptx = compile_pipelined_load(pipeline, consumer, keep_ptx=True).ptx
    found = find_instructions(ptx)
    assert found["mbarrier.init"].count == 2 * 4  # full[] and empty[] of each stage, unrolled
    assert found["cp.async.bulk.tensor"].count == 1
    assert expect_tx_byte_counts(ptx) == [32768]
    assert ".reqntid 96, 1, 1" in ptx  # 1 producer + 2 consumer warps
    assert "mbarrier.arrive.shared" in ptx  # consumers release stages


def test_hang_guard_bounds_every_wait_with_non_blocking_polls():
    from tmakit.kernels.tile_ring import GUARD_SPINS

    pipeline = PipelinePlan(LoadPlan(SEED), stages=2)
    guarded = compile_pipelined_load(pipeline, "store", hang_guard=True, keep_ptx=True).ptx
    plain = compile_pipelined_load(pipeline, "store", keep_ptx=True).ptx
    assert str(GUARD_SPINS - 1) in guarded and str(GUARD_SPINS - 1) not in plain  # the poll bound
    assert "mbarrier.test_wait" in guarded and "mbarrier.test_wait" not in plain
    assert "atom.add" in guarded or "red." in guarded  # the first timeout claims the record


def test_prefetch_options_compile_to_the_prefetch_instructions():
    pipeline = PipelinePlan(LoadPlan(SEED), stages=1, prefetch_tiles=3, prefetch_descriptor=True)
    ptx = compile_pipelined_load(pipeline, "store", keep_ptx=True).ptx
    assert "cp.async.bulk.prefetch.tensor.2d.L2.global.tile" in ptx
    assert "prefetch.tensormap" in ptx
    plain = compile_pipelined_load(PipelinePlan(LoadPlan(SEED), stages=1), "store", keep_ptx=True).ptx
    assert "prefetch" not in plain
    summary = pipeline.summary()
    assert "prefetch          tile 3 loads ahead into L2, TMA descriptor at kernel start" in summary
    with pytest.raises(TmaConfigError, match="prefetch distance is -1"):
        PipelinePlan(LoadPlan(SEED), prefetch_tiles=-1)


def test_hang_report_prefers_the_consumers_record():
    """The guard buffer's decoding, with synthetic words (the kernel writes them on the GPU)."""
    import numpy as np

    from tmakit.errors import TmaHangError
    from tmakit.runtime.launch import raise_if_timed_out

    class Words:  # stands in for the GPU tensor: only .cpu() is used
        def __init__(self, words):
            self.words = np.array(words)

        def cpu(self):
            return self.words

    raise_if_timed_out(Words([0] * 16))
    producer = [1, 5, 0, 0, 32784, 3, 0, 0]
    consumer = [1, 5, 0, 0, 32784, 0, 0, 0]
    with pytest.raises(
        TmaHangError, match=r"block 5, stage 0, parity 0, step 0 \(consumer waiting for a full"
    ):
        raise_if_timed_out(Words(producer + consumer))
    with pytest.raises(TmaHangError, match="producer waiting for a free stage.*declares 32784 bytes"):
        raise_if_timed_out(Words(producer + [0] * 8))


def test_copy_consumer_stores_with_tma_from_one_thread():
    pipeline = PipelinePlan(
        LoadPlan(LoadConfig((3, 1000, 776), "bf16", (64, 64), 128)), stages=4, persistent=True
    )
    ptx = compile_copy(CopyPlan(pipeline), keep_ptx=True).ptx
    lines = [line.strip() for line in ptx.splitlines()]
    store = [
        i for i, line in enumerate(lines) if line.startswith("cp.async.bulk.tensor.3d.global.shared::cta")
    ]
    assert len(store) == 1
    assert lines[store[0] + 1] == "cp.async.bulk.commit_group;"
    assert lines[store[0] + 2].startswith("cp.async.bulk.wait_group.read")  # stage read before release
    # At exit only the stores' reads of shared memory are waited for: their writes complete
    # before the grid does, so waiting for them would only add their latency to every block.
    assert any(line.startswith("cp.async.bulk.wait_group.read \t0") for line in lines)
    assert not any(line.startswith("cp.async.bulk.wait_group \t") for line in lines)
    before = lines[store[0] - 40 : store[0]]
    assert any(line.startswith("elect.sync") for line in before), "the store must be issued by one thread"
    # The storing warp fetches the store's tensor map before its first wait (the load's is fetched
    # by its first use, right at the start).
    prefetch = [i for i, line in enumerate(lines) if line.startswith("prefetch.tensormap")]
    assert len(prefetch) == 1 and prefetch[0] < store[0]


def tma_cache_policies(ptx: str) -> dict[str, int]:
    """Each TMA copy's direction -> the 64-bit L2 cache policy its `.L2::cache_hint` operand holds
    (4.8.1 always emits the hint; policy 0 is no hint)."""
    values = dict(re.findall(r"mov\.b64\s+(%rd\d+), (\d+);", ptx))
    policies = {}
    for line in ptx.splitlines():
        if line.strip().startswith("cp.async.bulk.tensor") and "cache_hint" in line:
            direction = "store" if ".global.shared::cta" in line else "load"
            policies[direction] = int(values[line.strip().rstrip(";").split(", ")[-1]])
    return policies


@pytest.mark.parametrize("transpose", [False, True])
def test_evict_first_hints_the_copys_loads_and_stores(transpose):
    L2_EVICT_FIRST = L2_HINTS["evict_first"]
    config = LoadConfig((1024, 512), "fp16", (128, 128) if transpose else (32, 256))
    plan = dict(stages=2, persistent=True, consumer_warps=4 if transpose else 1)
    hinted = compile_copy(
        CopyPlan(PipelinePlan(LoadPlan(config), evict_first=True, **plan), transpose), keep_ptx=True
    )
    plain = compile_copy(CopyPlan(PipelinePlan(LoadPlan(config), **plan), transpose), keep_ptx=True)
    assert tma_cache_policies(hinted.ptx) == {"load": L2_EVICT_FIRST, "store": L2_EVICT_FIRST}
    assert tma_cache_policies(plain.ptx) == {"load": 0, "store": 0}


def test_load_and_store_hints_are_set_apart():
    config = LoadConfig((1024, 512), "fp16", (32, 256))
    pipeline = PipelinePlan(LoadPlan(config), stages=2, persistent=True, load_hint="evict_first")
    compiled = compile_copy(CopyPlan(pipeline, store_hint="evict_last"), keep_ptx=True)
    assert tma_cache_policies(compiled.ptx) == {
        "load": L2_HINTS["evict_first"],
        "store": L2_HINTS["evict_last"],
    }
    with pytest.raises(TmaConfigError, match="L2 hint"):
        CopyPlan(PipelinePlan(LoadPlan(config)), store_hint="keep")
    with pytest.raises(TmaConfigError, match="L2 hint"):
        PipelinePlan(LoadPlan(config), load_hint="keep")


def test_every_tile_order_compiles_for_sm90a():
    load = LoadPlan(LoadConfig((1000, 776), "fp16", (16, 256)))
    plans = [PipelinePlan(load, stages=4, persistent=True, sm_count=5, tile_order=o) for o in TILE_ORDERS]
    ptx = [compile_copy(CopyPlan(p), keep_ptx=True).ptx for p in plans]
    assert len(set(ptx)) == len(TILE_ORDERS)
    with pytest.raises(TmaConfigError, match="tile order"):
        PipelinePlan(load, tile_order="random")


def test_programmatic_dependent_launch_waits_before_any_global_access():
    config = LoadConfig((1024, 512), "fp16", (16, 256))
    with_pdl = compile_copy(
        CopyPlan(PipelinePlan(LoadPlan(config), stages=4, persistent=True, pdl=True)), keep_ptx=True
    ).ptx
    lines = [line.strip() for line in with_pdl.splitlines()]
    wait = lines.index("griddepcontrol.wait;")
    trigger = lines.index("griddepcontrol.launch_dependents;")
    first_tma = next(i for i, line in enumerate(lines) if line.startswith("cp.async.bulk.tensor"))
    assert wait < trigger < first_tma  # waits, then lets the next kernel start, then copies
    without = compile_copy(CopyPlan(PipelinePlan(LoadPlan(config), stages=4, persistent=True)), keep_ptx=True)
    assert "griddepcontrol" not in without.ptx


def test_the_tile_ring_serves_a_users_own_kernel():
    """examples/ring_rowmax.py: a row-max kernel written on TileRing compiles for sm_90a."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent.parent / "examples" / "ring_rowmax.py"
    spec = importlib.util.spec_from_file_location("ring_rowmax", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    ptx = example.compile_row_max().ptx
    found = find_instructions(ptx)
    assert found["mbarrier.init"].count == 2 * 4 and found["cp.async.bulk.tensor"].count == 1
    assert "max.f32" in ptx and "mbarrier.arrive.shared" in ptx


@pytest.mark.parametrize(
    ("warps", "expected"),
    [(1, (8, 32, 1, 32, 2)), (2, (8, 32, 1, 64, 1)), (4, (8, 32, 2, 64, 1)), (8, (8, 32, 4, 64, 1))],
)
def test_rowsum_mapping_covers_every_chunk_of_every_row_once(warps, expected):
    pipeline = PipelinePlan(LoadPlan(SEED), stages=4, consumer_warps=warps)
    mapping = pipeline.rowsum_mapping
    assert tuple(vars(mapping).values()) == expected
    steps = range(mapping.chunks // mapping.threads_per_row)
    reads = []
    for thread in range(32 * warps):
        for slot in range(mapping.row_slots):
            row, part = mapping.row_and_part(thread, slot)
            if row < 64:
                reads += [(row, mapping.chunk(row, part, step)) for step in steps]
    assert sorted(reads) == [(row, chunk) for row in range(64) for chunk in range(32)]
    # The 8 lanes of each 16-byte access phase, at each step, hit 8 different bank groups.
    for step in steps:
        for phase in range(0, 32, 8):
            groups = set()
            for thread in range(phase, phase + 8):
                row, part = mapping.row_and_part(thread, 0)
                groups.add((row * 512 // 16 + mapping.chunk(row, part, step)) % 8)
            assert len(groups) == 8


def test_rowsum_reads_shared_memory_in_16_byte_vectors():
    pipeline = PipelinePlan(LoadPlan(SEED), stages=4, consumer_warps=4)
    ptx = compile_pipelined_load(pipeline, "rowsum", keep_ptx=True).ptx
    # 2 threads per 64-row tile row: 16 chunks of 8 fp16 each, fully unrolled.
    assert ptx.count("ld.shared.v4") == 16
    assert "red.relaxed.gpu.global.add.f32" in ptx


def test_copy_keeps_two_stores_in_flight_and_waits_for_every_read_before_exit():
    pipeline = PipelinePlan(LoadPlan(SEED), stages=4, persistent=True)
    ptx = compile_copy(CopyPlan(pipeline), keep_ptx=True).ptx
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx  # the TMA store
    waits = [" ".join(w.split()) for w in re.findall(r"cp\.async\.bulk\.wait_group[^;]*", ptx)]
    assert "cp.async.bulk.wait_group.read 1" in waits  # all but the newest store have read their stage
    assert "cp.async.bulk.wait_group.read 0" in waits  # every stage read before the block exits


@pytest.mark.parametrize(("depth", "stages", "wait"), [(4, 6, 3), (8, 4, 3), (1, 4, 0)])
def test_copy_store_depth_sets_the_read_wait_and_is_capped_by_the_stages(depth, stages, wait):
    copy = CopyPlan(PipelinePlan(LoadPlan(SEED), stages=stages, persistent=True), store_depth=depth)
    assert copy.stores_in_flight == min(depth, stages)
    ptx = compile_copy(copy, keep_ptx=True).ptx
    waits = {" ".join(w.split()) for w in re.findall(r"cp\.async\.bulk\.wait_group[^;]*", ptx)}
    assert waits == {f"cp.async.bulk.wait_group.read {wait}", "cp.async.bulk.wait_group.read 0"}
    with pytest.raises(TmaConfigError, match="store depth is 0"):
        CopyPlan(PipelinePlan(LoadPlan(SEED)), store_depth=0)


def test_bulk_copy_moves_runs_by_address_without_tensor_maps():
    """`CopyPlan.bulk`: each tile one contiguous run, loaded and stored with non-tensor bulk
    copies whose byte count is the run's own (the last tile's rows left over: 3 x 512 bytes)."""
    load = LoadPlan(LoadConfig((4099, 256), "fp16", (16, 256)))
    copy = CopyPlan(PipelinePlan(load, stages=8, persistent=True), store_depth=4, bulk=True)
    assert copy.bulk_tile_bytes == (8192, 1536)
    assert "runs of 8192 bytes (the last 1536)" in copy.summary()
    ptx = compile_copy(copy, keep_ptx=True).ptx
    lines = [line.strip() for line in ptx.splitlines()]
    assert "cp.async.bulk.tensor" not in ptx and "tensormap" not in ptx
    loads = [line for line in lines if line.startswith("cp.async.bulk.shared::cluster.global.mbarrier")]
    store = "cp.async.bulk.global.shared::cta.bulk_group"
    stores = [i for i, line in enumerate(lines) if line.startswith(store)]
    assert len(loads) == 1 and len(stores) == 1
    # The barrier expects exactly the bytes the load moves: one register holds both counts.
    declared = next(line for line in lines if line.startswith("mbarrier.arrive.expect_tx"))
    assert declared.rstrip(";").split(", ")[-1] == loads[0].split(", ")[2]
    assert re.search(r"\b1536\b", ptx) and re.search(r"\b8192\b", ptx)  # the last tile's bytes, a tile's
    assert lines[stores[0] + 1] == "cp.async.bulk.commit_group;"
    assert lines[stores[0] + 2].startswith("cp.async.bulk.wait_group.read \t3")
    assert any(line.startswith("elect.sync") for line in lines[stores[0] - 30 : stores[0]])


def test_bulk_copy_plans_only_contiguous_runs():
    compact = LoadConfig((1024, 256), "fp16", (16, 256))
    CopyPlan(PipelinePlan(LoadPlan(compact)), bulk=True)  # whole rows of a compact matrix: fine
    for config, extra, why in [
        (LoadConfig((1024, 256), "fp16", (16, 128)), {}, "whole rows"),
        (LoadConfig((1024, 256), "fp16", (16, 256), 0, "row", (264, 1)), {}, "compact row-major"),
        (LoadConfig((1024, 64), "fp16", (16, 64), 128), {}, "swizzle"),
        (LoadConfig((4, 1024, 256), "fp16", (16, 256)), {}, "rank-3"),
        (compact, {"prefetch_tiles": 2}, "prefetching"),
    ]:
        with pytest.raises(TmaConfigError, match=why):
            CopyPlan(PipelinePlan(LoadPlan(config), **extra), bulk=True)


def test_row_sums_of_narrow_column_major_tiles_compile():
    """A column-major tile 1 or 4 wide sums rows with scalar reads: no 16-byte chunk view of it."""
    for width in (1, 4):
        config = LoadConfig((64, 64), "fp16", (64, width), major="col")
        ptx = compile_pipelined_load(PipelinePlan(LoadPlan(config), stages=2), "rowsum", keep_ptx=True).ptx
        assert "red.relaxed.gpu.global.add.f32" in ptx and "ld.shared.v4" not in ptx
