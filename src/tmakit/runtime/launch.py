"""The core's kernels compiled once per configuration (`compile.compiles`: the cache key is the
compile function's name and its arguments: the copy ring every ring family runs on), and what a
launch needs beside it: the hang guard's words and the launcher around a compiled kernel
(`Launcher`, `guarded_launcher`). A family's own kernel compiles in its `launch` part
(`tmakit.registry`), with these.

Compiling needs no GPU (the tensors are descriptions only). The kernel modules import the DSL,
which takes seconds; they are imported where a kernel is built, so that `import tmakit` (plans,
checks, the CPU model) stays fast.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..config import LoadConfig
from ..errors import TmaHangError
from ..plan import CopyPlan, copy_destination
from ..plan.ring import GUARD_RECORD, GUARD_WORDS
from .compile import (
    CompiledKernel,
    compiles,
    fake_source,
    fake_tensor,
    placeholder_stream,
    symbolic_tensors,
    to_cute_tensor,
)
from .device import current_stream

if TYPE_CHECKING:
    import torch


@compiles
def compile_copy(
    copy: CopyPlan,
    hang_guard: bool = False,
    tvm_ffi: bool = False,
    destination: LoadConfig | None = None,
    tensor_shape: tuple[int, ...] | None = None,
    shape_generic: bool = False,
) -> tuple:
    """A copy (`kernels.copy`: `BulkCopyKernel` when the plan's `bulk`, else `CopyKernel`) for
    sm_90a. `tvm_ffi` as in `compile_kernel` (the compiled function then takes no stream: it
    launches on torch's current stream, and is kept in the on-disk cache); `destination`: the
    destination's layout (default `plan.copy_destination`); `tensor_shape`: the compiled function
    is called with compact tensors of this shape, whose memory the kernel views as the plan's
    compact matrix (a copy of the tensor's memory as rows).

    `shape_generic`: one compile serves every shape of the plan's class (`plan.copy_class`): the
    plan's shape (and `tensor_shape`'s extents) only stand in, the kernel reads extents and
    strides at each call. The destination has the source's shape and the contiguous dim of
    `destination` (default: the source's)."""
    if not shape_generic:
        copy.load.check_specialised()
    from ..kernels.copy import BulkCopyKernel, CopyKernel

    as_rows = tensor_shape is not None
    kind = BulkCopyKernel if copy.bulk else CopyKernel
    kernel = kind(copy, as_rows, shape_generic, hang_guard=hang_guard)
    return kernel, *copy_arguments(copy, destination, tensor_shape, shape_generic, tvm_ffi)


def copy_arguments(
    copy: CopyPlan,
    destination: LoadConfig | None,
    tensor_shape: tuple[int, ...] | None,
    shape_generic: bool,
    tvm_ffi: bool,
) -> tuple:
    """The example arguments a copy (or a family's kernel on the copy's host function, a
    reduce's) is compiled against, (src, dst, guard, stream); the parameters as `compile_copy`
    takes them."""
    import cutlass

    config = copy.load.config
    as_rows = tensor_shape is not None
    target = destination or copy_destination(copy)
    if shape_generic and as_rows:
        # The kernel reads only the base and the size of a rows view: no stride promise.
        rank = len(tensor_shape)
        src = dst = symbolic_tensors(config.element, (rank - 1,), rank, aligned_strides=False)[0]
    elif shape_generic:
        src, dst = symbolic_tensors(
            config.element, (config.contiguous_index, target.contiguous_index), len(config.shape)
        )
    else:
        src = fake_tensor(config.element, tensor_shape) if as_rows else fake_source(config)
        dst = src if as_rows else fake_source(target)
    guard = fake_tensor(cutlass.Int32, (GUARD_WORDS,))
    return src, dst, guard, placeholder_stream(env=tvm_ffi)


@functools.cache
def max_active_clusters(cluster_size: int) -> int:
    """Clusters of `cluster_size` CTAs that the GPU keeps resident at once when each CTA takes a
    whole SM's shared memory (as a multicast ring's does): the CUDA driver's occupancy answer,
    through the DSL's `HardwareInfo`. Not `sm_count // cluster_size`: a cluster must fit in one
    GPC. Needs the GPU."""
    import torch
    from cutlass.utils import HardwareInfo

    torch.cuda.synchronize()  # makes the device's primary context current: HardwareInfo reads it
    return HardwareInfo().get_max_active_clusters(cluster_size)


# -- the hang guard's words -------------------------------------------------------------------
def new_guard(device: str | torch.device = "cuda") -> torch.Tensor:
    """GUARD_WORDS int32 zeros on `device`: where a guarded kernel records a wait that ran out."""
    import torch

    return torch.zeros(GUARD_WORDS, dtype=torch.int32, device=device)


def raise_if_timed_out(guard: torch.Tensor) -> None:
    """After the kernel: raise TmaHangError naming the wait the hang guard gave up on - the
    consumers' if they timed out (a full barrier that never completes is the root cause; the
    producer then waits for a stage nobody frees), else the producer's."""
    words = [int(v) for v in guard.cpu()]
    records = {"producer waiting for a free stage": words[:GUARD_RECORD],
               "consumer waiting for a full stage": words[GUARD_RECORD:]}  # fmt: skip
    timed_out = [(who, record) for who, record in records.items() if record[0]]
    if timed_out:
        who, (_, block, stage, parity, expected, step, _, _) = timed_out[-1]  # word 0 counts timeouts
        also = " (the producer timed out too)" if len(timed_out) == 2 else ""
        raise TmaHangError(
            f"barrier wait timed out in block {block}, stage {stage}, parity {parity}, step {step} "
            f"({who}){also}; the producer declares {expected} bytes per tile"
        )


# -- the launchers -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Launcher:
    """tmakit's one launcher: `launch`, a callable on the kernel's tensors that launches and
    returns nothing ((dst, src) for a pair family's: a copy, a reduce store), and what the
    dispatcher (`runtime.dispatch.Dispatch`) may do with it:

    - `checks_arguments`: its compiled function raises TypeError/ValueError on a tensor it was
      not built for (dtype, shape, strides, alignment, device) before it launches: it may be
      tried first (TVM-FFI's functions; `guarded_launcher` says which).
    - `shape_generic`: one kernel for every shape of its class: it takes any extents and strides,
      so it is pinned to the shape its last lookup checked.
    - `moves_nothing`: an empty call's; its tensors' addresses do not matter.
    - `any_address`: it takes any base address (torch's op serves the call).
    - `compiled`: the `CompiledKernel` it calls, where one was built through TVM-FFI (compile
      time, from the disk cache or not: what `bench.hostcost` reads).

    Calling the record calls `launch`; the dispatcher's hot path reads `launch` once and calls it
    directly. A wrapper keeps what it wraps claims with `dataclasses.replace(launcher,
    launch=...)`."""

    launch: Callable[..., None]
    checks_arguments: bool = False
    shape_generic: bool = False
    moves_nothing: bool = False
    any_address: bool = False
    compiled: CompiledKernel | None = None

    def __call__(self, *tensors: torch.Tensor) -> None:
        self.launch(*tensors)


def _launch_nothing(*tensors: object) -> None:
    """An empty call: no element to move (as torch's ops on empty tensors)."""


NOTHING = Launcher(_launch_nothing, moves_nothing=True)  # the launcher of an empty call


@functools.cache
def tvm_ffi_available() -> bool:
    """Whether the DSL's TVM-FFI calling path is installed (`apache-tvm-ffi`): torch tensors
    passed directly, the stream taken by the compiled function, shape-generic kernels."""
    return importlib.util.find_spec("tvm_ffi") is not None


def copy_launcher(
    copy: CopyPlan,
    destination: LoadConfig | None,
    tensor_shape: tuple[int, ...] | None,
    device: str,
    shape_generic: bool = False,
) -> Launcher:
    """The `Launcher` (dst, src) of one copy configuration on one device (its hang-guard words
    live there), compiled once (`tensor_shape`: called with compact tensors of this shape, viewed as
    the plan's rows). Through the DSL's TVM-FFI path when `apache-tvm-ffi` is installed (torch
    tensors passed directly, torch's current stream taken by the compiled function itself, the
    compiled function kept on disk); otherwise the plain path. A TVM-FFI launcher's
    `checks_arguments` is True: its compiled function raises on a tensor it was not built for.
    `shape_generic`: one kernel for every shape of the plan's class (`plan.copy_class`,
    `pair_launcher`)."""
    compile_for = functools.partial(compile_copy, copy, destination=destination, tensor_shape=tensor_shape)
    return pair_launcher(compile_for, device, shape_generic)


def pair_launcher(compile_for: Callable[..., CompiledKernel], device: str, shape_generic: bool) -> Launcher:
    """The `Launcher` (dst, src) of a pair family's kernel (a copy's, a reduce's) on one device,
    `compile_for(tvm_ffi=, shape_generic=)` compiling it once (`guarded_launcher`).
    `shape_generic` (TVM-FFI only): one kernel for every shape of the plan's class, the launcher's
    `shape_generic` then True: its compiled function checks dtypes, devices and alignment but
    takes any extents and strides, so the caller checks each new shape (`plan.check_copy_shape`)
    before it launches."""
    if shape_generic and not tvm_ffi_available():
        raise ValueError("shape-generic copies launch through TVM-FFI: install apache-tvm-ffi")
    launcher = guarded_launcher(
        lambda tvm_ffi: compile_for(tvm_ffi=tvm_ffi, shape_generic=shape_generic and tvm_ffi),
        device,
        dst_first=True,
    )
    return replace(launcher, shape_generic=shape_generic)


def guarded_launcher(
    compile_for: Callable[[bool], CompiledKernel], device: str, dst_first: bool = False
) -> Launcher:
    """The `Launcher` of the kernel `compile_for(tvm_ffi)` compiles, its hang-guard words on
    `device`, passed after the tensors (`dst_first`: the launcher takes (dst, src), as a pair
    family's calls do, and passes them to a kernel compiled for (src, dst)). Through the DSL's
    TVM-FFI path when `apache-tvm-ffi` is installed: torch tensors passed directly, torch's
    current stream taken by the compiled function, which checks every argument against what it
    was compiled for (`checks_arguments`); otherwise the plain path (each tensor converted by
    DLPack, the stream read from torch, on the first tensor's device)."""
    guard = new_guard(device)
    if not tvm_ffi_available():
        import torch

        plain, cute_guard = compile_for(False), to_cute_tensor(guard)

        def launch_plain(*tensors: torch.Tensor) -> None:
            with torch.cuda.device(tensors[0].device):
                plain(*map(to_cute_tensor, tensors), cute_guard, current_stream())

        if dst_first:
            return Launcher(lambda dst, src: launch_plain(src, dst))
        return Launcher(launch_plain)
    compiled = compile_for(True)
    function = compiled.function
    if dst_first:

        def launch(dst: torch.Tensor, src: torch.Tensor) -> None:
            function(src, dst, guard)

    else:

        def launch(*tensors: torch.Tensor) -> None:
            function(*tensors, guard)

    return Launcher(launch, checks_arguments=True, compiled=compiled)
