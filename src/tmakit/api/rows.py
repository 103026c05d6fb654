"""Rows by index: `gather_rows`, `scatter_rows_`, `index_add_`, `index_reduce_` (dim 0, as torch's
`index_select`, `index_copy_`, `index_add_`, `index_reduce_`) through bulk row copies
(`kernels.rows`), torch's op where they cannot serve (`rows_path` says which and why).

Every call checks its tensors first (`TmaConfigError`: value, rule, fix). The index is checked
against the table's rows on the host (`check_index=True`, the default: one reduction and a
synchronisation, a few microseconds, so a bad entry raises instead of killing the process as
torch's device assert does). Without it (and always inside a CUDA-graph capture, where nothing
may synchronise) the kernel checks each entry before it forms an address: an entry outside
[0, rows) moves nothing, so nothing outside the tensors is read or written, and its row keeps what
it held.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..config import dtype_of
from ..errors import TmaConfigError
from ..limits import GLOBAL_BASE_ALIGN
from ..plan.rows import (
    DEFAULT_ROW_STAGES,
    INDEX_REDUCES,
    RowsFacts,
    RowsPlan,
    rows_tma_rule,
)
from ..runtime.launch import rows_launcher
from ..validate import flag
from .tensors import (
    check_torch_tensor,
    cuda_index,
    device_facts,
    dtype_name,
    import_torch,
    lazy_bit,
    recorded_by_autograd,
)

if TYPE_CHECKING:
    import torch

__all__ = ["gather_rows", "index_add_", "index_reduce_", "rows_path", "scatter_rows_"]

TORCH_REDUCES = ("prod", "mean", "amax", "amin")  # what torch's index_reduce_ takes
ZERO_D = "a 0-D table, which torch's op takes as one row of one element"


def gather_rows(
    src: torch.Tensor,
    index: torch.Tensor,
    out: torch.Tensor | None = None,
    *,
    check_index: bool = True,
    strict: bool = False,
) -> torch.Tensor:
    """`src.index_select(0, index)`: the rows of `src` that `index` names, in its order.

    Args:
        src: the table, rank >= 1, its rows contiguous for the TMA path.
        index: 1-D (or 0-D) int32 or int64 tensor on `src`'s device; entries in [0, len(src)).
        out: the result, (len(index), *src.shape[1:]) of src's dtype (allocated when None).
        check_index: check every entry on the host first (a synchronisation); skipped inside a
            CUDA-graph capture. Unchecked, an entry out of range leaves its row of `out` as it was.
        strict: raise instead of taking torch's op where bulk row copies cannot serve.

    Returns:
        `out`.

    Raises:
        TmaConfigError: a tensor, dtype, shape or device the op does not take; an index entry out
            of range (with `check_index`); with `strict`, why bulk row copies cannot serve.
    """
    torch = import_torch("gather_rows")
    check_index, strict = _flags("gather_rows", check_index, strict)
    index = _checked_index(index, src, "gather_rows")
    if src.dim() == 0:  # torch's op takes a 0-D tensor as one row; so does this
        _refuse_strict(strict, "gather_rows", ZERO_D)
        if out is None:
            out = torch.empty((), dtype=src.dtype, device=src.device)
        _torch_op(torch.index_select, src, 0, index, out=out)
        return out
    if out is None:
        out = torch.empty((index.numel(), *src.shape[1:]), dtype=src.dtype, device=src.device)
    if not _known_call("gather", src, index, out, check_index, strict):
        _rows_call("gather", src, index, out, check_index, strict)
    return out


def scatter_rows_(
    dst: torch.Tensor,
    index: torch.Tensor,
    src: torch.Tensor,
    *,
    check_index: bool = True,
    strict: bool = False,
) -> torch.Tensor:
    """`dst.index_copy_(0, index, src)`: row i of `src` into row `index[i]` of `dst` (with repeated
    entries, which one lands is not defined, as in torch).

    Args:
        dst: the table written, rank >= 1.
        index: 1-D int32 or int64, entries in [0, len(dst)).
        src: (len(index), *dst.shape[1:]), dst's dtype.
        check_index: as `gather_rows`'s (unchecked, an out-of-range entry writes nothing).
        strict: as `gather_rows`'s.

    Returns:
        `dst`.

    Raises:
        TmaConfigError: as `gather_rows`.
    """
    check_index, strict = _flags("scatter_rows_", check_index, strict)
    if not _known_call("scatter", dst, index, src, check_index, strict):
        _rows_call("scatter", dst, _checked_index(index, dst, "scatter_rows_"), src, check_index, strict)
    return dst


def index_add_(
    dst: torch.Tensor,
    index: torch.Tensor,
    src: torch.Tensor,
    *,
    alpha: int | float = 1,
    check_index: bool = True,
    strict: bool = False,
) -> torch.Tensor:
    """`dst.index_add_(0, index, src, alpha=alpha)`: row i of `src` added into row `index[i]` of
    `dst` by the bulk reduce, each element's add atomic, so repeated entries all count (float
    adds in an order the GPU picks, as torch's atomic adds).

    Args:
        dst: the table, rank >= 1; the bulk reduce adds int32, int64, uint32, uint64, float32,
            float16 and bfloat16 (others, and `alpha` other than 1, take torch's op).
        index: 1-D int32 or int64, entries in [0, len(dst)).
        src: (len(index), *dst.shape[1:]), dst's dtype.
        alpha: the multiplier of `src`.
        check_index: as `gather_rows`'s (unchecked, an out-of-range entry adds nothing).
        strict: as `gather_rows`'s.

    Returns:
        `dst`.

    Raises:
        TmaConfigError: as `gather_rows`.
    """
    check_index, strict = _flags("index_add_", check_index, strict)
    if not isinstance(alpha, numbers.Real):
        raise TmaConfigError(f"index_add_'s alpha is {alpha!r} ({type(alpha).__name__}); it must be a number")
    alpha = int(alpha) if isinstance(alpha, numbers.Integral) else float(alpha)
    if alpha == 1 and _known_call("add", dst, index, src, check_index, strict):
        return dst
    index = _checked_index(index, dst, "index_add_")
    if alpha != 1:
        _refuse_strict(strict, "index_add_", f"alpha={alpha}: the bulk reduce adds the rows as they are")
        if dst.dim():
            _check_rows("add", dst, index, src)
            _check_entries_unless_capturing(index, dst.shape[0], check_index)
        _torch_op(dst.index_add_, 0, index, src, alpha=alpha)
        return dst
    _rows_call("add", dst, index, src, check_index, strict)
    return dst


def index_reduce_(
    dst: torch.Tensor,
    index: torch.Tensor,
    src: torch.Tensor,
    reduce: str,
    *,
    include_self: bool = True,
    check_index: bool = True,
    strict: bool = False,
) -> torch.Tensor:
    """`dst.index_reduce_(0, index, src, reduce, include_self=include_self)`: "amax" and "amin"
    of int32, int64, uint32 and uint64 rows by the bulk reduce (signed types compared signed);
    "prod", "mean", floats and `include_self=False` take torch's op.

    Args:
        dst: the table, rank >= 1.
        index: 1-D int32 or int64, entries in [0, len(dst)).
        src: (len(index), *dst.shape[1:]), dst's dtype.
        reduce: "amax", "amin", "prod" or "mean".
        include_self: whether `dst`'s rows take part (the bulk reduce's only form).
        check_index: as `gather_rows`'s.
        strict: as `gather_rows`'s.

    Returns:
        `dst`.

    Raises:
        TmaConfigError: as `gather_rows`; a `reduce` torch does not name.
    """
    check_index, strict = _flags("index_reduce_", check_index, strict)
    include_self = flag(include_self, "index_reduce_'s include_self")
    known = type(reduce) is str and reduce in INDEX_REDUCES and include_self
    if known and _known_call(INDEX_REDUCES[reduce], dst, index, src, check_index, strict):
        return dst
    index = _checked_index(index, dst, "index_reduce_")
    if type(reduce) is not str or reduce not in TORCH_REDUCES:
        raise TmaConfigError(
            f"index_reduce_ reduce={reduce!r}: torch's index_reduce_ takes {', '.join(TORCH_REDUCES)}"
        )
    reason = None
    if reduce not in INDEX_REDUCES:
        reason = f"reduce={reduce!r}: the bulk reduce has no {reduce}"
    elif not include_self:
        reason = "include_self=False: the bulk reduce always reduces into dst's rows"
    if reason is not None:
        _refuse_strict(strict, "index_reduce_", reason)
        if dst.dim():
            _check_rows("reduce", dst, index, src)
            _check_entries_unless_capturing(index, dst.shape[0], check_index)
        _torch_op(dst.index_reduce_, 0, index, src, reduce, include_self=include_self)
        return dst
    _rows_call(INDEX_REDUCES[reduce], dst, index, src, check_index, strict)
    return dst


def rows_path(op: str, table: torch.Tensor, index: torch.Tensor, compact: torch.Tensor) -> str:
    """The path a rows call takes: "tma-rows-bulk", or "torch" and why.

    Args:
        op: "gather", "scatter", "add", "min" or "max".
        table: the indexed tensor (a gather's `src`, the others' `dst`).
        index: the index.
        compact: a gather's `out`, the others' `src`.

    Returns:
        "tma-rows-bulk (...)" or "torch (the rule that failed)".

    Raises:
        TmaConfigError: as `gather_rows`.
    """
    index = _checked_index(index, table, "rows_path")
    _check_rows(op, table, index, compact)
    rule = rows_tma_rule(_facts(op, table, index, compact))
    return "tma-rows-bulk (one bulk copy per row)" if rule is None else f"torch ({rule})"


# -- the call -----------------------------------------------------------------------------------
_TORCH_OPS = {
    "gather": lambda table, index, compact: torch_module().index_select(table, 0, index, out=compact),
    "scatter": lambda table, index, compact: table.index_copy_(0, index, compact),
    "add": lambda table, index, compact: table.index_add_(0, index, compact),
    "min": lambda table, index, compact: table.index_reduce_(0, index, compact, "amin"),
    "max": lambda table, index, compact: table.index_reduce_(0, index, compact, "amax"),
}


def torch_module():
    global _TENSOR_TYPE
    torch = import_torch("rows")
    _TENSOR_TYPE = torch.Tensor
    return torch


_TENSOR_TYPE = None  # torch.Tensor once torch is imported (a known call is a plain tensor's)


def _rows_call(
    op: str, table: torch.Tensor, index: torch.Tensor, compact: torch.Tensor, check_index: bool, strict: bool
) -> None:
    """Check, route and run one rows call (a 0-D table: torch's op, which takes it as a row)."""
    if table.dim() == 0:
        _refuse_strict(strict, f"rows op {op}", ZERO_D)
        _torch_op(_TORCH_OPS[op], table, index, compact)
        return
    _check_rows(op, table, index, compact)
    if not index.numel():
        return
    rule = rows_tma_rule(_facts(op, table, index, compact), strict)
    if rule is not None:
        _refuse_strict(strict, f"rows op {op}", rule)
        _check_entries_unless_capturing(index, table.shape[0], check_index)
        _torch_op(_TORCH_OPS[op], table, index, compact)
        return
    row_bytes = table.element_size() * _row_elements(table)
    dtype = None if op in ("gather", "scatter") else dtype_of(dtype_name(table.dtype))
    launch = _launcher(op, row_bytes, dtype, dtype_name(index.dtype), table.get_device())
    if index.dim() == 1:
        if len(_KNOWN) >= _KNOWN_MOST:  # index lengths vary: keep the table bounded
            _KNOWN.clear()
        _KNOWN[_call_key(op, table, index, compact, strict)] = launch
    _launch(launch, op, table, index, compact, check_index)


# Calls whose checks and route passed, by everything those read (`_call_key`): a repeated call
# skips them. Tensors that require grad, lazily applied bits or one storage take the full path.
_KNOWN: dict[tuple, Callable] = {}
_KNOWN_MOST = 1024


def _call_key(op: str, table, index, compact, strict: bool) -> tuple:
    return (
        op,
        strict,
        table.shape,
        table.stride(),
        compact.shape,
        compact.stride(),
        index.shape,
        index.stride(),
        table.dtype,
        compact.dtype,
        index.dtype,
        table.device,
        index.device,
        compact.device,
        table.data_ptr() % GLOBAL_BASE_ALIGN,
        compact.data_ptr() % GLOBAL_BASE_ALIGN,
    )


def _known_call(op: str, table, index, compact, check_index: bool, strict: bool) -> bool:
    """Run a call whose key was served before (True), else nothing (False)."""
    tensor = _TENSOR_TYPE
    if (
        tensor is None
        or type(table) is not tensor
        or type(index) is not tensor
        or type(compact) is not tensor
    ):
        return False
    if table.requires_grad or compact.requires_grad or table.is_neg() or compact.is_neg():
        return False
    if table.is_conj() or compact.is_conj():
        return False
    launch = _KNOWN.get(_call_key(op, table, index, compact, strict))
    if launch is None or table.untyped_storage().data_ptr() == compact.untyped_storage().data_ptr():
        return False
    _launch(launch, op, table, index, compact, check_index)
    return True


def _launch(launch: Callable, op: str, table, index, compact, check_index: bool) -> None:
    """The index checked (unless not asked, or inside a capture), the kernel launched on the
    tensors' bytes, the table's version bumped where it was written."""
    torch = torch_module()
    _check_entries_unless_capturing(index, table.shape[0], check_index)
    launch(_byte_rows(table), index, _byte_rows(compact))
    torch.autograd.graph.increment_version(compact if op == "gather" else table)


@functools.lru_cache(maxsize=256)
def _launcher(op: str, row_bytes: int, dtype: str | None, index_dtype: str, device: int):
    """The compiled rows kernel for one (op, row size, reduce dtype, index dtype) on one device:
    the deepest ring of up to `DEFAULT_ROW_STAGES` stages that fits."""
    sm_count, _ = device_facts(torch_module().device("cuda", device))
    for stages in range(DEFAULT_ROW_STAGES, 0, -1):
        try:
            plan = RowsPlan(op, 1, row_bytes, 1 << 20, stages=stages, sm_count=sm_count, dtype=dtype)
        except TmaConfigError:
            if stages == 1:
                raise
            continue
        return rows_launcher(
            plan.kernel_plan(), "int64" if index_dtype == "int64" else "int32", f"cuda:{device}"
        )
    raise AssertionError("unreachable")


def _byte_rows(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor`'s memory as (rows, row bytes) uint8 with its row stride (its rows contiguous)."""
    return tensor.view(tensor.shape[0], _row_elements(tensor)).view(torch_module().uint8)


def _row_elements(tensor: torch.Tensor) -> int:
    count = 1
    for extent in tensor.shape[1:]:
        count *= extent
    return count


# -- checks -------------------------------------------------------------------------------------
def _checked_index(index: object, table: object, what: str) -> torch.Tensor:
    """The index as a 1-D int32 or int64 tensor on the table's device."""
    check_torch_tensor(table, what, "the table")
    check_torch_tensor(index, what, "index")
    torch = torch_module()
    if index.dtype not in (torch.int32, torch.int64):
        raise TmaConfigError(
            f"index is {index.dtype}; {what} takes an int32 or int64 index (convert it with .long())"
        )
    if index.dim() > 1:
        raise TmaConfigError(f"index has shape {tuple(index.shape)}; {what} takes a 1-D index (.reshape(-1))")
    if index.device != table.device:
        raise TmaConfigError(
            f"index is on {index.device} and the table on {table.device}; move the index with "
            f".to({str(table.device)!r})"
        )
    return index.reshape(-1).contiguous()  # the kernel reads entries one after another


def _check_rows(op: str, table: torch.Tensor, index: torch.Tensor, compact: torch.Tensor) -> None:
    name = "out" if op == "gather" else "src"
    check_torch_tensor(compact, f"rows op {op}", name)
    expected = (index.numel(), *table.shape[1:])
    if tuple(compact.shape) != expected:
        raise TmaConfigError(
            f"{name} has shape {tuple(compact.shape)}; for {index.numel()} index entries of a table "
            f"{tuple(table.shape)} it must be {expected}"
        )
    if compact.dtype != table.dtype:
        raise TmaConfigError(f"{name} is {compact.dtype} and the table {table.dtype}; both must be one dtype")
    if compact.device != table.device:
        raise TmaConfigError(f"{name} is on {compact.device} and the table on {table.device}; use one device")
    if _overlap(table, compact):
        raise TmaConfigError(
            f"{name} and the table share memory; rows by index read one and write the other: use "
            "separate tensors (.clone() one)"
        )


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the byte spans of `a` and `b` in one storage intersect (empty tensors never do)."""
    if not a.numel() or not b.numel() or a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    spans = []
    for t in (a, b):
        start = t.data_ptr()
        last = sum((extent - 1) * stride for extent, stride in zip(t.shape, t.stride(), strict=True))
        spans.append((start, start + (last + 1) * t.element_size()))
    (a0, a1), (b0, b1) = spans
    return a0 < b1 and b0 < a1


def _check_entries_unless_capturing(index: torch.Tensor, rows: int, check_index: bool) -> None:
    """`_check_entries` where asked and possible: not inside a CUDA-graph capture (on the GPU)."""
    if (
        check_index
        and index.numel()
        and not (index.is_cuda and torch_module().cuda.is_current_stream_capturing())
    ):
        _check_entries(index, rows)


def _check_entries(index: torch.Tensor, rows: int) -> None:
    """Every entry in [0, rows), or TmaConfigError naming the first that is not."""
    low, high = (int(v) for v in index.aminmax())
    if low >= 0 and high < rows:
        return
    bad = ((index < 0) | (index >= rows)).nonzero()[0, 0].item()
    raise TmaConfigError(
        f"index[{bad}] is {int(index[bad])}; the table has {rows} rows, so every entry must be in "
        f"[0, {rows}) (negative entries are not counted from the end): fix the index"
    )


def _flags(what: str, check_index: object, strict: object) -> tuple[bool, bool]:
    return flag(check_index, f"{what}'s check_index"), flag(strict, f"{what}'s strict")


def _torch_op(call: Callable, *args: object, **kwargs: object) -> None:
    """torch's own op, whose refusal (a value its schema or kernel does not take) is raised as
    TmaConfigError with torch's words."""
    try:
        call(*args, **kwargs)
    except (RuntimeError, TypeError, ValueError, IndexError) as error:
        raise TmaConfigError(f"torch's op refused the call: {error}") from None


def _refuse_strict(strict: bool, what: str, reason: str) -> None:
    if strict:
        raise TmaConfigError(f"{what}: bulk row copies cannot serve this call: {reason}")


def _facts(op: str, table: torch.Tensor, index: torch.Tensor, compact: torch.Tensor) -> RowsFacts:
    return RowsFacts(
        op=op,
        table_shape=tuple(table.shape),
        table_strides=tuple(table.stride()),
        compact_shape=tuple(compact.shape),
        compact_strides=tuple(compact.stride()),
        dtype=dtype_name(table.dtype),
        nbytes=table.element_size(),
        table_address=table.data_ptr(),
        compact_address=compact.data_ptr(),
        device=cuda_index(table),
        index_device=cuda_index(index),
        index_dtype=dtype_name(index.dtype),
        lazy=lazy_bit(table, compact),
        recorded=recorded_by_autograd(table, compact),
    )
