"""Rows by index as torch operators (registered when `tmakit.ops` is imported):

    torch.ops.tmakit.gather_rows(src, index, *, check_index=True, sms=None, strict=True) -> Tensor
    torch.ops.tmakit.gather_rows.out(src, index, *, out, check_index=True, sms=None, strict=True) -> None
    torch.ops.tmakit.scatter_rows_(dst, index, src, *, check_index=True, sms=None, strict=True) -> None
    torch.ops.tmakit.index_add_(dst, index, src, *, alpha=1, check_index=True, sms=None,
                                strict=True) -> None
    torch.ops.tmakit.index_reduce_(dst, index, src, reduce, *, include_self=True, check_index=True,
                                   sms=None, strict=True) -> None

Each is defined in a fragment of the `tmakit` library with a fake implementation that is also its
Meta kernel (`torch.compile`, `make_fx` and `torch.export` know its output without running it),
and runs `tmakit.api`'s function with the options given. Strict by default, as every tmakit op
(`tmakit.ops`): bulk row copies on a Hopper GPU, TmaConfigError for a tensor off a CUDA device
(eagerly and while tracing) or a call bulk row copies cannot serve (`tmakit.rows_path` says why);
`strict=False` is the function's call, torch's op there and on any device (what
`tmakit.gather_rows` ... record while torch.compile traces them). The in-place ops and `out`
return None (aot_autograd functionalizes them from `Tensor(a0!) dst`); the API bumps the written
tensor's version. The index is checked on the host except inside a CUDA-graph capture
(`tmakit.rows.api`) or with `check_index=False`. Not differentiable: the ops refuse inputs that
require grad while grad mode is on."""

from __future__ import annotations

from typing import Any

import torch

from ..errors import TmaConfigError
from ..ops_base import (
    NAMESPACE,
    STRICT,
    check_traced,
    define,
    on_its_device,
    op_options,
    op_strict,
    refuse_grad,
)
from ..overrides import HandedBack, Unrecoverable
from . import api as api_rows
from .call import kernel_below_autograd
from .plan import INDEX_REDUCES

# The options every rows op takes, as the functions do.
ROWS_MODE = f"bool check_index=True, int? sms=None, {STRICT}"
SCHEMAS = {
    "gather_rows": f"gather_rows(Tensor src, Tensor index, *, {ROWS_MODE}) -> Tensor",
    "gather_rows.out": f"gather_rows.out(Tensor src, Tensor index, *, Tensor(a!) out, {ROWS_MODE}) -> ()",
    "scatter_rows_": f"scatter_rows_(Tensor(a0!) dst, Tensor index, Tensor src, *, {ROWS_MODE}) -> ()",
    "index_add_": (
        f"index_add_(Tensor(a0!) dst, Tensor index, Tensor src, *, Scalar alpha=1, {ROWS_MODE}) -> ()"
    ),
    "index_reduce_": (
        "index_reduce_(Tensor(a0!) dst, Tensor index, Tensor src, str reduce, *, bool include_self=True, "
        f"{ROWS_MODE}) -> ()"
    ),
}


def _check_fake(
    op: str, table: torch.Tensor, index: torch.Tensor, compact: torch.Tensor | None, strict: bool
) -> None:
    """A trace's check (and a strict eager call's, first): strict, every tensor on a CUDA device;
    and what `tmakit.rows.api` checks of shapes, dtypes and devices on every path (the index's
    entries are read only when the op runs)."""
    where = f"torch.ops.{NAMESPACE}.{op}"
    if strict:
        check_traced(op, **{"src" if compact is None else "dst": table, "index": index})
        if compact is not None:
            check_traced(op, src=compact)
    if index.dtype not in (torch.int32, torch.int64) or index.dim() > 1:
        raise TmaConfigError(
            f"{where}: index is {tuple(index.shape)} {index.dtype}; it takes a 1-D int32 or int64 index"
        )
    if index.device != table.device:
        raise TmaConfigError(f"{where}: index is on {index.device} and the table on {table.device}")
    if compact is not None and table.dim():
        expected = (index.numel(), *table.shape[1:])
        if tuple(compact.shape) != expected or compact.dtype != table.dtype or compact.device != table.device:
            name = "out" if op == "gather_rows" else "src"
            raise TmaConfigError(
                f"{where}: {name} is {tuple(compact.shape)} {compact.dtype} on {compact.device}; for this "
                f"index and table it must be {expected} {table.dtype} on {table.device}"
            )


