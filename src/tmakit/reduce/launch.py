"""The reduce kernels compiled once per plan (reduce stores, or the load-add-store ring) and their
launchers: the copy's arguments and launch path (`runtime.launch`) around the reduce's kernel."""

from __future__ import annotations

import functools

from ..config import LoadConfig
from ..linter.kernels import LintVariant
from ..plan import CopyOptions, CopyPlan, LoadPlan, PipelinePlan
from ..plan.copy_defaults import copy_tile
from ..runtime.compile import compiles
from ..runtime.launch import Launcher, copy_arguments, pair_launcher
from .plan import ReducePlan, reduce_class


@compiles
def compile_reduce(
    reduce: ReducePlan,
    tvm_ffi: bool = False,
    destination: LoadConfig | None = None,
    shape_generic: bool = False,
) -> tuple:
    """A reduce for sm_90a: `kernel.ReduceKernel` (the copy with TMA reduce stores) or, with
    `ReducePlan.kernel` "ring", `kernel.LoadReduceKernel` (the load-add-store ring), compiled
    against the copy's arguments (`runtime.launch.compile_copy`'s `tvm_ffi`, `destination` and
    `shape_generic`; the debug hang guard is the copy's and the loads', which `tmakit verify`
    runs); its (op, dtype) pair was checked when the plan was made."""
    if not shape_generic:
        reduce.load.check_specialised()
    from .kernel import LoadReduceKernel, ReduceKernel

    kind = LoadReduceKernel if reduce.by_ring else ReduceKernel
    kernel = kind(reduce, False, shape_generic)
    return kernel, *copy_arguments(reduce.copy, destination, None, shape_generic, tvm_ffi)


def reduce_launcher(
    reduce: ReducePlan, destination: LoadConfig | None, device: str, shape_generic: bool = False
) -> Launcher:
    """The `Launcher` (dst, src) of one reduce on one device, compiled once, as a copy's
    (`runtime.launch.pair_launcher`)."""
    return pair_launcher(
        functools.partial(compile_reduce, reduce, destination=destination), device, shape_generic
    )


@functools.lru_cache(maxsize=1024)
def class_launcher(reduce: ReducePlan, destination: LoadConfig | None, device: str) -> Launcher:
    """The launcher of a shape-generic reduce class on one device, compiled or loaded from the
    disk cache once."""
    return reduce_launcher(reduce, destination, device, shape_generic=True)


# The variants `tmakit lint --kernel` compiles (`tmakit.linter.kernels`): a small plan of each kernel.
def _lint_class(op: str, dtype: str, kernel: str = "store") -> LintVariant:
    what = "the load-add-store ring" if kernel == "ring" else "TMA reduce stores"
    return LintVariant(
        f"a shape-generic {op} of {dtype} by {what}",
        lambda: compile_reduce.__wrapped__(
            reduce_class(
                CopyOptions(), op, dtype, 2, "row", False, copy_tile(dtype), 132, False, kernel=kernel
            ),
            shape_generic=True,
        ),
    )


LINT_VARIANTS = {
    "reduce": LintVariant(
        "an fp16 add by TMA reduce stores, (1000, 776) in 16x256 tiles, a persistent 4-stage ring",
        lambda: compile_reduce.__wrapped__(
            ReducePlan(
                CopyPlan(
                    PipelinePlan(
                        LoadPlan(LoadConfig((1000, 776), "fp16", (16, 256))), stages=4, persistent=True
                    )
                ),
                "add",
            )
        ),
    ),
    "reduce-max": _lint_class("max", "uint32"),
    "reduce-and": _lint_class("and", "int64"),
    "reduce-ring": _lint_class("add", "bf16", "ring"),
}
