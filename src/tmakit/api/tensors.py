"""The checks every torch-facing call shares: torch itself, what a tensor must be (a dense torch
tensor with memory, on a CUDA device), a shape's extents, a copy's or reduce's pair of tensors, a
device's facts, and what a two-tensor call's route reads (`pair_facts`). Each check raises
`TmaConfigError` naming the value and the rule, before anything compiles or launches (torch
missing: an ImportError naming the `gpu` extra).
"""

from __future__ import annotations

import functools
import operator
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..config import dtype_of
from ..errors import TmaConfigError, TorchOpError
from ..limits import DEFAULT_SM_COUNT, MAX_RANK
from ..plan.budget import budgeted_sm_count
from ..plan.route import (
    NOT_SM90,
    RECORDED_BY_AUTOGRAD,
    SWITCH_VARIABLE,
    SWITCHED_OFF,
    PairFacts,
    TensorFacts,
    broadcasts,
    lazy_reason,
    torch_memory_rule,
)
from ..validate import check_base_address, check_rank, type_name

if TYPE_CHECKING:
    import numpy as np
    import torch

GPU_EXTRA = "pip install 'tmakit[gpu]'"  # torch and the fast launch path


def import_torch(what: str) -> Any:
    """torch, or an ImportError that says how to install it: a missing optional dependency, not a
    configuration TMA cannot serve."""
    try:
        import torch
    except ImportError as error:
        raise ImportError(
            f"tmakit.{what} needs torch, which is not installed: {GPU_EXTRA} (or a torch build for "
            "your CUDA, then `pip install apache-tvm-ffi`)"
        ) from error
    return torch


def compile_check(namespace: dict[str, Any], name: str) -> Callable[[], bool]:
    """`torch.compiler.is_compiling`, for a module that asks it first thing in each public
    function (kept as `namespace[name]`, its globals): while torch.compile or torch.export traces
    the call, the function hands it to its torch op, which the trace can record. Torch's own
    function where torch is loaded, so the repeated call pays that one call; else a stand-in
    whose first call outside a trace puts torch's in its place (dynamo reads torch's as True
    while it traces, so the stand-in traced stores nothing); with torch not loaded, nothing
    traces, and the function's own checks name what it was given."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "compiler"):
        return torch.compiler.is_compiling

    def first_call() -> bool:
        torch = sys.modules.get("torch")
        if torch is None:
            return False
        is_compiling = torch.compiler.is_compiling
        if not is_compiling():
            namespace[name] = is_compiling
        return is_compiling()

    first_call.__name__ = first_call.__qualname__ = name
    return first_call


def is_torch_tensor(value: object) -> bool:
    """Whether `value` is a torch tensor, without importing torch (no torch loaded: none is)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def plain_torch_tensor(tensor: object) -> bool:
    """Whether `tensor` passes `check_torch_tensor` on sight: a torch.Tensor itself (no subclass),
    strided, not nested, quantized or on the meta device. Five attribute reads, a third of the
    checks' cost; False leaves the verdict to them."""
    torch = sys.modules.get("torch")
    return (
        torch is not None
        and type(tensor) is torch.Tensor
        and tensor.layout is torch.strided
        and not (tensor.is_nested or tensor.is_quantized or tensor.is_meta)
    )


def check_torch_tensor(tensor: object, what: str, name: str) -> None:
    """A torch tensor with memory TMA can address: dense (strided) and not on the meta device; the
    device itself is `check_on_gpu`'s."""
    if plain_torch_tensor(tensor):  # the usual argument, told apart cheaply
        return
    if not is_torch_tensor(tensor):
        raise TmaConfigError(
            f"{what} takes torch tensors on a CUDA device; got {type_name(tensor)} as {name} "
            "(convert it with torch.as_tensor(value, device='cuda'))"
        )
    layout = str(tensor.layout)
    if layout != "torch.strided":
        raise TmaConfigError(
            f"{name} has layout {layout}; TMA loads dense strided memory: convert it with .to_dense() first"
        )
    if tensor.is_nested:
        raise TmaConfigError(
            f"{name} is a nested tensor (tensors of different shapes, no strides of its own); TMA loads "
            "one strided tensor: pass each of its tensors (.unbind()), or .to_padded_tensor(0) first"
        )
    if tensor.is_quantized:
        raise TmaConfigError(
            f"{name} is a quantized tensor ({tensor.dtype}); tmakit moves plain dtypes: pass its "
            ".int_repr() (the stored integers) or .dequantize() first"
        )
    if tensor.device.type == "meta":
        raise TmaConfigError(
            f"{name} is on the meta device (a shape and a dtype, no memory); TMA loads GPU memory: "
            "allocate it on a CUDA device"
        )