def _strict_check(op: str, strict: bool, **tensors: torch.Tensor) -> None:
    """An eager call's first checks: no tensor autograd would record; strict, each on a CUDA device."""
    refuse_grad(op, *tensors.values())
    if strict:
        check_traced(op, **tensors)


def gather_rows_impl(
    src: torch.Tensor,
    index: torch.Tensor,
    *,
    check_index: bool = True,
    sms: int | None = None,
    strict: bool = True,
) -> torch.Tensor:
    _strict_check("gather_rows", strict, src=src, index=index)
    mode = {"check_index": check_index, "sms": sms, "strict": strict and op_strict()}
    return api_rows.gather_rows(src, index, **mode)


def gather_rows_out_impl(
    src: torch.Tensor,
    index: torch.Tensor,
    *,
    out: torch.Tensor,
    check_index: bool = True,
    sms: int | None = None,
    strict: bool = True,
) -> None:
    _strict_check("gather_rows", strict, src=src, index=index, out=out)
    mode = {"check_index": check_index, "sms": sms, "strict": strict and op_strict()}
    api_rows.gather_rows(src, index, out, **mode)


def gather_rows_fake(
    src: torch.Tensor,
    index: torch.Tensor,
    *,
    check_index: bool = True,
    sms: int | None = None,
    strict: bool = True,
) -> torch.Tensor:
    _check_fake("gather_rows", src, index, None, strict)
    return src.new_empty((index.numel(), *src.shape[1:]) if src.dim() else ())


def gather_rows_out_fake(
    src: torch.Tensor,
    index: torch.Tensor,
    *,
    out: torch.Tensor,
    check_index: bool = True,
    sms: int | None = None,
    strict: bool = True,
) -> None:
    _check_fake("gather_rows", src, index, out, strict)


def scatter_rows__impl(dst: torch.Tensor, index: torch.Tensor, src: torch.Tensor, **options: bool) -> None:
    _strict_check("scatter_rows_", options.get("strict", True), dst=dst, index=index, src=src)
    api_rows.scatter_rows_(dst, index, src, **op_options(options))


def index_add__impl(dst: torch.Tensor, index: torch.Tensor, src: torch.Tensor, **options: object) -> None:
    _strict_check("index_add_", options.get("strict", True), dst=dst, index=index, src=src)
    api_rows.index_add_(dst, index, src, **op_options(options))


def index_reduce__impl(
    dst: torch.Tensor, index: torch.Tensor, src: torch.Tensor, reduce: str, **options: bool
) -> None:
    _strict_check("index_reduce_", options.get("strict", True), dst=dst, index=index, src=src)
    api_rows.index_reduce_(dst, index, src, reduce, **op_options(options))


def in_place_fake(op: str):
    def fake(
        dst: torch.Tensor, index: torch.Tensor, src: torch.Tensor, *reduce: str, **options: object
    ) -> None:
        if reduce and reduce[0] not in api_rows.TORCH_REDUCES:
            takes = ", ".join(api_rows.TORCH_REDUCES)
            raise TmaConfigError(f"torch.ops.{NAMESPACE}.{op}: reduce={reduce[0]!r}; it takes {takes}")
        _check_fake(op, dst, index, src, options.get("strict", True))

    return fake


# -- torch's own rows ops, overridden (`tmakit.enable`) ----------------------------------------------
NOT_CUDA = HandedBack("not dense CUDA tensors")
NOT_ROWS = HandedBack("not rows of dim 0 by a 1-D index")
STRIDED_INDEX = HandedBack("an index whose entries are not one run")
NOT_TAKEN = HandedBack("an index dtype or a lazily applied bit torch's kernel serves")
DETERMINISTIC = HandedBack("deterministic algorithms are on: torch's op orders the writes of a repeated row")
NOT_ITS_SOURCE = HandedBack("a source of another dtype or shape (torch's op names it)")
SHARED_MEMORY = HandedBack("tensors that share memory, or a written tensor with overlapping rows")
ALPHA = HandedBack("alpha other than 1")
REDUCE = HandedBack("a reduce other than amax and amin, or include_self=False")
# The override replaces the kernel whose checks refuse what torch's op refuses: so is it refused.
INT32_COPY_INDEX = HandedBack("an int32 index, which torch's index_copy_ refuses (int64 alone)")
NOT_TORCHS_DTYPE = HandedBack("a dtype torch's CUDA kernel for the op does not take (its refusal stands)")
# The dtypes torch's CUDA kernels of the written ops dispatch on, by the rows op serving them: the
# route moves some that torch refuses (uint32/uint64 sums, float8 rows), which stay refused.
_STANDARD = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
             torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)  # fmt: skip
