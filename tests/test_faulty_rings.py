"""The faults the GPU tests inject (tests/faulty_rings.py: rings of the tests' own, never knobs of
tmakit's) compile for sm_90a on a CPU, and each kernel differs from tmakit's exactly where its
fault is: the byte count the producer declares, or the parity the consumers wait on."""

import re

import pytest

from faulty_rings import (
    FrozenParityRing,
    OverdeclaringRing,
    UnderdeclaringRing,
    compile_faulty_copy,
    compile_faulty_load,
)
from tmakit import SEED, LoadPlan
from tmakit.load.launch import compile_pipelined_load
from tmakit.plan import CopyPlan, PipelinePlan
from tmakit.ptx import expect_tx_byte_counts
from tmakit.runtime.launch import compile_copy

# The plans test_gpu_pipeline runs the faulty rings on.
HANG = PipelinePlan(LoadPlan(SEED), stages=3)
RACES = {
    FrozenParityRing: PipelinePlan(LoadPlan(SEED), stages=1, persistent=False, sm_count=4),
    UnderdeclaringRing: PipelinePlan(LoadPlan(SEED), stages=1, persistent=True, sm_count=4),
}


def kernel_lines(ptx: str) -> list[str]:
    """The PTX's lines with the kernel's symbol (it names the kernel class) and comments left out."""
    text = re.sub(r"//.*$", "", ptx, flags=re.MULTILINE)
    return [re.sub(r"\bkernel_cutlass_\w+", "KERNEL", line) for line in text.splitlines() if line.strip()]


def wait_parities(ptx: str) -> list[str]:
    """The parity operand of each mbarrier wait, in program order (a register, or a constant)."""
    return re.findall(r"mbarrier\.(?:try|test)_wait\.parity\S*\s+\S+,\s*\[[^\]]+\],\s*([^,;\s]+)", ptx)


@pytest.mark.parametrize("ring_class, extra", [(OverdeclaringRing, 16), (UnderdeclaringRing, -16)])
@pytest.mark.parametrize("kernel", ["pipelined load", "copy"])
def test_a_misdeclaring_ring_changes_only_the_declared_bytes(kernel, ring_class, extra):
    """The producer's expect_tx and the guard's record of what it declared carry the wrong count;
    every other line of the kernel is tmakit's."""
    if kernel == "copy":
        plain = compile_copy(CopyPlan(HANG), hang_guard=True, keep_ptx=True).ptx
        faulty = compile_faulty_copy(CopyPlan(HANG), ring_class, keep_ptx=True).ptx
    else:
        plain = compile_pipelined_load(HANG, "store", hang_guard=True, keep_ptx=True).ptx
        faulty = compile_faulty_load(HANG, ring_class, keep_ptx=True).ptx
    tile = HANG.load.expected_tx_bytes
    assert expect_tx_byte_counts(plain) == [tile]
    assert expect_tx_byte_counts(faulty) == [tile + extra]
    plain_lines, faulty_lines = kernel_lines(plain), kernel_lines(faulty)
    assert len(plain_lines) == len(faulty_lines)
    changed = [(a, b) for a, b in zip(plain_lines, faulty_lines, strict=True) if a != b]
    assert changed and all(a.replace(str(tile), str(tile + extra)) == b for a, b in changed)


@pytest.mark.parametrize("hang_guard", [True, False])
def test_a_frozen_parity_ring_waits_on_parity_zero(hang_guard):
    """The producer's wait keeps its computed parity; the consumers' becomes the constant 0."""
    plain = compile_pipelined_load(HANG, "store", hang_guard=hang_guard, keep_ptx=True).ptx
    faulty = compile_faulty_load(HANG, FrozenParityRing, hang_guard=hang_guard, keep_ptx=True).ptx
    producer, consumer = wait_parities(plain)
    assert producer.startswith("%r") and consumer.startswith("%r")
    producer, consumer = wait_parities(faulty)
    assert producer.startswith("%r") and consumer == "0"
    assert expect_tx_byte_counts(faulty) == [HANG.load.expected_tx_bytes]


@pytest.mark.parametrize("ring_class", [OverdeclaringRing, *RACES], ids=lambda ring: ring.__name__)
def test_the_gpu_tests_faulty_kernels_compile(ring_class):
    """What test_gpu_pipeline launches, compiled here: the same plans, guarded."""
    pipeline = RACES.get(ring_class, HANG)
    ptx = compile_faulty_load(pipeline, ring_class, keep_ptx=True).ptx
    assert "mbarrier.test_wait" in ptx  # the hang guard's bounded polls
