"""Copies as torch operators (registered when `tmakit.ops` is imported):

    torch.ops.tmakit.copy_(dst, src, options="", *, non_blocking=False, strict=True) -> None;
        .typed(dst, src, *, tile=None, ..., non_blocking=False, strict=True)
    torch.ops.tmakit.copy(src, options="", *, strict=True) -> Tensor; .typed(src, *, tile=None, ...)

Defined in a fragment of the `tmakit` library with a fake implementation that is also its Meta
kernel, as every tmakit op (`tmakit.ops`): `copy_` under CompositeExplicitAutograd, returning None
(aot_autograd functionalizes it from `Tensor(a0!) dst`), dst's version counter bumped; `copy` with
an Autograd kernel that calls the real implementation directly for a plain tensor, an
autograd.Function (the identity's gradient) for one that needs a gradient, and redispatches
anything else. The `typed` overloads take each `CopyOptions` field as a typed keyword
(`ops_base.OPTIONS`); `default` takes the options text `CopyOptions.parse` reads, and boxes fewer
arguments. Strict by default: TMA on a Hopper GPU, TmaConfigError for what TMA does not serve
(`tmakit.copy_path` says why); `strict=False` is the functions' call, torch's copy_ there and on
any device (what `tmakit.copy_` and `tmakit.copy` record while torch.compile traces them)."""

from __future__ import annotations

from typing import Any

import torch

from ..ops_base import (
    BELOW_AUTOGRAD,
    NO_OPTIONS,
    OPTIONS,
    PLAIN,
    STRICT,
    BelowAutograd,
    Tensor,
    check_traced,
    check_traced_pair,
    copy_kwargs,
    define,
    gpu_count,
    increment_versions,
    on_its_device,
    op_kwargs,
    op_strict,
    plain_pair,
    refuse_grad,
    refuse_memoryless,
    run_in_place,
    switched_off,
)
from ..overrides import HandedBack
from ..plan import CopyOptions
from ..plan.budget import with_budget
from .api import copy as tma_copy
from .api import copy_ as tma_copy_
from .api import copy_dispatch, new_destination

# Each op with options has two overloads: `default`'s call boxes a few arguments, `typed`'s a
# dozen and more, given or not, which costs host time; a call's option keywords find `typed`.
# copy_'s mode: torch's copy_'s non_blocking, then strict.
MODE = f"bool non_blocking=False, {STRICT}"
SCHEMAS = {
    "copy_": f'copy_(Tensor(a0!) dst, Tensor src, str options="", *, {MODE}) -> ()',
    "copy_.typed": f"copy_.typed(Tensor(a0!) dst, Tensor src, *, {OPTIONS}, {MODE}) -> ()",
    "copy": f'copy(Tensor src, str options="", *, {STRICT}) -> Tensor',
    "copy.typed": f"copy.typed(Tensor src, *, {OPTIONS}, {STRICT}) -> Tensor",
}


# -- copy_ --------------------------------------------------------------------------------------
STRICT_COPIES = copy_dispatch(strict=True)


def copy__impl(
    dst: torch.Tensor, src: torch.Tensor, options: str = "", *, strict: bool = True, **mode: bool
) -> None:
    """Copy `src` into `dst` (`tmakit.copy_` with `options`, `strict` and `non_blocking`, the
    `mode` given). The strict call without options, on one GPU, of tensors that need no autograd
    check (`plain_pair`), goes straight to the strict copy's dispatch: it is the op's repeated
    call."""
    if options or strict is not True or mode or not plain_pair(dst, src) or switched_off():
        if strict is not True:
            refuse_grad("copy_", dst, src)
        run_in_place(
            "copy_", dst, src, tma_copy_, strict=strict and op_strict(), **mode, **copy_kwargs(options)
        )
        return
    STRICT_COPIES.call(dst, src, None, None, with_budget(NO_OPTIONS))  # inside an sm_budget, its
    increment_versions((dst,))


def copy__typed_impl(
    dst: torch.Tensor, src: torch.Tensor, *, strict: bool = True, non_blocking: bool = False, **typed: Any
) -> None:
    """The typed overload's kernel: `tmakit.copy_` with the typed options given, `strict` and
    `non_blocking`."""
    if strict is not True:
        refuse_grad("copy_", dst, src)
    mode = {"non_blocking": True} if non_blocking else {}
    run_in_place("copy_", dst, src, tma_copy_, strict=strict and op_strict(), **mode, **op_kwargs("", typed))


def copy__fake(
    dst: torch.Tensor,
    src: torch.Tensor,
    options: str = "",
    *,
    strict: bool = True,
    non_blocking: bool = False,
    **typed: Any,
) -> None:
    """A trace's check: strict, the pair TMA serves (`check_traced_pair`); else the options alone
    (what serves the call, TMA or torch's copy_, is decided when it runs)."""
    if strict:
        check_traced_pair("copy_", dst, src, op_kwargs(options, typed))
    else:
        CopyOptions.of(**op_kwargs(options, typed))


# -- copy ---------------------------------------------------------------------------------------
def copy_impl(src: torch.Tensor, options: str = "", *, strict: bool = True, **typed: Any) -> torch.Tensor:
    """A new tensor with `src`'s shape, strides and values (`tmakit.copy` with the options and
    `strict`)."""
    if type(src) is not Tensor or src.is_meta:
        refuse_memoryless("copy", src=src)
    if typed or options or strict is not True or gpu_count() > 1:
        return on_its_device(src, tma_copy, src, strict=strict and op_strict(), **op_kwargs(options, typed))
    return tma_copy(src, strict=op_strict())  # the repeated call without options, on one GPU


