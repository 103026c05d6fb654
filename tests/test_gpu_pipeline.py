"""The ring on the device: every stage count, both consumers, 1/2/4 consumer warps, persistent,
the hang guard and the race variants. Verification runs guarded, so a deadlock fails a test
instead of stopping the suite."""

import subprocess
import sys
from pathlib import Path

import pytest

from tmakit import SEED, LoadConfig, LoadPlan
from tmakit.config import padded_strides
from tmakit.plan import PipelinePlan

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("stages", range(1, 8))
@pytest.mark.parametrize("consumer", ["store", "rowsum"])
def test_every_stage_count_of_the_seed(stages, consumer):
    from tmakit.load.check import verify_pipelined_load

    verdict = verify_pipelined_load(PipelinePlan(LoadPlan(SEED), stages=stages), consumer, hang_guard=True)
    assert str(verdict).startswith(("924/924 tiles correct", "ok")), str(verdict)


@pytest.mark.parametrize("warps", [1, 2, 4])
@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("consumer", ["store", "rowsum"])
def test_consumer_warps_and_persistent_grid(warps, persistent, consumer):
    from tmakit.load.check import verify_pipelined_load

    config = LoadConfig((2, 1000, 777), "bf16", (64, 64), 128, strides=padded_strides((2, 1000, 777), 2))
    pipeline = PipelinePlan(
        LoadPlan(config), stages=3, consumer_warps=warps, persistent=persistent, sm_count=13
    )
    verdict = verify_pipelined_load(pipeline, consumer, hang_guard=True)
    assert str(verdict).startswith(("416/416 tiles correct", "ok")), str(verdict)


@pytest.mark.parametrize(
    "config",
    [
        LoadConfig((777, 1000), "fp16", (16, 128), 32, "col", padded_strides((777, 1000), 2, "col")),
        LoadConfig((509, 1024), "fp8e4m3", (32, 128), 128),
        LoadConfig((300, 520), "fp32", (16, 32), 128),
    ],
    ids=str,
)
def test_layouts_dtypes_swizzles(config):
    from tmakit.load.check import verify_pipelined_load

    verdict = verify_pipelined_load(
        PipelinePlan(LoadPlan(config), stages=4, consumer_warps=2), hang_guard=True
    )
    assert verdict.ok, str(verdict)


FAULTY = """
import sys
sys.path.insert(0, {tests!r})
from faulty_rings import compile_faulty_load, {ring}
from tmakit import SEED, LoadPlan
from tmakit.plan import PipelinePlan
from tmakit.load.check import verify_pipelined_load
pipeline = PipelinePlan(LoadPlan(SEED), {plan})
faulty = compile_faulty_load(pipeline, {ring})
print(verify_pipelined_load(pipeline, "store", hang_guard=True, compiled=faulty))
"""


def run_faulty(ring: str, plan: str) -> subprocess.CompletedProcess:
    """The guarded store-back of `PipelinePlan(LoadPlan(SEED), <plan>)` on a faulty ring
    (`faulty_rings.<ring>`), in a subprocess with a time limit: if the guard failed, the test fails
    instead of hanging, and a block that exits with a load still landing faults that process's
    CUDA context, not this one's."""
    script = FAULTY.format(tests=str(Path(__file__).parent), ring=ring, plan=plan)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_hang_guard_names_the_wait_that_never_completes():
    result = run_faulty("OverdeclaringRing", "stages=3")  # 16 bytes more than TMA delivers
    assert "TmaHangError: barrier wait timed out in block" in result.stderr, result.stderr[-2000:]
    assert "consumer waiting for a full stage" in result.stderr
    assert "declares 32784 bytes per tile" in result.stderr


@pytest.mark.parametrize(
    "persistent, ring",
    [(False, "FrozenParityRing"), (True, "UnderdeclaringRing")],
    ids=["frozen-parity", "too-few-bytes"],
)
def test_race_variants_are_caught(persistent, ring):
    """A frozen parity returns at once on stale data (one stage makes it race the very next load):
    the verification must catch it. Too few bytes: on the H200 a 16-byte undercount
    of a 32 KiB tile never completed a phase - TMA's completions stepped the tx count past zero
    without landing on it - so the hang guard caught it; were the bytes to land on zero first, the
    phase would complete early and the verification must catch the race instead. The rings are
    tests/faulty_rings.py's."""
    result = run_faulty(ring, f"stages=1, persistent={persistent}, sm_count=4")
    caught_by_verification = "tiles correct" in result.stdout and "924/924" not in result.stdout
    faulted = "CUDA error" in result.stderr
    caught_by_guard = "TmaHangError: barrier wait timed out in block" in result.stderr
    assert caught_by_verification or caught_by_guard or faulted, result.stdout + result.stderr[-1500:]


@pytest.mark.parametrize("stages, prefetch", [(1, 2), (1, 6), (3, 4)])
def test_prefetching_changes_no_data(stages, prefetch):
    """Prefetch into L2 only warms the cache: every element still verifies."""
    from tmakit.load.check import verify_pipelined_load

    pipeline = PipelinePlan(LoadPlan(SEED), stages=stages, prefetch_tiles=prefetch, prefetch_descriptor=True)
    verdict = verify_pipelined_load(pipeline, "store", hang_guard=True)
    assert verdict.ok, str(verdict)


def test_row_sums_of_narrow_column_major_tiles():
    """Column-major tiles 1 and 4 wide (fp16: 2 and 8 bytes per row) sum their rows with scalar
    reads; the 16-byte chunk view of row-major tiles is not built for them."""
    from tmakit.load.check import verify_pipelined_load

    for width in (1, 4, 8):
        config = LoadConfig((64, 64), "fp16", (64, width), major="col")
        verdict = verify_pipelined_load(PipelinePlan(LoadPlan(config), stages=2), "rowsum", hang_guard=True)
        assert str(verdict).startswith("ok"), (width, str(verdict))
