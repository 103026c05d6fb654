"""Reduce stores as a torch operator (registered when `tmakit.ops` is imported):

    torch.ops.tmakit.reduce_into_(dst, src, op="add") -> None
    torch.ops.tmakit.reduce_into_.typed(dst, src, op="add", *, tile=None, ..., reduce_by=None) -> None

Defined in a fragment of the `tmakit` library with a fake implementation that is also its Meta
kernel, as `tmakit.ops` defines `copy_`: under CompositeExplicitAutograd, returning None
(aot_autograd functionalizes it from `Tensor(a0!) dst`), dst's version counter bumped. The
`typed` overload takes each `CopyOptions` field as a typed keyword (`ops_base.OPTIONS`) and
`reduce_by`; `default` boxes fewer arguments. Strict, as every tmakit op (`tmakit.ops`): TMA on a
Hopper GPU, TmaConfigError for what TMA does not serve (`tmakit.reduce_path` says why; the
function `tmakit.reduce_into_` takes torch's op there)."""

from __future__ import annotations

from typing import Any

import torch

from ..config import dtype_of
from ..ops_base import (
    NO_OPTIONS,
    OPTIONS,
    check_traced_pair,
    define,
    increment_versions,
    op_kwargs,
    op_strict,
    plain_pair,
    run_in_place,
    switched_off,
)
from ..plan import check_reduce
from .api import reduce_dispatch
from .api import reduce_into_ as tma_reduce_into_
from .call import reduce_options
from .plan import check_ring, check_ring_layouts, chosen_kernel

SCHEMAS = {
    "reduce_into_": 'reduce_into_(Tensor(a0!) dst, Tensor src, str op="add") -> ()',
    "reduce_into_.typed": (
        f'reduce_into_.typed(Tensor(a0!) dst, Tensor src, str op="add", *, {OPTIONS}, '
        "str? reduce_by=None) -> ()"
    ),
}


def reduce_into__impl(dst: torch.Tensor, src: torch.Tensor, op: str = "add") -> None:
    """dst = dst op src through TMA (`tmakit.reduce_into_`, strict: the fake refuses what TMA does
    not serve, so the eager op does not fall back to torch's either), as copy_'s kernel runs."""
    if not plain_pair(dst, src) or switched_off():
        run_in_place("reduce_into_", dst, src, tma_reduce_into_, op, strict=op_strict())
        return
    reduce_dispatch(op, True, NO_OPTIONS).call(dst, src, None, None, NO_OPTIONS)
    increment_versions((dst,))


def reduce_into__typed_impl(dst: torch.Tensor, src: torch.Tensor, op: str = "add", **typed: Any) -> None:
    """The typed overload's kernel: `tmakit.reduce_into_` with the typed options given, strict."""
    run_in_place("reduce_into_", dst, src, tma_reduce_into_, op, strict=op_strict(), **op_kwargs("", typed))


def reduce_into__fake(dst: torch.Tensor, src: torch.Tensor, op: str = "add", **typed: Any) -> None:
    """A trace's check: both tensors on a CUDA device, a pair TMA reduces (`plan.check_reduce`, or
    with `reduce_by="ring"` `reduce.plan.check_ring` and, where the strides are static, one
    layout) and options a reduce takes (`reduce.call.reduce_options`)."""
    kwargs = dict(op_kwargs("", typed))
    kernel = chosen_kernel(kwargs.pop("reduce_by", None))
    (check_ring if kernel == "ring" else check_reduce)(op, dtype_of(src.dtype))
    reduce_options(kwargs.pop("tile", None), kwargs.pop("stages", None), kwargs)
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