def copy_fake(src: torch.Tensor, options: str = "", *, strict: bool = True, **typed: Any) -> torch.Tensor:
    """What `tmakit.copy` allocates (`copies.api.new_destination`): `src`'s shape and strides,
    dtype and device (strict: a pair TMA serves, so never an expanded source)."""
    if strict:
        check_traced("copy", src=src)
        check_traced_pair("copy", src, src, op_kwargs(options, typed))
        return torch.empty_strided(src.shape, src.stride(), dtype=src.dtype, device=src.device)
    CopyOptions.of(**op_kwargs(options, typed))
    return new_destination(src)


class CopyFunction(torch.autograd.Function):
    """copy's autograd rule. The forward is the op below autograd (`below`: the Autograd kernel's
    keyset past autograd); the derivative of copy(src) with respect to src is the identity, so
    the gradient is the incoming one. `below`, `options` and `typed` (the typed options) get none."""

    @staticmethod
    def forward(
        ctx: Any, below: torch._C.DispatchKeySet, src: torch.Tensor, options: str, typed: dict[str, Any]
    ) -> torch.Tensor:
        with BelowAutograd():
            return copy_below(below, src, options, typed)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, torch.Tensor, None, None]:
        return None, grad, None, None


def copy_autograd(
    keyset: torch._C.DispatchKeySet, src: torch.Tensor, options: str = "", **typed: Any
) -> torch.Tensor:
    """copy's Autograd kernel: the autograd.Function when src needs a gradient, else the real
    implementation called directly (plain tensors) or the kernels below autograd."""
    if src is None:  # the dispatcher passes None for a Tensor argument
        refuse_memoryless("copy", src=src)
    if src.requires_grad and torch.is_grad_enabled():
        return CopyFunction.apply(keyset & BELOW_AUTOGRAD, src, options, typed)
    if keyset.raw_repr() in PLAIN:
        return copy_impl(src, options, **typed)
    with BelowAutograd():
        return copy_below(keyset & BELOW_AUTOGRAD, src, options, typed)


def copy_below(below: torch._C.DispatchKeySet, src: torch.Tensor, options: str, typed: dict[str, Any]) -> Any:
    """copy redispatched below autograd: the overload it was called as (an option given as a
    keyword: the typed one, which has no options text; `strict` both take)."""
    if typed.keys() - {"strict"}:
        return torch.ops.tmakit.copy.typed.redispatch(below, src, **typed)
    return torch.ops.tmakit.copy.default.redispatch(below, src, options, **typed)


# -- torch's own copy_, overridden (`tmakit.enable`) -----------------------------------------------
NOT_CUDA_PAIR = HandedBack("not two dense CUDA tensors")
NOT_ONE_KIND = HandedBack("a dtype change, a broadcast or two devices")
ONE_LAYOUT = HandedBack("one layout: torch's copy is the memcpy")
LAZY_BIT = HandedBack("a lazily applied bit")


def serve_copy_(dst: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> Any:
    """aten::copy_ on CUDA tensors: a pair of one shape and dtype laid out differently on one GPU
    goes to `tmakit.copy_`'s dispatch (its route: TMA, or torch's copy_ where a rule chose it);
    anything else back to torch's kernel. Below autograd: views that require grad are detached
    (the same memory), and the version counter is torch's to bump. Inside a `tmakit.sm_budget`,
    on its SMs."""
    if not (isinstance(dst, Tensor) and isinstance(src, Tensor) and dst.is_cuda and src.is_cuda):
        return NOT_CUDA_PAIR  # a subclass reaches this key only as a plain one would (a Parameter)
    if dst.dtype != src.dtype or dst.shape != src.shape or dst.get_device() != src.get_device():
        return NOT_ONE_KIND
    if dst.stride() == src.stride():
        return ONE_LAYOUT
    if dst.is_conj() or src.is_conj() or dst.is_neg() or src.is_neg():
        return LAZY_BIT
    written, read = dst, src
    if type(dst) is not Tensor or dst.requires_grad:
        written = dst.detach()  # the same memory, a plain tensor TMA's launch takes
    if type(src) is not Tensor or src.requires_grad:
        read = src.detach()
    # aten::copy_ holds no guard; inside a `tmakit.sm_budget`, on its budget
    on_its_device(written, COPIES.call, written, read, None, None, with_budget(NO_OPTIONS))
    return dst


COPIES = copy_dispatch()
ATEN_OVERRIDES = {"copy_": serve_copy_}


LIBRARY = define(
    SCHEMAS,
    (
        ("copy_", copy__impl, copy__fake),
        ("copy_.typed", copy__typed_impl, copy__fake),
        ("copy", copy_impl, copy_fake),
        ("copy.typed", copy_impl, copy_fake),
    ),
)
LIBRARY.impl("copy", copy_autograd, "Autograd", with_keyset=True)
LIBRARY.impl("copy.typed", copy_autograd, "Autograd", with_keyset=True)
copy_ = torch.ops.tmakit.copy_.default
copy = torch.ops.tmakit.copy.default

__all__ = ["copy", "copy_"]
