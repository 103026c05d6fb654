"""The grouped copy compiled once per plan, and its launcher."""

from __future__ import annotations

import functools

from ..linter.kernels import LintVariant
from ..plan.ring import GUARD_WORDS
from ..runtime.compile import compiles, fake_tensor, placeholder_stream
from ..runtime.launch import Launcher, guarded_launcher
from ..validate import one_of
from .plan import TABLE_WORDS, ManyPlan


@compiles
def compile_many(many: ManyPlan, relative: str | None = None, tvm_ffi: bool = False) -> tuple:
    """The grouped copy (`kernels.many.ManyKernel`) for sm_90a, one compile per plan and
    `relative` side: called with the chunk table's two int64 tensors (`ManyPlan.chunk_table`:
    the (count, 4) chunks and the steps' first chunks), with `relative`, the uint8 buffer that
    side's offsets point into, then the guard words and a stream (none with `tvm_ffi`)."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from .kernel import RELATIVE_SIDES, ManyKernel

    one_of(relative, "grouped copy relative side", RELATIVE_SIDES)
    shape = (cute.sym_int64(symbol="chunks"), TABLE_WORDS)
    chunks = make_fake_compact_tensor(cutlass.Int64, shape, stride_order=(1, 0), assumed_align=8)
    starts = make_fake_compact_tensor(cutlass.Int64, (cute.sym_int64(symbol="starts"),), assumed_align=8)
    guard = fake_tensor(cutlass.Int32, (GUARD_WORDS,))
    kernel = ManyKernel(many, relative)
    if relative is None:
        return kernel, chunks, starts, guard, placeholder_stream(env=tvm_ffi)
    buffer = make_fake_compact_tensor(cutlass.Uint8, (cute.sym_int64(symbol="buffer"),), assumed_align=16)
    return kernel.in_buffer, chunks, starts, buffer, guard, placeholder_stream(env=tvm_ffi)


@functools.lru_cache(maxsize=64)  # three variants a device
def many_launcher(many: ManyPlan, device: str, relative: str | None = None) -> Launcher:
    """A callable (chunks, starts[, buffer]) for the grouped copy on one device (`guarded_launcher`)."""
    return guarded_launcher(lambda tvm_ffi: compile_many(many, relative, tvm_ffi=tvm_ffi), device)


# The variants `tmakit lint --kernel` compiles (`tmakit.linter.kernels`): a small plan of each kernel.
LINT_VARIANTS = {
    "many": LintVariant(
        "the grouped copy: a chunk table's bulk copies in and out (run-time bytes)",
        lambda: compile_many.__wrapped__(ManyPlan()),
    ),
    "many-relative": LintVariant(
        "the grouped copy with offsets relative to a packed source buffer",
        lambda: compile_many.__wrapped__(ManyPlan(), "source"),
    ),
}
