"""Replaying load schedules: the seed's loop is clean, and each classic mistake is caught for its reason."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tmakit import SEED, LoadConfig, LoadPlan
from tmakit.model import (
    ArriveExpectTx,
    Init,
    TmaCopy,
    Wait,
    multicast_schedule,
    pipeline_schedule,
    replay,
    seed_schedule,
)
from tmakit.model import report as sch

SEED_PLAN = LoadPlan(SEED)
LANDINGS = ["at_wait", "at_issue"]


@pytest.mark.parametrize("bytes_land", LANDINGS)
def test_seed_schedule_is_ok(bytes_land):
    report = replay(seed_schedule(SEED_PLAN, blocks=3), bytes_land=bytes_land)
    assert report.ok, report.describe()
    assert report.stopped_at is None


def test_seed_schedule_uses_the_plans_numbers():
    events = seed_schedule(SEED_PLAN)
    expects = [e for e in events if isinstance(e, ArriveExpectTx)]
    copies = [e for e in events if isinstance(e, TmaCopy)]
    waits = [e for e in events if isinstance(e, Wait)]
    assert len(expects) == len(copies) == len(waits) == SEED_PLAN.tiles_per_block == 7
    assert {e.nbytes for e in expects} == {c.nbytes for c in copies} == {SEED_PLAN.expected_tx_bytes}
    assert [w.parity for w in waits] == [SEED_PLAN.phase_parity(j) for j in range(7)]
    assert events[0] == Init("mbar", 1, cta=0)


def test_describe_walks_the_first_block_tile_by_tile():
    text = replay(seed_schedule(SEED_PLAN, blocks=2)).describe()
    assert "CTA 1" not in text  # the first block only, unless asked
    assert "tile 0: arrive + expect 32768 B, copy 32768 B -> stage 0, wait parity 0 -> complete" in text
    assert "tile 1: arrive + expect 32768 B, copy 32768 B -> stage 0, wait parity 1 -> complete" in text
    assert "tile 6:" in text and "tile 7:" not in text
    assert text.endswith("no races found")


@pytest.mark.parametrize("bytes_land", LANDINGS)
def test_expecting_too_many_bytes_hangs(bytes_land):
    report = replay(seed_schedule(SEED_PLAN, expected_tx_bytes=65536), bytes_land=bytes_land)
    assert report.kinds() == {sch.EXPECTED_MORE_THAN_DELIVERED}
    (finding,) = report.findings
    assert finding.hang and "32768 B more than its copies delivered" in finding.message
    assert report.stopped_at == 3  # tile 0's wait
    assert "never completes" in report.describe()


@pytest.mark.parametrize("bytes_land", LANDINGS)
def test_delivering_too_few_bytes_hangs(bytes_land):
    report = replay(seed_schedule(SEED_PLAN, delivered_bytes=16384), bytes_land=bytes_land)
    assert report.kinds() == {sch.EXPECTED_MORE_THAN_DELIVERED}


@pytest.mark.parametrize("bytes_land", LANDINGS)
def test_expecting_too_few_bytes_completes_early(bytes_land):
    report = replay(seed_schedule(SEED_PLAN, expected_tx_bytes=16384), bytes_land=bytes_land)
    first = report.findings[0]
    assert first.kind == sch.EARLY_COMPLETION and not first.hang and first.event_index <= 3
    assert "16384" in first.message and "fewer bytes expected than delivered" in first.message
    assert sch.CONSUME_BEFORE_LANDED in report.kinds()  # tile 0 is read while half of it is in flight


@pytest.mark.parametrize("bytes_land", LANDINGS)
def test_missing_arrival_hangs(bytes_land):
    report = replay(seed_schedule(SEED_PLAN, skip_arrival=True), bytes_land=bytes_land)
    assert report.kinds() == {sch.MISSING_ARRIVAL}
    assert "1 of 1 arrival" in report.findings[0].message


def test_two_expected_arrivals_but_one_hangs():
    events = [Init("bar", 2), ArriveExpectTx("bar", 64), TmaCopy("bar", 64, stage=0), Wait("bar", 0)]
    report = replay(events)
    assert report.kinds() == {sch.MISSING_ARRIVAL}
    assert "1 of 2 arrival" in report.findings[0].message


def test_same_parity_every_time_returns_before_the_data_lands():
    report = replay(seed_schedule(SEED_PLAN, parity_mistake=True))
    parity_findings = [f for f in report.findings if f.kind == sch.WRONG_PARITY]
    assert len(parity_findings) == 3  # tiles 1, 3 and 5 wait on the phase they already saw
    assert "still in flight" in parity_findings[0].message
    assert report.kinds() == {sch.WRONG_PARITY, sch.CONSUME_BEFORE_LANDED}


def test_same_parity_every_time_hangs_when_bytes_land_first():
    report = replay(seed_schedule(SEED_PLAN, parity_mistake=True), bytes_land="at_issue")
    (finding,) = report.findings
    assert finding.kind == sch.WRONG_PARITY and finding.hang


@pytest.mark.parametrize("bytes_land", LANDINGS)
@pytest.mark.parametrize(("tiles", "stages"), [(1, 1), (7, 1), (8, 2), (12, 4), (3, 5)])
def test_pipeline_ring_is_ok(tiles, stages, bytes_land):
    report = replay(pipeline_schedule(tiles, stages, 16384), bytes_land=bytes_land)
    assert report.ok, report.describe()


def test_pipeline_with_two_consumer_warps_is_ok():
    assert replay(pipeline_schedule(9, 3, 8192, consumer_arrivals=2)).ok


@pytest.mark.parametrize("bytes_land", LANDINGS)
def test_pipeline_overwrites_a_stage_without_the_empty_wait(bytes_land):
    report = replay(pipeline_schedule(8, 3, 16384, skip_empty_wait=True), bytes_land=bytes_land)
    overwrite = next(f for f in report.findings if f.kind == sch.STAGE_OVERWRITE)
    assert "tile 3's copy overwrites stage 0" in overwrite.message and "tile 0" in overwrite.message


@pytest.mark.parametrize("bytes_land", LANDINGS)
def test_bulk_copy_expects_its_last_runs_own_bytes(bytes_land):
    """A bulk copy (`CopyPlan.bulk`) moves exactly each run's bytes: the plan's per-run counts
    replay clean, while declaring the whole tile for the shorter last run - right for a
    tensor-map load, which zero-fills the box - leaves that wait hanging."""
    from tmakit import LoadConfig, LoadPlan
    from tmakit.plan import CopyPlan, PipelinePlan

    copy = CopyPlan(PipelinePlan(LoadPlan(LoadConfig((4099, 256), "fp16", (16, 256))), stages=3), bulk=True)
    tiles = copy.load.total_tile_loads
    tile_bytes, last_bytes = copy.bulk_tile_bytes
    runs = [tile_bytes] * (tiles - 1) + [last_bytes]
    assert replay(pipeline_schedule(tiles, 3, runs), bytes_land=bytes_land).ok
    whole_box = replay(pipeline_schedule(tiles, 3, runs, expected_tx_bytes=tile_bytes), bytes_land=bytes_land)
    (finding,) = whole_box.findings
    assert finding.kind == sch.EXPECTED_MORE_THAN_DELIVERED and finding.hang
    assert f"expected {tile_bytes} B, copies sent {last_bytes} B" in finding.message


def test_pipeline_expecting_too_few_bytes_races():
    report = replay(pipeline_schedule(6, 2, 16384, expected_tx_bytes=8192))
    assert sch.EARLY_COMPLETION in report.kinds()


@pytest.mark.parametrize("bytes_land", LANDINGS)
@pytest.mark.parametrize("cluster_size", [1, 2, 4])
def test_multicast_is_ok_even_when_slices_land_before_the_expect(cluster_size, bytes_land):
    # at_issue with 4 CTAs: CTA 3's barrier sees three slices (negative tx count) before its own
    # arrive + expect: legal, and the phase still completes exactly when the last slice lands
    report = replay(multicast_schedule(4, cluster_size, 16384), bytes_land=bytes_land)
    assert report.ok, report.describe(cta=None)


@pytest.mark.parametrize("bytes_land", LANDINGS)
@pytest.mark.parametrize("expected", [4096, 8192, 32768])
def test_multicast_mismatch_is_found(expected, bytes_land):
    report = replay(multicast_schedule(3, 4, 16384, expected_tx_bytes=expected), bytes_land=bytes_land)
    mismatches = [f for f in report.findings if f.kind == sch.MULTICAST_MISMATCH]
    assert mismatches, report.describe(cta=None)
    assert f"expects {expected} B but the multicast copies into it deliver" in mismatches[0].message


def test_multicast_mismatch_names_only_the_wrong_destination():
    events = [Init("full", 1, cta=0), Init("full", 1, cta=1)]
    events += [ArriveExpectTx("full", 8192, cta=0, tile=0), ArriveExpectTx("full", 4096, cta=1, tile=0)]
    events += [TmaCopy("full", 4096, stage=0, dest_cta=(0, 1), cta=c, tile=0) for c in (0, 1)]
    events += [Wait("full", 0, cta=0), Wait("full", 0, cta=1)]
    mismatches = [f for f in replay(events).findings if f.kind == sch.MULTICAST_MISMATCH]
    assert [f.cta for f in mismatches] == [1]


def test_use_before_init_and_over_arrival_are_barrier_errors():
    assert replay([ArriveExpectTx("bar", 16)]).kinds() == {sch.BARRIER_ERROR}
    events = [Init("bar", 1), ArriveExpectTx("bar", 16), ArriveExpectTx("bar", 16)]
    assert replay(events).kinds() == {sch.BARRIER_ERROR}


@settings(max_examples=60, deadline=None, database=None)
@given(
    rows=st.integers(1, 600),
    cols=st.integers(1, 2000),
    tile_rows=st.sampled_from([1, 8, 64, 128]),
    tile_cols=st.sampled_from([8, 64, 256]),
    dtype=st.sampled_from(["fp16", "fp32", "fp8e4m3"]),
)
def test_seed_schedule_is_ok_for_any_plan(rows, cols, tile_rows, tile_cols, dtype):
    element_bytes = {"fp16": 2, "fp32": 4, "fp8e4m3": 1}[dtype]
    cols = -(-cols * element_bytes // 16) * 16 // element_bytes  # a legal row pitch
    if tile_cols * element_bytes % 16:
        tile_cols = 16
    if rows == 1:
        tile_rows = 1  # tmakit refuses a tile extent over an extent of 1 (validate.py)
    plan = LoadPlan(LoadConfig(shape=(rows, cols), dtype=dtype, tile=(tile_rows, tile_cols)))
    assert replay(seed_schedule(plan, blocks=2)).ok
    assert not replay(seed_schedule(plan, expected_tx_bytes=plan.expected_tx_bytes + 16)).ok


def test_pure_layer_imports_no_gpu_stack():
    """The model and the planning layer load neither the DSL nor torch."""
    import subprocess
    import sys

    code = (
        "import sys, tmakit.model, tmakit.plan, tmakit.check.reference, tmakit.check.sweep, "
        "tmakit.validate, tmakit.limits, tmakit.config, tmakit.explain; "
        "bad = [m for m in ('cutlass', 'torch') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_replay_is_linear_in_the_tiles():
    """Each wait looks only at its own barrier's copies: 4x the tiles take well under 6x the time
    (best of three runs each, in this process's CPU time, so a machine busy with other processes
    does not decide it; the garbage collector is paused while timing, since its passes over a
    growing heap are not the replay's cost)."""
    import gc
    import time

    from tmakit import LoadConfig, LoadPlan

    def seconds(tiles: int) -> float:
        events = seed_schedule(LoadPlan(LoadConfig((64, 256 * tiles), "fp16", (64, 256))))
        runs = []
        for _ in range(3):
            gc.collect()
            gc.disable()
            try:
                start = time.process_time()
                assert replay(events).ok
                runs.append(time.process_time() - start)
            finally:
                gc.enable()
        return min(runs)

    assert seconds(8192) < 6 * seconds(2048)


def test_ends_keeps_the_first_and_last_and_counts_the_rest():
    assert sch.ends(list(range(10)), None) == (list(range(10)), [], 0)
    assert sch.ends(list(range(10)), 10) == (list(range(10)), [], 0)
    assert sch.ends(list(range(10)), 4) == ([0, 1], [8, 9], 6)
    assert sch.ends(list(range(10)), 1) == ([0], [9], 8)


def test_a_limited_description_shows_the_ends_of_the_trace_and_the_findings():
    plan = LoadPlan(LoadConfig((64, 4096), "fp16", (64, 64)))  # 64 tiles
    report = replay(seed_schedule(plan, tiles=20))
    assert [e.tile for e in report.trace if e.tile is not None][-1] == 19  # the first 20 tiles alone
    text = report.describe(limit=6)
    assert "tile 2: " in text and "tile 3: " not in text and "tile 16: " not in text and "tile 17: " in text
    assert "  ... 14 tiles not shown, between tile 2 and tile 17" in text
    entries, left_out = report.shown(0, 6)
    assert left_out == 14 and {e.tile for e in entries} == {None, 0, 1, 2, 17, 18, 19}
    stale = replay(seed_schedule(plan, tiles=20, parity_mistake=True))
    assert len(stale.findings) > 4 and f"... {len(stale.findings) - 4} findings not shown" in stale.describe(
        limit=4
    )


def test_a_fresh_barriers_first_wait_on_parity_1_names_no_phase():
    text = replay(pipeline_schedule(4, 2, 1024)).describe()
    assert "phase -" not in text and "tile 0: wait parity 1 -> returns at once (fresh barrier)" in text