TORCH_DTYPES = {
    "scatter": _STANDARD,
    "add": _STANDARD,
    "max": tuple(d for d in _STANDARD if not d.is_complex and d is not torch.bool),
    "min": tuple(d for d in _STANDARD if not d.is_complex and d is not torch.bool),
}


class AddedBeforeRaising(Unrecoverable):
    """A served add raised once its kernel was launched: handing the call to torch's kernel could
    add the rows twice, so the error is raised (`overrides` hands back every other failure)."""


def on_cuda(*tensors: object) -> bool:
    """Whether every argument is a torch tensor on a CUDA device (what the overrides serve)."""
    return all(isinstance(tensor, torch.Tensor) and tensor.is_cuda for tensor in tensors)


def _rows_handed_back(table: object, dim: object, index: object, *others: object) -> HandedBack | None:
    """Why an aten rows call on these arguments goes back to torch's kernel before any route is
    read: not CUDA tensors, not dim 0 by a 1-D index of one run, an index dtype or a lazily applied
    bit the kernels do not take. None: the route decides."""
    if not on_cuda(table, index, *others):
        return NOT_CUDA  # a subclass reaches this key only as a plain one would (an embedding's Parameter)
    if table.dim() == 0 or dim not in (0, -table.dim()) or index.dim() != 1:
        return NOT_ROWS
    if index.stride(0) != 1 and index.shape[0] > 1:
        return STRIDED_INDEX  # the kernel reads the index as one run
    if index.dtype not in (torch.int32, torch.int64):
        return NOT_TAKEN
    if any(tensor.is_conj() or tensor.is_neg() for tensor in (table, *others)):
        return NOT_TAKEN
    return None


def _plain(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's memory without autograd's record: below autograd the call is recorded already."""
    return tensor.detach() if type(tensor) is not torch.Tensor or tensor.requires_grad else tensor


def _launched(tensor: torch.Tensor, kernel: Any, adds: bool = False) -> None:
    """A kernel of `kernel_below_autograd` launched under the guard of `tensor`'s GPU (the kernel
    an override replaced held it). `adds`: a failure is raised as `AddedBeforeRaising`, never
    handed back (a copy, a min or a max run again changes nothing; an add does)."""
    if not adds:
        on_its_device(tensor, kernel)
        return
    try:
        on_its_device(tensor, kernel)
    except Exception as error:
        raise AddedBeforeRaising(f"tmakit's index_add_ failed at its launch: {error}") from error


def serve_index_select(table: torch.Tensor, dim: int, index: torch.Tensor) -> object:
    """aten::index_select on CUDA tensors along dim 0 with a 1-D index: where the rows route
    takes bulk row copies (`rows.plan.rows_route`), a gather into a new tensor, the index's
    range asserted on the device as torch's kernel does (no host synchronisation); anything else
    back to torch's kernel."""
    handed = _rows_handed_back(table, dim, index)
    if handed is not None:
        return handed
    table = _plain(table)
    out = table.new_empty((index.shape[0], *table.shape[1:]))
    kernel = kernel_below_autograd("gather", table, index, out)
    if type(kernel) is str:
        return HandedBack(kernel)
    _launched(table, kernel)
    return out


def _into_handed_back(op: str, dst: object, dim: object, index: object, source: object) -> HandedBack | None:
    """`_rows_handed_back` for an op writing dst's rows from source's (`op`, the rows op), and what
    such an op hands back besides: a dtype torch's kernel refuses, deterministic mode (torch's ops
    have deterministic forms), a source torch's op refuses, memory shared between the tensors."""
    handed = _rows_handed_back(dst, dim, index, source)
    if handed is not None:
        return handed
    if dst.dtype not in TORCH_DTYPES[op]:
        return NOT_TORCHS_DTYPE
    if torch.are_deterministic_algorithms_enabled():
        return DETERMINISTIC
    if source.dtype != dst.dtype or tuple(source.shape) != (index.shape[0], *dst.shape[1:]):
        return NOT_ITS_SOURCE
    storage = dst.untyped_storage().data_ptr()
    if (
        storage in (source.untyped_storage().data_ptr(), index.untyped_storage().data_ptr())
        or torch._debug_has_internal_overlap(dst) == 1
    ):
        return SHARED_MEMORY  # torch's op refuses these, naming them
    return None