def check_on_gpu(tensor: torch.Tensor, name: str) -> None:
    """`tensor` (`name` in the message) is on a CUDA device: TMA moves GPU memory."""
    if not tensor.is_cuda:  # `.device` builds an object: several times the cost
        raise TmaConfigError(
            f"{name} is on {tensor.device}; TMA loads from GPU memory, move it with .cuda() first"
        )
    index = tensor.get_device()
    if not is_sm90(index):
        major, minor = import_torch("tmakit").cuda.get_device_capability(index)
        raise TmaConfigError(
            f"{name} is on cuda:{index}, a GPU of compute capability {major}.{minor}; tmakit's TMA "
            "kernels are built for sm_90a (Hopper: H100, H200): use torch's op on this GPU"
        )


def check_gpu_tensor(tensor: object, what: str, name: str) -> None:
    """A torch tensor with memory TMA can address (`check_torch_tensor`), on a CUDA device
    (`check_on_gpu`): what an op's own input must be."""
    check_torch_tensor(tensor, what, name)
    check_on_gpu(tensor, name)


def checked_tensor(
    tensor: torch.Tensor | np.ndarray, on_gpu: bool = True, any_rank: bool = False, name: str = "tensor"
) -> tuple[tuple[int, ...], str, tuple[int, ...]]:
    """(shape, tmakit dtype, element strides) of a torch tensor or numpy array, after the checks
    that need no tile: what it is (a dense torch tensor with memory, or a numpy array), device
    (when `on_gpu`), rank (unless `any_rank`: a compact copy's rows view reads memory, not dims),
    elements, dtype and 16-byte base address (the strides are `validate`'s, with the tile)."""
    numpy = sys.modules.get("numpy")
    if is_torch_tensor(tensor):
        check_torch_tensor(tensor, "config_for", name)
        if on_gpu:
            check_on_gpu(tensor, name)
        strides = tuple(int(s) for s in tensor.stride())
        address = tensor.data_ptr()
    elif numpy is not None and isinstance(tensor, numpy.ndarray):  # strides in bytes, host memory
        if on_gpu:
            raise TmaConfigError(
                f"{name} is on cpu; TMA loads from GPU memory, move it with "
                "torch.as_tensor(array, device='cuda') first (a numpy array is host memory)"
            )
        strides = tuple(int(s) // tensor.itemsize for s in tensor.strides)
        address = tensor.__array_interface__["data"][0]
    else:
        raise TmaConfigError(
            f"config_for takes a torch tensor or a numpy array; got {type_name(tensor)} "
            "(convert it with torch.as_tensor(value) or numpy.asarray(value))"
        )
    shape = tuple(int(e) for e in tensor.shape)
    if not any_rank:
        check_rank(len(shape))
        if 0 in shape:
            raise TmaConfigError(
                f"{name} of shape {shape} has no elements (dim {shape.index(0)} is 0); a TMA load "
                "needs every extent >= 1: skip the load of an empty tensor"
            )
    dtype = dtype_of(tensor.dtype)
    check_base_address(address)
    return shape, dtype, strides


def checked_shape(shape: object) -> tuple[int, ...]:
    """`shape` as a tuple of ints: a sequence of 2 to 5 whole numbers >= 0."""
    try:
        extents = tuple(operator.index(extent) for extent in shape)  # type: ignore[attr-defined]
    except TypeError:
        raise TmaConfigError(
            f"shape {shape!r} is not a tuple of whole numbers; pass e.g. (1000, 777)"
        ) from None
    if not 2 <= len(extents) <= MAX_RANK:
        fix = "a vector of N elements is the matrix (1, N)" if len(extents) < 2 else "merge batch dims"
        raise TmaConfigError(
            f"shape {extents} has rank {len(extents)}; tmakit allocates and loads ranks 2 to {MAX_RANK} "
            f"(TMA's limit is {MAX_RANK}): {fix}"
        )
    negative = [dim for dim, extent in enumerate(extents) if extent < 0]
    if negative:
        raise TmaConfigError(f"shape {extents} has a negative extent in dim {negative[0]}; extents are >= 0")
    return extents


def check_tensor_pair(
    dst: object, src: object, what: str, why: str, dtype_rule: Callable[[Any], None] | None = None
) -> None:
    """Two torch tensors with memory of one shape and dtype (`why` ends the message when not),
    then `dtype_rule(dtype)` if given, then both on one CUDA device: `what` names the call."""
    check_torch_tensor(dst, what, "dst")
    check_torch_tensor(src, what, "src")
    if tuple(dst.shape) != tuple(src.shape) or dst.dtype != src.dtype:
        raise TmaConfigError(
            f"destination is {tuple(dst.shape)} {dst.dtype}, source {tuple(src.shape)} {src.dtype}; {why}"
        )
    if dtype_rule is not None:
        dtype_rule(src.dtype)
    check_on_gpu(dst, "dst")
    check_on_gpu(src, "src")
    if dst.device != src.device:
        raise TmaConfigError(f"destination is on {dst.device}, source on {src.device}; {what} within one GPU")


@functools.lru_cache(maxsize=64)
def device_facts(device: torch.device) -> tuple[int, int]:
    """(SM count, L2 bytes) of a CUDA device, read once per process."""
    torch = import_torch("copy_")
    properties = torch.cuda.get_device_properties(device)
    return properties.multi_processor_count, properties.L2_cache_size


def check_budget(sms: int | None, tensor: object) -> None:
    """A call's SM budget refused (TmaConfigError naming the count) past the SM count of the GPU
    `tensor` is on, or of a Hopper GPU (`limits.DEFAULT_SM_COUNT`) for a tensor on none, as a
    call's options are checked there: whatever path then serves the call, before it writes. While
    torch.compile traces the call, nothing (the traced op's run checks it)."""
    if sms is None or _budget_traced():
        return
    on_gpu = getattr(tensor, "is_cuda", False) is True
    budgeted_sm_count(sms, device_facts(tensor.device)[0] if on_gpu else DEFAULT_SM_COUNT)


_budget_traced = compile_check(globals(), "_budget_traced")


def cuda_index(tensor: torch.Tensor) -> int:
    """The index of the CUDA device `tensor` is on, as a route's facts take it (`plan.route`): -1
    for any other device, `NOT_SM90` for a GPU tmakit's kernels cannot run on, `SWITCHED_OFF` for
    a Hopper while `TMAKIT_DISABLE=1` is set (`switched_off`)."""
    if not tensor.is_cuda:
        return -1
    index = tensor.get_device()
    if not is_sm90(index):
        return NOT_SM90
    return SWITCHED_OFF if _SWITCH[0] else index


# Whether TMAKIT_DISABLE is set (read at import): every call's route then gives torch's op, and
# tmakit's torch ops run their functions' torch paths instead of refusing (`ops_base.op_strict`).
_SWITCH = [os.environ.get(SWITCH_VARIABLE, "") not in ("", "0")]


def switched_off() -> bool:
    """Whether `TMAKIT_DISABLE=1` sends every tmakit call to torch's op in this process."""
    return _SWITCH[0]


def set_switched_off(value: bool) -> bool:
    """Turn the switch `TMAKIT_DISABLE` stands for on or off in this process (tests and tools;
    users set the variable), the calls planned before forgotten by the caller
    (`runtime.dispatch.forget_calls`); returns the value it had."""
    before, _SWITCH[0] = _SWITCH[0], bool(value)
    return before


@functools.cache
def device_name(index: int) -> str:
    """The name torch gives CUDA device `index` (what a rule measured per GPU is found by); read
    once per device."""
    return import_torch("tmakit").cuda.get_device_name(index)


@functools.cache
def is_sm90(index: int) -> bool:
    """Whether CUDA device `index` is a Hopper (compute capability 9.0), the GPU tmakit's sm_90a
    kernels run on; read once per device."""
    return import_torch("tmakit").cuda.get_device_capability(index) == (9, 0)


def recorded_by_autograd(*tensors: object) -> bool:
    """Whether autograd records a call on `tensors`: one requires grad and grad mode is on. Under
    torch.no_grad() (an optimizer's update of its parameters) it records nothing: the caller then
    launches TMA on `.detach()`ed views (the DLPack export TMA's launch takes refuses tensors that
    require grad). Anything not a tensor reads as False: the checks that follow name it."""
    if not any(getattr(tensor, "requires_grad", False) for tensor in tensors):
        return False
    return import_torch("tmakit").is_grad_enabled()


def detached(tensor: object) -> object:
    """`tensor.detach()` where it requires grad (the same memory, no autograd), else `tensor`."""
    return tensor.detach() if getattr(tensor, "requires_grad", False) else tensor  # type: ignore[attr-defined]


def out_of_the_plain_path(dst: object, src: object) -> bool:
    """Whether a two-tensor call needs more than its known plan: a tensor that requires grad, a
    negative view (a real dtype's lazily applied bit, which no call key holds), or an inference
    tensor written. Five attribute reads on the repeated path; anything not a tensor reads as
    False (the plain path names it)."""
    try:
        return (
            src.requires_grad  # type: ignore[attr-defined]
            or dst.requires_grad  # type: ignore[attr-defined]
            or src.is_neg()  # type: ignore[attr-defined]
            or dst.is_neg()  # type: ignore[attr-defined]
            or dst.is_inference()  # type: ignore[attr-defined]
        )
    except AttributeError:
        return False


def special_route(dst: torch.Tensor, src: torch.Tensor, what: str) -> str | None:
    """Why a call out of the plain path takes torch's op (a lazily applied bit, autograd
    recording it), after both are checked as torch tensors and `dst` as a tensor torch lets be
    written (`check_written`); None: the plain call on detached views serves it (a tensor that
    requires grad under torch.no_grad(), an inference tensor in inference mode)."""
    check_torch_tensor(dst, what, "dst")
    check_torch_tensor(src, what, "src")
    check_written(dst, what, "dst")
    lazy = lazy_bit(dst, src)
    if lazy is not None:
        return lazy_reason(lazy)
    return RECORDED_BY_AUTOGRAD if recorded_by_autograd(dst, src) else None


def tensor_guard(torch: Any, tensors: Sequence[Any]) -> Callable[..., bool] | None:
    """A check that tensors are as `tensors` are (Python type, dtype, device, shape, strides,
    requires_grad, dispatch keys: the conjugate and negative bits among them), holding none of
    them: torch's own tensor guard (dynamo's), which reads them in C++ (tens of nanoseconds a
    tensor where Python's reads cost hundreds); None where this torch has none or it cannot
    guard these."""
    guards = _tensor_guards(torch)
    if guards is None:
        return None
    try:
        guard = guards(
            *tensors,
            dynamic_dims_sizes=[list(t.shape) for t in tensors],
            dynamic_dims_strides=[list(t.stride()) for t in tensors],
        )
    except (TypeError, RuntimeError, SystemError, ValueError, AttributeError):
        return None
    return guard.check


@functools.cache
def _tensor_guards(torch: Any) -> Callable | None:
    try:
        from torch._C._dynamo.guards import TensorGuards
    except ImportError:
        return None
    return TensorGuards


def pair_guard(dst: Any, src: Any) -> Callable[[Any, Any], bool] | None:
    """`tensor_guard` of a call's two tensors, (dst, src) (`runtime.dispatch.Dispatch`'s guard_of)."""
    return tensor_guard(import_torch("copy_"), (dst, src))


def bump_versions(tensors: tuple[torch.Tensor, ...]) -> None:
    """Count a write autograd did not see in each of `tensors`' versions, as torch's in-place ops
    do, so a tensor saved for backward and then written is caught at backward."""
    (_BUMP or version_bump())(tensors)  # a global read: the repeated call's cheapest way to it


_BUMP: Callable[[tuple[Any, ...]], Any] | None = None  # version_bump()'s, once found


def version_of(tensor: object) -> int | None:
    """`tensor`'s version counter before a call writes it; None for what has none to read (not a
    tensor, which the call's checks name; an inference tensor, which counts no versions)."""
    try:
        return tensor._version  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):
        return None


