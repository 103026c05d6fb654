"""The im2col kernel compiled once per plan, and its launcher."""

from __future__ import annotations

import functools

from ..linter.kernels import LintVariant
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


# The variants `tmakit lint --kernel` compiles (`tmakit.linter.kernels`): a small plan of each kernel.
LINT_VARIANTS = {
    "im2col": LintVariant(
        "im2col loads: ResNet's 3x3 convolution of fp16 (2, 56, 56, 64), padding 1",
        lambda: compile_im2col.__wrapped__(Im2colPlan((2, 56, 56, 64), "fp16", 3, padding=1)),
    ),
    "im2col-strided": LintVariant(
        "im2col loads: a 3x5 bf16 window, strides (2, 1), dilation (1, 2)",
        lambda: compile_im2col.__wrapped__(Im2colPlan((1, 13, 21, 16), "bf16", (3, 5), (2, 1), (1, 2))),
    ),
}
