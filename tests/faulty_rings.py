"""Faults injected into the ring by the tests, never by tmakit: `TileRing` subclasses whose
producer declares more or fewer bytes than TMA delivers, or whose consumers wait on parity 0 every
trip (a phase flip missed), and the kernels built on them (a kernel's `ring_class` names the ring
it builds), compiled with the same example arguments as tmakit's own."""

from __future__ import annotations

import cutlass.cute as cute

from tmakit.kernels.copy import CopyKernel
from tmakit.kernels.tile_ring import TileRing
from tmakit.load.kernel import PipelinedLoadKernel
from tmakit.load.launch import pipelined_load_arguments
from tmakit.plan import CopyPlan, PipelinePlan
from tmakit.plan.ring import CONSUMER
from tmakit.runtime.compile import CompiledKernel, compile_kernel
from tmakit.runtime.launch import copy_arguments


class OverdeclaringRing(TileRing):
    """The producer declares `extra_bytes` more per tile than TMA delivers: the full barrier never
    completes, so the consumers' wait hangs."""

    extra_bytes = 16

    @property
    def declared_bytes(self) -> int:
        return super().declared_bytes + self.extra_bytes


class UnderdeclaringRing(OverdeclaringRing):
    """16 bytes fewer than TMA delivers: the phase may complete before the tile has landed (a race
    the verification must catch), or, as seen on the H200, the count steps past zero and never
    completes (a hang the guard must catch)."""

    extra_bytes = -16


class FrozenParityRing(TileRing):
    """The consumers wait on parity 0 every trip: from the second trip on, a stage's wait returns at
    once, on the data of the trip before."""

    @cute.jit
    def wait_full(self, full, step, failed, guard=None, block=0):
        stage, _ = self.pipeline.stage_and_parity(step)
        failed = self.wait(full + stage, 0, failed, guard, (block, stage, step, CONSUMER))
        return stage, failed


def with_ring(kernel_class: type, ring_class: type[TileRing]) -> type:
    """`kernel_class` building `ring_class` instead of tmakit's ring."""
    return type(
        f"{kernel_class.__name__}On{ring_class.__name__}", (kernel_class,), {"ring_class": ring_class}
    )


def compile_faulty_load(
    pipeline: PipelinePlan,
    ring_class: type[TileRing],
    consumer: str = "store",
    hang_guard: bool = True,
    keep_ptx: bool = False,
) -> CompiledKernel:
    """`compile_pipelined_load(pipeline, consumer, hang_guard)` with the ring `ring_class`."""
    kernel = with_ring(PipelinedLoadKernel, ring_class)(pipeline, consumer, hang_guard=hang_guard)
    return compile_kernel(kernel, *pipelined_load_arguments(pipeline, consumer, False), keep_ptx=keep_ptx)


def compile_faulty_copy(
    copy: CopyPlan, ring_class: type[TileRing], hang_guard: bool = True, keep_ptx: bool = False
) -> CompiledKernel:
    """`compile_copy(copy, hang_guard)` (a TMA copy, not a bulk one) with the ring `ring_class`."""
    kernel = with_ring(CopyKernel, ring_class)(copy, hang_guard=hang_guard)
    return compile_kernel(kernel, *copy_arguments(copy, None, None, False, False), keep_ptx=keep_ptx)