def count_write(dst: torch.Tensor, before: int | None) -> None:
    """Count a call's write of `dst` once, as torch's in-place ops do: bumped unless torch's own
    op, which served the call (or its tail), counted it already."""
    if before is None or dst._version == before:
        bump_versions((dst,))


def version_bump() -> Callable[[tuple[Any, ...]], Any]:
    """torch.autograd.graph.increment_version's C call, taking a tuple of tensors where this
    torch's does (without the Python function's isinstance), else a loop over the one-tensor form
    of older torch builds."""
    global _BUMP
    torch = import_torch("tmakit")
    bump = torch._C._increment_version
    try:
        bump((torch.empty(0),))
    except (TypeError, RuntimeError):
        _BUMP = lambda tensors: [bump(tensor) for tensor in tensors]  # noqa: E731
    else:
        _BUMP = bump
    return _BUMP


def lazy_bit(*tensors: torch.Tensor) -> str | None:
    """The bit torch applies lazily on any of `tensors` ("conjugate", "negative"), else None."""
    for tensor in tensors:
        if tensor.is_conj():
            return "conjugate"
    for tensor in tensors:
        if tensor.is_neg():
            return "negative"
    return None


def dtype_name(dtype: torch.dtype) -> str:
    """torch's name of `dtype` ("float16", "bool"), read once per dtype."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


_DTYPE_NAMES: dict = {}


def tensor_facts(tensor: torch.Tensor) -> TensorFacts:
    """What a route reads of one torch tensor (`plan.route.TensorFacts`)."""
    return TensorFacts(
        tuple(tensor.shape),
        tuple(tensor.stride()),
        dtype_name(tensor.dtype),
        tensor.element_size(),
        tensor.data_ptr(),
        cuda_index(tensor),
    )


def pair_facts(dst: torch.Tensor, src: torch.Tensor) -> PairFacts:
    """What a two-tensor call's route is a function of (`plan.route.PairFacts`), read off torch
    tensors."""
    return PairFacts(tensor_facts(dst), tensor_facts(src), lazy_bit(dst, src))


def torch_copy_refusal(dst: torch.Tensor, src: torch.Tensor) -> str | None:
    """Why torch's `dst.copy_(src)` would refuse the pair, found without copying; None where it
    takes it. Its rules, read off the tensors (both checked as torch tensors first): a source
    that does not broadcast to the destination; autograd's in-place rules (`write_refusal`); a
    source on the meta device copied into memory; then, but for the very same view, the memory
    rules (`plan.route.torch_memory_rule`)."""
    if tuple(src.shape) != tuple(dst.shape) and not broadcasts(tuple(src.shape), tuple(dst.shape)):
        return f"src {tuple(src.shape)} does not broadcast to dst {tuple(dst.shape)}"
    refusal = write_refusal(dst, src)
    if refusal is not None or dst.is_meta:  # torch checks only the shape of a meta destination
        return refusal
    if src.is_meta:
        return "src is on the meta device (a shape and a dtype, no memory to copy out of)"
    if same_view(dst, src):
        return None
    torch = import_torch("copy_")
    return torch_memory_rule(pair_facts(dst, src), torch._C._is_alias_of(dst, src))


def check_written(tensor: torch.Tensor, what: str, name: str) -> None:
    """torch's rule for any tensor written in place, checked before anything is written (torch's
    own ops write an inference tensor first and raise after): an inference tensor is written only
    inside inference mode. `TorchOpError` where it is broken."""
    if tensor.is_inference() and not import_torch(what).is_inference_mode_enabled():
        raise TorchOpError(f"{what}: {name} {INFERENCE_WRITE}")


# Why torch refuses to write an inference tensor here, and what to do.
INFERENCE_WRITE = (
    "is an inference tensor, which torch writes in place only inside inference mode "
    "(torch.inference_mode()): .clone() it outside, or write it inside"
)


def write_refusal(dst: torch.Tensor, src: torch.Tensor) -> str | None:
    """Why torch refuses to write `dst` in place with `src` read, whatever the op: an inference
    tensor outside inference mode, and, where autograd records the call (grad mode on, either
    requiring grad), a leaf that requires grad, a view of one, or a view torch keeps from
    in-place writes (one of several a function returned, or made under no_grad or inference
    mode); None where it writes."""
    torch = import_torch("copy_")
    if dst.is_inference() and not torch.is_inference_mode_enabled():
        return f"dst {INFERENCE_WRITE}"
    if not recorded_by_autograd(dst, src):
        return None
    if dst._is_view() and dst._base.requires_grad:
        meta = torch._C._autograd._get_creation_meta(dst)
        if meta != torch._C._autograd.CreationMeta.DEFAULT:
            return (
                f"dst is a view torch does not let an in-place op change while autograd records "
                f"({meta.name.lower()}): write under torch.no_grad(), or into a tensor of its own"
            )
        if dst.requires_grad and dst._base.is_leaf:
            return "dst is a view of a leaf that requires grad, written in place while autograd records"
    if dst.requires_grad and dst.is_leaf:
        return "dst is a leaf that requires grad, written in place while autograd records"
    return None


def same_view(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """Whether copying `src` into `dst` leaves every byte as it is: the same memory, dtype, shape,
    strides and lazily applied bits (torch's copy_ returns at once)."""
    return (
        dst.data_ptr() == src.data_ptr()
        and dst.dtype == src.dtype
        and dst.shape == src.shape
        and dst.stride() == src.stride()
        and dst.is_conj() == src.is_conj()
        and dst.is_neg() == src.is_neg()
        and dst.device == src.device
    )