def _serve_into(op: str, dst: object, dim: object, index: object, source: object) -> object:
    """An in-place aten rows op writing dst's rows from source's by index (`op`: "scatter",
    "add", "min", "max"): where the rows route takes the call, the kernel, dst returned; else
    back to torch's kernel, nothing written."""
    handed = _into_handed_back(op, dst, dim, index, source)
    if handed is not None:
        return handed
    kernel = kernel_below_autograd(op, _plain(dst), index, _plain(source))
    if type(kernel) is str:
        return HandedBack(kernel)
    _launched(dst, kernel, adds=op == "add")  # the last step
    return dst


def serve_index_copy_(dst: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor) -> object:
    """aten::index_copy_ on CUDA tensors along dim 0: the rows route's bulk row copies where it
    takes them (`_serve_into`); an int32 index to torch's kernel, which refuses it."""
    if isinstance(index, torch.Tensor) and index.dtype == torch.int32:
        return INT32_COPY_INDEX
    return _serve_into("scatter", dst, dim, index, source)


def serve_index_add_(
    dst: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, alpha: object = 1
) -> object:
    """aten::index_add_ on CUDA tensors along dim 0 with alpha 1: the rows route's bulk reduce
    adds where it takes them (`_serve_into`)."""
    if type(alpha) is bool or alpha != 1:
        return ALPHA
    return _serve_into("add", dst, dim, index, source)


def serve_index_add(
    table: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, alpha: object = 1
) -> object:
    """aten::index_add (the out-of-place form: `torch.index_add`, and index_select's backward
    under a dispatch mode or for a tensor subclass) on CUDA tensors along dim 0 with alpha 1: a
    contiguous copy of `table`, then the bulk reduce adds where the rows route takes them;
    anything else back to torch's kernel, before the copy."""
    if type(alpha) is bool or alpha != 1:
        return ALPHA
    handed = _into_handed_back("add", table, dim, index, source)
    if handed is not None:
        return handed
    out = torch.empty(table.shape, dtype=table.dtype, device=table.device)  # torch's op's layout
    kernel = kernel_below_autograd("add", out, index, _plain(source))
    if type(kernel) is str:
        return HandedBack(kernel)
    out.copy_(_plain(table))  # torch's kernel: the guard sends a serve's own aten calls there
    _launched(out, kernel)  # a new tensor: a failure handed back recomputes it whole
    return out


def serve_index_reduce_(
    dst: torch.Tensor,
    dim: int,
    index: torch.Tensor,
    source: torch.Tensor,
    reduce: str,
    include_self: bool = True,
) -> object:
    """aten::index_reduce_ on CUDA tensors along dim 0, "amax" or "amin" including dst's rows:
    the rows route's bulk reduce where it takes them (`_serve_into`)."""
    if reduce not in INDEX_REDUCES or not include_self:
        return REDUCE
    return _serve_into(INDEX_REDUCES[reduce], dst, dim, index, source)


ATEN_OVERRIDES = {
    "index_select": serve_index_select,
    "index_copy_": serve_index_copy_,
    "index_add_": serve_index_add_,
    "index_add": serve_index_add,
    "index_reduce_": serve_index_reduce_,
}


LIBRARY = define(
    SCHEMAS,
    (
        ("gather_rows", gather_rows_impl, gather_rows_fake),
        ("gather_rows.out", gather_rows_out_impl, gather_rows_out_fake),
        ("scatter_rows_", scatter_rows__impl, in_place_fake("scatter_rows_")),
        ("index_add_", index_add__impl, in_place_fake("index_add_")),
        ("index_reduce_", index_reduce__impl, in_place_fake("index_reduce_")),
    ),
)
gather_rows = torch.ops.tmakit.gather_rows.default
scatter_rows_ = torch.ops.tmakit.scatter_rows_.default
index_add_ = torch.ops.tmakit.index_add_.default
index_reduce_ = torch.ops.tmakit.index_reduce_.default

__all__ = ["gather_rows", "index_add_", "index_reduce_", "scatter_rows_"]
