"""Reduce stores as a torch operator (registered when `tmakit.ops` is imported):

    torch.ops.tmakit.reduce_into_(dst, src, op="add", *, alpha=1, strict=True) -> None
    torch.ops.tmakit.reduce_into_.typed(dst, src, op="add", *, tile=None, ..., reduce_by=None,
                                        alpha=1, strict=True) -> None

`alpha` is `tmakit.add_`'s (dst += alpha * src, op "add" alone): other than 1, torch's `add_`.

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
from ..errors import TmaConfigError
from ..ops_base import (
    NAMESPACE,
    NO_OPTIONS,
    OPTIONS,
    STRICT,
    TRACING,
    check_traced_pair,
    define,
    increment_versions,
    op_kwargs,
    op_strict,
    plain_pair,
    refuse_grad,
    run_in_place,
    switched_off,
)
from ..plan import check_reduce, reduce_op
from ..plan.budget import with_budget
from .api import add_ as tma_add_
from .api import reduce_dispatch
from .api import reduce_into_ as tma_reduce_into_
from .call import reduce_options
from .plan import check_ring, check_ring_layouts, chosen_kernel

# The reduce's mode: `add_`'s alpha (dst += alpha * src: op "add" alone), then strict.
MODE = f"Scalar alpha=1, {STRICT}"
SCHEMAS = {
    "reduce_into_": f'reduce_into_(Tensor(a0!) dst, Tensor src, str op="add", *, {MODE}) -> ()',
    "reduce_into_.typed": (
        f'reduce_into_.typed(Tensor(a0!) dst, Tensor src, str op="add", *, {OPTIONS}, '
        f"str? reduce_by=None, {MODE}) -> ()"
    ),
}


def reduce_into__impl(
    dst: torch.Tensor, src: torch.Tensor, op: str = "add", *, strict: bool = True, **scaled: object
) -> None:
    """dst = dst op src (`tmakit.reduce_into_` with `strict`, or `tmakit.add_` with the `alpha`
    given; strict, the fake refuses what TMA does not serve, so the eager op does not fall back to
    torch's either), as copy_'s kernel runs."""
    if strict is not True or scaled or not plain_pair(dst, src) or switched_off():
        if strict is not True:
            refuse_grad("reduce_into_", dst, src)
        run_in_place(
            "reduce_into_", dst, src, *scaled_call(op, scaled), strict=strict and op_strict(), **scaled
        )
        return
    reduce_dispatch(op, True, NO_OPTIONS).call(dst, src, None, None, with_budget(NO_OPTIONS))
    increment_versions((dst,))


def reduce_into__typed_impl(
    dst: torch.Tensor, src: torch.Tensor, op: str = "add", *, strict: bool = True, **typed: Any
) -> None:
    """The typed overload's kernel: `tmakit.reduce_into_` (`tmakit.add_` with an `alpha`) with the
    typed options given and `strict`."""
    if strict is not True:
        refuse_grad("reduce_into_", dst, src)
    scaled = {"alpha": typed.pop("alpha")} if "alpha" in typed else {}
    options = op_kwargs("", typed)
    run_in_place(
        "reduce_into_", dst, src, *scaled_call(op, scaled), strict=strict and op_strict(), **scaled, **options
    )


def scaled_call(op: str, scaled: dict[str, object]) -> tuple[Any, ...]:
    """The function an op's call runs and its arguments after the tensors: `tmakit.reduce_into_`
    with `op`, or with an `alpha` (`scaled`) `tmakit.add_`, whose op is "add" (TmaConfigError
    naming another)."""
    if not scaled:
        return (tma_reduce_into_, op)
    if reduce_op(op) != "add":
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.reduce_into_ op={op!r} with alpha={scaled['alpha']!r}: alpha is "
            "add_'s (dst += alpha * src); pass op='add', or no alpha"
        )
    return (tma_add_,)


def reduce_into__fake(
    dst: torch.Tensor, src: torch.Tensor, op: str = "add", *, strict: bool = True, **typed: Any
) -> None:
    """A trace's check: options a reduce takes (`reduce.call.reduce_options`), a kernel it names,
    an `alpha` with op "add" alone; strict, also both tensors on a CUDA device and a pair TMA
    reduces (`plan.check_reduce`, or with `reduce_by="ring"` `reduce.plan.check_ring` and, where
    the strides are static, one layout; an `alpha` other than 1 refused); else an op it names
    (what serves the call is decided when it runs)."""
    kwargs = dict(op_kwargs("", typed))
    scaled = {"alpha": kwargs.pop("alpha")} if "alpha" in kwargs else {}
    kernel = chosen_kernel(kwargs.pop("reduce_by", None))
    reduce_options(kwargs.pop("tile", None), kwargs.pop("stages", None), kwargs)
    scaled_call(op, scaled)
    if not strict:
        reduce_op(op)
        return
    if scaled and scaled["alpha"] != 1:
        raise TmaConfigError(
            f"torch.ops.{NAMESPACE}.reduce_into_ {TRACING}: alpha={scaled['alpha']!r}: TMA's adds take src "
            "as it is (strict=False: torch's add_)"
        )
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
