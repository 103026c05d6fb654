"""Each kernel family compiled once per configuration (`compile.compiles`: the cache key is the
compile function's name and its arguments), and what a launch needs beside it: the hang guard's
words and the launcher around a compiled kernel (`guarded_launcher`). A family's kernel compiles in
its own `launch` part (`tmakit.registry`), with these.

Compiling needs no GPU (the tensors are descriptions only). The kernel modules import the DSL,
which takes seconds; they are imported where a kernel is built, so that `import tmakit` (plans,
checks, the CPU model) stays fast.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..config import DTYPES, RAW_BYTE, LoadConfig
from ..errors import TmaHangError
from ..plan import (
    DEFAULT_RELEASE,
    ClusterDotPlan,
    CopyPlan,
    LoadPlan,
    MulticastPlan,
    PipelinePlan,
    copy_destination,
)
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
def compile_tile_load(
    plan: LoadPlan,
    consumer: str = "store",
    tile_shift: tuple[int, int] = (0, 0),
    keep_ptx: bool = False,
    tvm_ffi: bool = False,
    shape_generic: bool = False,
) -> tuple:
    """The tile-load kernel (`kernels.tile_load`) for sm_90a. `consumer="none"` is the seed's
    load-only kernel; `tile_shift` is for verifier tests only; `tvm_ffi` as in `compile_kernel`.
    `shape_generic` (with TVM-FFI): one compile for every shape of the plan's dtype, rank, layout,
    tile and swizzle (`plan.stand_in_config`); the scratch is then the compact padded output of
    whatever shape is loaded."""
    if not shape_generic:
        plan.check_specialised()
    from ..kernels.tile_load import TileLoadKernel

    config = plan.config
    rank = len(config.shape)
    if shape_generic:
        src = symbolic_tensors(config.element, (config.contiguous_index,), rank)[0]
        scratch = {
            "none": src,
            "store": symbolic_tensors(config.element, (rank - 1,), rank, aligned_strides=False)[0],
        }[consumer]
    else:
        src = fake_source(config)
        scratch = {
            "none": src,
            "store": fake_tensor(config.element, plan.padded_shape),
            "raw": fake_tensor(RAW_BYTE, (plan.total_tile_loads, plan.expected_tx_bytes)),
        }[consumer]
    kernel = TileLoadKernel(plan, consumer=consumer, tile_shift=tile_shift, shape_generic=shape_generic)
    return kernel, src, scratch, placeholder_stream(env=tvm_ffi)


@compiles
def compile_pipelined_load(
    pipeline: PipelinePlan,
    consumer: str = "store",
    hang_guard: bool = False,
    keep_ptx: bool = False,
    tvm_ffi: bool = False,
) -> tuple:
    """A pipelined load (`kernels.pipeline`: the consumers "none", "store" and "rowsum") for
    sm_90a, no GPU needed. `hang_guard` is the debug hang guard; `tvm_ffi` as in `compile_kernel`."""
    pipeline.load.check_specialised()
    from ..kernels.pipeline import PipelinedLoadKernel

    kernel = PipelinedLoadKernel(pipeline, consumer, hang_guard=hang_guard)
    return kernel, *pipelined_load_arguments(pipeline, consumer, tvm_ffi)


def pipelined_load_arguments(pipeline: PipelinePlan, consumer: str, tvm_ffi: bool) -> tuple:
    """The example arguments a pipelined load is compiled against, (src, out, guard, stream); the
    parameters as `compile_pipelined_load` takes them."""
    import cutlass

    plan = pipeline.load
    src = fake_source(plan.config)
    out = {
        "none": src,
        "store": fake_tensor(plan.config.element, plan.padded_shape),
        "rowsum": fake_tensor(DTYPES["fp32"], pipeline.rowsum_shape),
    }[consumer]
    guard = fake_tensor(cutlass.Int32, (GUARD_WORDS,))
    return src, out, guard, placeholder_stream(env=tvm_ffi)


@compiles
def compile_copy(
    copy: CopyPlan,
    hang_guard: bool = False,
    keep_ptx: bool = False,
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


@compiles
def compile_multicast_load(
    multicast: MulticastPlan,
    keep_ptx: bool = False,
    store: bool = True,
    release: str = DEFAULT_RELEASE,
) -> tuple:
    """The cluster kernel (`kernels.multicast`) for sm_90a: multicast, or the baseline;
    single-tile, or an N-stage ring per CTA when the plan has stages > 1 (`store=False`: the
    ring's consumers only wait and release, for timing). `release`: how its consumers free a
    stage in the peers (`plan.RELEASES`)."""
    if multicast.stages == 1 and not store:
        raise ValueError("the single-tile multicast kernel always stores (use stages > 1)")
    multicast.load.check_specialised()
    from ..kernels.multicast import MulticastLoadKernel, PipelinedMulticastKernel

    if multicast.stages == 1:
        kernel = MulticastLoadKernel(multicast)
    else:
        kernel = PipelinedMulticastKernel(multicast, store, release)
    return kernel, *multicast_load_arguments(multicast)


def multicast_load_arguments(multicast: MulticastPlan) -> tuple:
    """The example arguments a cluster kernel is compiled against, (src, copies, stream): the
    input and each CTA's copy of the padded scratch."""
    plan = multicast.load
    copies = fake_tensor(plan.config.element, multicast.copies_shape)
    return fake_source(plan.config), copies, placeholder_stream()


@compiles
def compile_cluster_dot(dot: ClusterDotPlan, keep_ptx: bool = False) -> tuple:
    """The cluster row dot (`kernels.cluster_dot`) for sm_90a, multicast or the baseline, called
    with A (B, M, K), X (M, K), out (B, M) fp32 and a stream."""
    dot.a_load.check_specialised()
    from ..kernels.cluster_dot import ClusterDotKernel

    a = fake_source(dot.a_load.config)
    x = fake_source(dot.x_load.config)
    out = fake_tensor(DTYPES["fp32"], dot.out_shape)
    return ClusterDotKernel(dot), a, x, out, placeholder_stream()


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
Launcher = Callable[..., None]
"""tmakit's one launcher type: a callable on the kernel's tensors ((src, dst) for a copy or a
reduce, what `CopyDispatch` calls) that launches and returns nothing. Besides the call, a launcher
may carry these attributes, set with plain assignment and read with `getattr(launcher, name,
False)` (absent: False), so a plain function is a launcher that claims none of them:

- `checks_arguments`: its compiled function raises TypeError/ValueError on a tensor it was not
  built for (dtype, shape, strides, alignment, device), before it launches, so it may be tried
  first. Set by `guarded_launcher` (True through TVM-FFI, False on the plain path), copied onto a
  wrapper by `copies.views.restrided` and `reduce.call.ReduceKernel.launcher`; read by
  `runtime.dispatch.CopyDispatch.copy_` (the streak to FAST) and `CopyDispatch.guard`.
- `shape_generic`: one kernel for every shape of its class, so it takes any extents and strides
  and is pinned to the shape its last lookup checked. Set by `copy_launcher`,
  `reduce.launch.reduce_launcher`, `copies.views.restrided` (True) and
  `reduce.call.ReduceKernel.launcher`; read by `CopyDispatch.copy_`.
- `moves_nothing`: an empty copy's, whose tensors' addresses do not matter. Set on
  `copy_nothing`; read by `CopyDispatch.copy_` (no address check).
- `any_address`: it takes any base address (torch's op serves the call). Set on
  `copies.views.torch_copy`, `copies.views.driver_launcher`'s and
  `reduce.call.torch_launcher`'s; read by `CopyDispatch.copy_` (no address check).
- `compiled`: the `CompiledKernel` it calls (how it was built: compile time, from the disk cache
  or not). Set by `guarded_launcher` on its TVM-FFI path; read by `bench.hostcost`.
"""


def copy_nothing(src: torch.Tensor, dst: torch.Tensor) -> None:
    """The launcher of an empty copy (or reduce): no element to move, as torch's copy_ of empty
    tensors."""


copy_nothing.moves_nothing = True  # type: ignore[attr-defined]  # its tensors' addresses do not matter


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
    """A callable (src, dst) for one copy configuration on one device (its hang-guard words live
    there), compiled once (`tensor_shape`: called with compact tensors of this shape, viewed as
    the plan's rows). Through the DSL's TVM-FFI path when `apache-tvm-ffi` is installed (torch
    tensors passed directly, torch's current stream taken by the compiled function itself, the
    compiled function kept on disk); otherwise the plain path. A TVM-FFI launcher's
    `checks_arguments` is True: its compiled function raises on a tensor it was not built for.

    `shape_generic` (TVM-FFI only): one kernel for every shape of the plan's class
    (`plan.copy_class`); the launcher's `shape_generic` is then True and its compiled function
    checks dtypes, devices and alignment but takes any extents and strides, so the caller checks
    each new shape (`plan.check_copy_shape`) before it launches."""
    if shape_generic and not tvm_ffi_available():
        raise ValueError("shape-generic copies launch through TVM-FFI: install apache-tvm-ffi")
    launch = guarded_launcher(
        lambda tvm_ffi: compile_copy(
            copy,
            tvm_ffi=tvm_ffi,
            destination=destination,
            tensor_shape=tensor_shape,
            shape_generic=shape_generic and tvm_ffi,
        ),
        device,
    )
    launch.shape_generic = shape_generic
    return launch


def guarded_launcher(compile_for: Callable[[bool], CompiledKernel], device: str) -> Launcher:
    """A callable (tensor, ...) around the kernel `compile_for(tvm_ffi)` compiles, its hang-guard
    words on `device`, passed after the tensors. Through the DSL's TVM-FFI path when
    `apache-tvm-ffi` is installed: torch tensors passed directly, torch's current stream taken by
    the compiled function, which checks every argument against what it was compiled for
    (`checks_arguments` True); otherwise the plain path (each tensor converted by DLPack, the
    stream read from torch, on the first tensor's device)."""
    guard = new_guard(device)
    if not tvm_ffi_available():
        import torch

        plain, cute_guard = compile_for(False), to_cute_tensor(guard)

        def launch(*tensors: torch.Tensor) -> None:
            with torch.cuda.device(tensors[0].device):
                plain(*map(to_cute_tensor, tensors), cute_guard, current_stream())

        launch.checks_arguments = False
        return launch
    compiled = compile_for(True)
    function = compiled.function

    def launch(*tensors: torch.Tensor) -> None:
        function(*tensors, guard)

    launch.compiled = compiled  # how it was built (compile time, from the disk cache or not)
    launch.checks_arguments = True
    return launch
