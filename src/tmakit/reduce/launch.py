"""The reduce kernels compiled once per plan (reduce stores, or the load-add-store ring) and their
launchers: the copy's arguments and launch path (`runtime.launch`) around the reduce's kernel."""

from __future__ import annotations

import functools
from dataclasses import replace

from ..config import LoadConfig
from ..runtime.compile import compiles
from ..runtime.launch import Launcher, copy_arguments, guarded_launcher, tvm_ffi_available
from .plan import ReducePlan


@compiles
def compile_reduce(
    reduce: ReducePlan,
    hang_guard: bool = False,
    tvm_ffi: bool = False,
    destination: LoadConfig | None = None,
    shape_generic: bool = False,
) -> tuple:
    """A reduce for sm_90a: `kernel.ReduceKernel` (the copy with TMA reduce stores) or, with
    `ReducePlan.kernel` "ring", `kernel.LoadReduceKernel` (the load-add-store ring), compiled
    against the copy's arguments (`runtime.launch.compile_copy`'s `hang_guard`, `tvm_ffi`,
    `destination` and `shape_generic`); its (op, dtype) pair was checked when the plan was made."""
    if not shape_generic:
        reduce.load.check_specialised()
    from .kernel import LoadReduceKernel, ReduceKernel

    kind = LoadReduceKernel if reduce.by_ring else ReduceKernel
    kernel = kind(reduce, False, shape_generic, hang_guard=hang_guard)
    return kernel, *copy_arguments(reduce.copy, destination, None, shape_generic, tvm_ffi)


def reduce_launcher(
    reduce: ReducePlan, destination: LoadConfig | None, device: str, shape_generic: bool = False
) -> Launcher:
    """The `Launcher` (dst, src) of one reduce on one device, compiled once, as
    `runtime.launch.copy_launcher` makes a copy's (TVM-FFI where installed; `shape_generic`: one
    kernel for every shape of the plan's class, each new shape checked by the caller)."""
    if shape_generic and not tvm_ffi_available():
        raise ValueError("shape-generic copies launch through TVM-FFI: install apache-tvm-ffi")
    launcher = guarded_launcher(
        lambda tvm_ffi: compile_reduce(
            reduce, tvm_ffi=tvm_ffi, destination=destination, shape_generic=shape_generic and tvm_ffi
        ),
        device,
        dst_first=True,
    )
    return replace(launcher, shape_generic=shape_generic)


@functools.lru_cache(maxsize=1024)
def class_launcher(reduce: ReducePlan, destination: LoadConfig | None, device: str) -> Launcher:
    """The launcher of a shape-generic reduce class on one device, compiled or loaded from the
    disk cache once."""
    return reduce_launcher(reduce, destination, device, shape_generic=True)
