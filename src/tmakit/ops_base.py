"""What tmakit's torch operators share (`tmakit.ops` and each family's `op` part):
the namespace, the library each defines its ops in, the checks of tensors without memory or off
the GPU, the device guard, the keysets an Autograd kernel reads, the Autograd kernel of an op
without a gradient (`not_differentiable`), and what the ops on a pair of tensors with the copy's
options share (`copy_`'s and the reduce's: the options as schema arguments and keywords, the
in-place call, a fake's check of the pair)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, is_fake

from .api import check_copy_layout, check_on_gpu, check_torch_tensor
from .api.tensors import bump_versions, switched_off
from .config import dtype_of, major_of
from .errors import TmaConfigError
from .plan import CopyOptions

NAMESPACE = "tmakit"
# Every op's mode, a keyword-only schema argument: strict (TMA, or TmaConfigError) unless False,
# the call of the op's `tmakit` function (torch's op where TMA does not serve, on any device).
STRICT = "bool strict=True"
increment_versions = bump_versions  # an op's write of its tensors, counted as torch's in-place ops count it
TRACING = "while tracing (torch.compile, make_fx, torch.export or a FakeTensorMode)"


BELOW_AUTOGRAD = torch._C._after_autograd_keyset
BelowAutograd = torch._C._AutoDispatchBelowAutograd
# An Autograd kernel's keysets (as raw bits) under which the next kernel would be the real
# implementation (CompositeExplicitAutograd): a dense tensor on a GPU, or on the CPU (refused there
# by tmakit.api), and no other key below autograd (no trace's mode, no functionalization, no
# conjugate or negative view). Compared whole: reading the keyset's keys one by one costs far more.
PLAIN = frozenset(
    (torch._C.DispatchKeySet(backend) | torch._C.DispatchKeySet(autograd)).raw_repr()
    for backend, autograd in (
        (torch._C.DispatchKey.CUDA, torch._C.DispatchKey.AutogradCUDA),
        (torch._C.DispatchKey.CPU, torch._C.DispatchKey.AutogradCPU),
    )
)


def define(schemas: dict[str, str], kernels: tuple) -> torch.library.Library:
    """A fragment of the `tmakit` library (`tmakit.ops` defines the namespace) defining `schemas`,
    each op of `kernels` ((name, implementation, fake)) registered under CompositeExplicitAutograd
    with its fake (also its Meta kernel); pt2_compliant_tag, as custom_op gives its ops. An op that
    writes a tensor also gets its kernels for tensors with a lazily applied bit (`lazy_bit_kernel`).
    The library returned must live as long as the process (dropping it unregisters the ops)."""
    library = torch.library.Library(NAMESPACE, "FRAGMENT")
    for schema in schemas.values():
        library.define(schema, tags=(torch.Tag.pt2_compliant_tag,))
    for name, impl, fake in kernels:
        library.impl(name, impl, "CompositeExplicitAutograd")  # every device: tmakit.api's errors
        torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=library)
        op, _, overload = name.partition(".")
        packet = getattr(torch.ops.tmakit, op)
        for bit in LAZY_BITS:
            kernel = lazy_bit_kernel(getattr(packet, overload or "default"), bit, impl)
            if kernel is not None:
                library.impl(name, kernel, bit.key)
    return library


@dataclass(frozen=True)
class LazyBit:
    """A bit torch applies to a view as it reads and writes it (its dispatch key, its name, the
    test and the call that makes a tensor without it)."""

    key: str
    name: str
    test: str
    resolve: str


LAZY_BITS = (
    LazyBit("Conjugate", "conjugate", "is_conj", "resolve_conj"),
    LazyBit("Negative", "negative", "is_neg", "resolve_neg"),
)


def lazy_bit_kernel(overload: Any, bit: LazyBit, impl: Callable[..., Any]) -> Any:
    """The kernel of an op that writes a tensor, for arguments with `bit`; None for an op that
    writes none. torch's fallback for the bit resolves each argument into a new tensor, so a
    written one would be written in that copy (and, the op returning nothing, the fallback fails
    after the launch): a strict call's written tensor with the bit is refused before anything
    runs, the others are resolved and the op called again on them. A call with `strict=False`
    runs `impl` (the op's kernel: its `tmakit` function) on the tensors as they are, which hands
    such a view to torch's op."""
    schema = overload._schema
    written = [
        (i, argument.name)
        for i, argument in enumerate(schema.arguments)
        if argument.alias_info is not None and argument.alias_info.is_write
    ]
    if not written:
        return None
    op = schema.name.split("::")[-1]

    def resolved(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return getattr(value, bit.resolve)()
        if isinstance(value, (list, tuple)):
            return [resolved(v) for v in value]
        return value

    def kernel(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("strict", True) is False:
            return impl(*args, **kwargs)
        for i, name in written:
            value = args[i] if i < len(args) else kwargs.get(name)
            listed = isinstance(value, (list, tuple))
            for k, tensor in enumerate(value if listed else (value,)):
                if isinstance(tensor, torch.Tensor) and getattr(tensor, bit.test)():
                    where = f"{name}[{k}]" if listed else name
                    raise TmaConfigError(
                        f"torch.ops.{NAMESPACE}.{op}: {where} is a {bit.name} view (torch applies the bit "
                        "as it reads and writes; TMA writes the stored memory and cannot): write into a "
                        f"tensor without the bit ({where}.{bit.resolve}() makes a new one), or call "
                        f"tmakit.{op}, which hands such a view to torch's op where one serves it"
                    )
        return overload(*map(resolved, args), **{k: resolved(v) for k, v in kwargs.items()})

    return kernel


class NotDifferentiable(torch.autograd.Function):
    """load_tiles or im2col under autograd: the op below autograd, and a backward that raises
    (what TMA put in shared memory, or a patch matrix, has no gradient defined here)."""

    @staticmethod
    def forward(
        ctx: Any,
        op: str,
        below: torch._C.DispatchKeySet,
        tensor: torch.Tensor,
        kwargs: dict[str, Any],
        *args: Any,
    ) -> torch.Tensor:
        ctx.op = op
        with BelowAutograd():
            return getattr(torch.ops.tmakit, op).default.redispatch(below, tensor, *args, **kwargs)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> None:
        raise RuntimeError(
            f"torch.ops.{NAMESPACE}.{ctx.op} is not differentiable: backward reached it through a tensor "
            "that requires grad (detach the input, or call the op under torch.no_grad())"
        )


def not_differentiable(op: str, name: str, impl: Any) -> Any:
    """The Autograd kernel of an op without a gradient, as copy's: `NotDifferentiable` where its
    tensor (the argument `name`) needs a gradient, else `impl` called directly (plain tensors) or
    the kernels below autograd."""

    def autograd_kernel(
        keyset: torch._C.DispatchKeySet, tensor: torch.Tensor, *args: Any, **kwargs: Any
    ) -> torch.Tensor:
        if tensor is None:  # the dispatcher passes None for a Tensor argument
            refuse_memoryless(op, **{name: tensor})
        if tensor.requires_grad and torch.is_grad_enabled():
            return NotDifferentiable.apply(op, keyset & BELOW_AUTOGRAD, tensor, kwargs, *args)
        if keyset.raw_repr() in PLAIN:
            return impl(tensor, *args, **kwargs)
        with BelowAutograd():
            below = keyset & BELOW_AUTOGRAD
            return getattr(torch.ops.tmakit, op).default.redispatch(below, tensor, *args, **kwargs)

    return autograd_kernel


def refuse_grad(op: str, *tensors: torch.Tensor) -> None:
    if torch.is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in tensors):
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.{op} is not differentiable; call it under torch.no_grad(), or use "
            "torch's op where a gradient is needed"
        )


# -- tensors without memory, tensors off the GPU while tracing ---------------------------------------
def refuse_memoryless(op: str, **tensors: torch.Tensor) -> None:
    """A real implementation's check: a fake tensor (a trace's: a device, no memory) or a meta
    tensor raises TmaConfigError. Through torch's dispatcher neither arrives here (a fake
    tensor goes to its FakeTensorMode, a meta tensor to the Meta kernel), but a direct call of
    the implementation can pass one. The callers test `.is_meta` and the exact type first, which
    costs nanoseconds on the eager path."""
    for name, tensor in tensors.items():
        if isinstance(tensor, FakeTensor):
            raise TmaConfigError(
                f"torch.ops.{NAMESPACE}.{op}: {name} is a fake tensor (a shape on {tensor.device}, no "
                "memory) in the eager path; a fake tensor belongs in a trace (torch.compile, make_fx), "
                "whose fake implementation computes the output: call the op eagerly on real CUDA tensors"
            )
        check_torch_tensor(tensor, f"torch.ops.{NAMESPACE}.{op}", name)  # meta: tmakit.api's message


def check_traced(op: str, **tensors: torch.Tensor) -> None:
    """A fake implementation's check: every tensor is on a CUDA device. A CPU tensor in a trace, or a
    meta tensor (passed to the op eagerly, or traced), raises TmaConfigError. The error gives
    `tmakit.api`'s message and says what called it."""
    for name, tensor in tensors.items():
        if isinstance(tensor, torch.Tensor) and tensor.device.type == "cuda":
            continue
        where = TRACING if is_fake(tensor) else "called eagerly"
        try:
            check_torch_tensor(tensor, f"torch.ops.{NAMESPACE}.{op}", name)  # meta
            check_on_gpu(tensor, name)  # cpu and any other device
        except TmaConfigError as error:
            raise TmaConfigError(f"torch.ops.{NAMESPACE}.{op} {where}: {error}") from None


def op_options(options: dict) -> dict:
    """An op's keyword options as its function takes them: `strict` (True unless given) as
    `op_strict` allows it."""
    return {**options, "strict": options.get("strict", True) and op_strict()}


def op_strict() -> bool:
    """The `strict` a tmakit op runs its function with: TMA's path or a TmaConfigError, unless
    `TMAKIT_DISABLE=1` sends every call to torch's op (`api.tensors.switched_off`)."""
    return not switched_off()


@functools.cache
def gpu_count() -> int:
    """CUDA devices torch sees; fixed for the process once CUDA is initialised."""
    return torch.cuda.device_count()


def foreign_device(tensor: torch.Tensor) -> int | None:
    """The index of `tensor`'s GPU when it is not the current device (its launch then needs that
    device's guard), else None. On a one-GPU machine this is always None, at the cost of a
    cached call."""
    if gpu_count() < 2:
        return None
    index = tensor.get_device()
    return index if index >= 0 and index != torch.cuda.current_device() else None


def on_its_device(tensor: torch.Tensor, launch: Any, *args: Any, **kwargs: Any) -> Any:
    """`launch(*args, **kwargs)`, under the guard of `tensor`'s GPU where it is not the current
    device (`foreign_device`)."""
    if gpu_count() < 2:  # no other device: no call through foreign_device
        return launch(*args, **kwargs)
    device = foreign_device(tensor)
    if device is None:
        return launch(*args, **kwargs)
    with torch.cuda.device(device):
        return launch(*args, **kwargs)


# -- the ops on a pair of tensors with the copy's options (copy_, reduce_into_) ----------------------
OPTIONS = CopyOptions.schema_arguments()


@functools.lru_cache(maxsize=256)
def copy_kwargs(options: str) -> dict[str, Any]:
    """`tmakit.copy_`'s keyword arguments for an options text ("" and "default": none).
    TmaConfigError for a malformed one (`CopyOptions.parse`'s message). Cached: a repeated text
    costs a dictionary lookup. The dictionary returned is shared, so it must not be changed."""
    if not options or options == "default":
        return {}
    return CopyOptions.parse(options).changed()


def op_kwargs(options: str, typed: dict[str, Any]) -> dict[str, Any]:
    """`tmakit.copy_`'s keyword arguments from the `default` overload's options text or the
    `typed` overload's arguments (the dispatcher passes those given, and may pass defaults too:
    those are left out). The text's dictionary is cached and shared."""
    return CopyOptions.keywords(typed) if typed else copy_kwargs(options)


def run_in_place(
    op: str, dst: torch.Tensor, src: torch.Tensor, launch: Any, *args: Any, **kwargs: Any
) -> None:
    """`launch(dst, src, ...)`, one of tmakit's API functions, under dst's GPU's guard; the API
    bumps dst's version counter (what an in-place torch op's ADInplaceOrView kernel does). A
    tensor without memory is refused first."""
    if type(dst) is not torch.Tensor or type(src) is not torch.Tensor or dst.is_meta or src.is_meta:
        refuse_memoryless(op, dst=dst, src=src)
    on_its_device(dst, launch, dst, src, *args, **kwargs)


Tensor = torch.Tensor
NO_OPTIONS: dict[str, Any] = {}  # read, never written, by the dispatch


def plain_pair(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """Whether an in-place op's call needs none of its API function's steps around the dispatch:
    one GPU (no device guard), real dense tensors (not fake, meta or a subclass: those are
    refused there) that autograd does not see. A negative or conjugate view never reaches an
    op's kernel: the dispatcher's fallbacks resolve it first."""
    return not (
        type(dst) is not Tensor
        or type(src) is not Tensor
        or dst.requires_grad
        or src.requires_grad
        or dst.is_meta
        or src.is_meta
        or gpu_count() > 1
    )


def check_traced_pair(
    op: str,
    dst: torch.Tensor,
    src: torch.Tensor,
    kwargs: dict[str, Any],
    check_layouts: Callable[[bool], None] | None = None,
) -> None:
    """A fake implementation's check of a copy's or reduce's pair: both on a CUDA device, one
    shape and dtype, a dtype TMA moves and, where the strides are static, their layout rules
    (`api.check_copy_layout`; a rows view's or bulk copy's compact tensors are planned apart)
    and, given, `check_layouts(whether the two layouts differ)` first (an op on tiles of one
    layout refuses that: the reduce's load-add-store ring)."""
    check_traced(op, dst=dst, src=src)
    if tuple(dst.shape) != tuple(src.shape) or dst.dtype != src.dtype:
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.{op}: destination is {tuple(dst.shape)} {dst.dtype}, source "
            f"{tuple(src.shape)} {src.dtype}; they must match"
        )
    dtype = dtype_of(src.dtype)
    shape, src_strides, dst_strides = tuple(src.shape), tuple(src.stride()), tuple(dst.stride())
    if all(type(value) is int for value in (*shape, *src_strides, *dst_strides)):  # static
        same_major = major_of(src_strides, shape) == major_of(dst_strides, shape)
        if check_layouts is not None:
            check_layouts(not same_major)
        compact = same_major and src.is_contiguous() and dst.is_contiguous()
        check_copy_layout(shape, src_strides, dst_strides, dtype, CopyOptions.of(**kwargs), compact)
