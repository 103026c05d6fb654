"""The im2col kernel compiled once per plan, and its launcher."""

from __future__ import annotations

import functools

from ..plan.ring import GUARD_WORDS
from ..runtime.compile import compiles, fake_tensor, placeholder_stream
from ..runtime.launch import Launcher, guarded_launcher
from .plan import Im2colPlan


@compiles
def compile_im2col(im2col: Im2colPlan, hang_guard: bool = False, tvm_ffi: bool = False) -> tuple:
    """The im2col kernel (`patches.kernel.Im2colKernel`: the copy with im2col loads) for sm_90a,
    compiled for one plan (shape, dtype, convolution parameters, box, stages); called with the
    (N, H, W, C) activation, the (N*P*Q, R*S*C) patch matrix, the guard words and a stream (none
    with `tvm_ffi`, as in `compile_copy`)."""
    im2col.copy.load.check_specialised()
    import cutlass

    from .kernel import Im2colKernel

    x = fake_tensor(im2col.element, im2col.shape)
    out = fake_tensor(im2col.element, im2col.patch_shape)
    guard = fake_tensor(cutlass.Int32, (GUARD_WORDS,))
    return Im2colKernel(im2col, hang_guard=hang_guard), x, out, guard, placeholder_stream(env=tvm_ffi)


@functools.lru_cache(maxsize=256)
def im2col_launcher(im2col: Im2colPlan, device: str) -> Launcher:
    """A callable (x, out) for one im2col plan on one device (its guard words live there),
    compiled once for the plan's shape, through TVM-FFI where it is installed (`guarded_launcher`)."""
    return guarded_launcher(lambda tvm_ffi: compile_im2col(im2col, tvm_ffi=tvm_ffi), device)
