"""The seed kernel compiled for sm_90a on this machine (no GPU), and its PTX read back."""

import pytest

from tmakit import SEED, LoadConfig, LoadPlan
from tmakit.load.launch import compile_tile_load
from tmakit.ptx import TMA_INSTRUCTIONS, expect_tx_byte_counts, find_instructions

CONFIGS = [
    SEED,
    LoadConfig((1024, 1024), "fp16", (32, 128)),
    LoadConfig((1000, 776), "bf16", (128, 64)),
    LoadConfig((512, 512), "fp32", (16, 64)),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.dtype}-{c.tile[0]}x{c.tile[1]}")
def test_ptx_has_the_seed_schedule_and_the_plans_byte_count(config):
    plan = LoadPlan(config)
    ptx = compile_tile_load(plan, keep_ptx=True).ptx
    assert ".target sm_90a" in ptx
    found = find_instructions(ptx)
    assert set(found) == set(TMA_INSTRUCTIONS)
    # One TMA instruction per tile: the tile is one legal box, never split.
    assert found["cp.async.bulk.tensor"].count == 1
    assert found["cp.async.bulk.tensor"].opcode.startswith(
        "cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes"
    )
    assert found["mbarrier.init"].count == 1
    assert expect_tx_byte_counts(ptx) == [plan.expected_tx_bytes]


def test_load_only_kernel_has_no_global_stores():
    ptx = compile_tile_load(LoadPlan(SEED), consumer="none", keep_ptx=True).ptx
    assert "st.global" not in ptx
    assert "cp.async.bulk.tensor" in ptx


def test_expect_tx_parser_follows_registers_and_immediates():
    ptx = """
        mov.b32 	%r13, 4096;
        mbarrier.arrive.expect_tx.shared.b64 %rd4, [%r15], %r13;
        mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%r15], 128;
    """
    assert expect_tx_byte_counts(ptx) == [4096, 128]
