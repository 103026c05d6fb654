"""Reduce stores as a torch operator (registered when `tmakit.ops` is imported):

    torch.ops.tmakit.reduce_into_(dst, src, op="add", *, strict=True) -> None
    torch.ops.tmakit.reduce_into_.typed(dst, src, op="add", *, tile=None, ..., reduce_by=None,
                                        strict=True) -> None

Defined in a fragment of the `tmakit` library with a fake implementation that is also its Meta
kernel, as `tmakit.ops` defines `copy_`: under CompositeExplicitAutograd, returning None
(aot_autograd functionalizes it from `Tensor(a0!) dst`), dst's version counter bumped. The
`typed` overload takes each `CopyOptions` field as a typed keyword (`ops_base.OPTIONS`) and
`reduce_by`; `default` boxes fewer arguments. Strict by default, as every tmakit op
(`tmakit.ops`): TMA on a Hopper GPU, TmaConfigError for what TMA does not serve
(`tmakit.reduce_path` says why); `strict=False` is the function's call, torch's op there and on any
device (what `tmakit.reduce_into_` and `tmakit.add_` record while torch.compile traces them)."""

from __future__ import annotations

from typing import Any

import torch

from ..config import dtype_of
from ..ops_base import (
    NO_OPTIONS,
    OPTIONS,
    STRICT,
    check_traced_pair,
    define,
    increment_versions,
    op_kwargs,
    plain_pair,
    refuse_grad,
    run_in_place,
)
from ..plan import check_reduce, reduce_op
from .api import reduce_dispatch
from .api import reduce_into_ as tma_reduce_into_
from .call import reduce_options
from .plan import check_ring, check_ring_layouts, chosen_kernel

SCHEMAS = {
    "reduce_into_": f'reduce_into_(Tensor(a0!) dst, Tensor src, str op="add", *, {STRICT}) -> ()',
    "reduce_into_.typed": (
        f'reduce_into_.typed(Tensor(a0!) dst, Tensor src, str op="add", *, {OPTIONS}, '
        f"str? reduce_by=None, {STRICT}) -> ()"
    ),
}


def reduce_into__impl(dst: torch.Tensor, src: torch.Tensor, op: str = "add", *, strict: bool = True) -> None:
    """dst = dst op src (`tmakit.reduce_into_` with `strict`; strict, the fake refuses what TMA does
    not serve, so the eager op does not fall back to torch's either), as copy_'s kernel runs."""
    if strict is not True or not plain_pair(dst, src):
        if strict is not True:
            refuse_grad("reduce_into_", dst, src)
        run_in_place("reduce_into_", dst, src, tma_reduce_into_, op, strict=strict)
        return
    reduce_dispatch(op, True, NO_OPTIONS).call(dst, src, None, None, NO_OPTIONS)
    increment_versions((dst,))


def reduce_into__typed_impl(
    dst: torch.Tensor, src: torch.Tensor, op: str = "add", *, strict: bool = True, **typed: Any
) -> None:
    """The typed overload's kernel: `tmakit.reduce_into_` with the typed options given and `strict`."""
    if strict is not True:
        refuse_grad("reduce_into_", dst, src)
    run_in_place("reduce_into_", dst, src, tma_reduce_into_, op, strict=strict, **op_kwargs("", typed))


def reduce_into__fake(
    dst: torch.Tensor, src: torch.Tensor, op: str = "add", *, strict: bool = True, **typed: Any
) -> None:
    """A trace's check: options a reduce takes (`reduce.call.reduce_options`) and a kernel it
    names; strict, also both tensors on a CUDA device and a pair TMA reduces (`plan.check_reduce`,
    or with `reduce_by="ring"` `reduce.plan.check_ring` and, where the strides are static, one
    layout); else an op it names (what serves the call is decided when it runs)."""
    kwargs = dict(op_kwargs("", typed))
    kernel = chosen_kernel(kwargs.pop("reduce_by", None))
    reduce_options(kwargs.pop("tile", None), kwargs.pop("stages", None), kwargs)
    if not strict:
        reduce_op(op)
        return
    (check_ring if kernel == "ring" else check_reduce)(op, dtype_of(src.dtype))
    check_traced_pair("reduce_into_", dst, src, {}, check_ring_layouts if kernel == "ring" else None)


LIBRARY = define(
    SCHEMAS,
    (
        ("reduce_into_", reduce_into__impl, reduce_into__fake),
        ("reduce_into_.typed", reduce_into__typed_impl, reduce_into__fake),
    ),
)
reduce_into_ = torch.ops.tmakit.reduce_into_.default

__all__ = ["reduce_into_"]
