"""Rows by index: `gather_rows`, `scatter_rows_`, `index_add_`, `index_reduce_` (dim 0, as torch's
`index_select`, `index_copy_`, `index_add_`, `index_reduce_`) through bulk row copies
(`rows.kernel`), torch's op where they cannot serve (`rows_path` says which and why).

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
from typing import TYPE_CHECKING, Any

from ..api.tensors import compile_check, import_torch, recorded_by_autograd
from ..errors import TmaConfigError
from ..plan.route import RECORDED_BY_AUTOGRAD, Route, torch_route
from ..validate import flag
from .call import (
    TORCH_CHECKS_LATE,
    TORCH_OPS,
    ZERO_D,
    check_entries_unless_capturing,
    check_rows,
    checked_index,
    facts,
    flags,
    known_call,
    plain_tensors,
    refuse_strict,
    rows_call,
    torch_op,
)
from .plan import INDEX_REDUCES, ROW_OPS, rows_route

if TYPE_CHECKING:
    import torch

__all__ = ["gather_rows", "index_add_", "index_reduce_", "rows_path", "scatter_rows_"]

TORCH_REDUCES = ("prod", "mean", "amax", "amin")  # what torch's index_reduce_ takes

# torch.compiler.is_compiling, asked first by each function: a trace records its torch op instead.
is_compiling = compile_check(globals(), "is_compiling")


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
            Where torch's op serves the call the entries are checked either way (outside a
            capture): torch's own check writes part of the rows before it raises on the CPU, and
            ends the process on a GPU.
        strict: raise instead of taking torch's op where bulk row copies cannot serve.

    Returns:
        `out`.

    Raises:
        TmaConfigError: a tensor, dtype, shape or device the op does not take; an index entry out
            of range (with `check_index`); with `strict`, why bulk row copies cannot serve. While
            torch.compile traces the call, what the op's fake implementation refuses, wrapped in
            dynamo's error (the entries are checked when the traced program runs).
    """
    if is_compiling():
        return traced_rows("gather", src, index, out, {"check_index": check_index, "strict": strict})
    torch = import_torch("gather_rows")
    check_index, strict = flags("gather_rows", check_index, strict)
    given = out is not None
    if not given and plain_tensors(src, index) and src.dim():
        out = torch.empty((index.numel(), *src.shape[1:]), dtype=src.dtype, device=src.device)
    if out is not None and known_call("gather", src, index, out, check_index, strict):
        return out  # a call like one served before: its checks and route passed then
    index = checked_index(index, src, "gather_rows")
    if not given and recorded_by_autograd(src):  # index_select's out= records no gradient
        refuse_strict(strict, "gather_rows", RECORDED_BY_AUTOGRAD)
        check_entries_unless_capturing(index, src.shape[0] if src.dim() else 1, TORCH_CHECKS_LATE)
        return torch_op(torch.index_select, src, 0, index)
    if src.dim() == 0:  # torch's op takes a 0-D tensor as one row; so does this
        refuse_strict(strict, "gather_rows", ZERO_D)
        if out is None:
            out = torch.empty((), dtype=src.dtype, device=src.device)
        torch_op(torch.index_select, src, 0, index, out=out)
        return out
    if out is None:
        out = torch.empty((index.numel(), *src.shape[1:]), dtype=src.dtype, device=src.device)
    if not known_call("gather", src, index, out, check_index, strict):
        rows_call("gather", src, index, out, check_index, strict)
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
    if is_compiling():
        return traced_rows("scatter", dst, index, src, {"check_index": check_index, "strict": strict})
    check_index, strict = flags("scatter_rows_", check_index, strict)
    if not known_call("scatter", dst, index, src, check_index, strict):
        rows_call("scatter", dst, checked_index(index, dst, "scatter_rows_"), src, check_index, strict)
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
        TmaConfigError: as `gather_rows`; an `alpha` that is not a number.
    """
    if is_compiling():
        options = {"alpha": alpha, "check_index": check_index, "strict": strict}
        return traced_rows("add", dst, index, src, options)
    check_index, strict = flags("index_add_", check_index, strict)
    if not isinstance(alpha, numbers.Real):
        raise TmaConfigError(f"index_add_'s alpha is {alpha!r} ({type(alpha).__name__}); it must be a number")
    alpha = int(alpha) if isinstance(alpha, numbers.Integral) else float(alpha)
    if alpha == 1 and known_call("add", dst, index, src, check_index, strict):
        return dst
    index = checked_index(index, dst, "index_add_")
    reason = None if alpha == 1 else f"alpha={alpha}: the bulk reduce adds the rows as they are"
    by_torch = functools.partial(dst.index_add_, 0, index, src, alpha=alpha)
    return reduced_rows("index_add_", "add", reason, (dst, index, src), check_index, strict, by_torch)


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
    if is_compiling():
        options = {"include_self": include_self, "check_index": check_index, "strict": strict}
        return traced_rows("reduce", dst, index, src, options, reduce)
    check_index, strict = flags("index_reduce_", check_index, strict)
    include_self = flag(include_self, "index_reduce_'s include_self")
    known = type(reduce) is str and reduce in INDEX_REDUCES and include_self
    if known and known_call(INDEX_REDUCES[reduce], dst, index, src, check_index, strict):
        return dst
    index = checked_index(index, dst, "index_reduce_")
    if type(reduce) is not str or reduce not in TORCH_REDUCES:
        raise TmaConfigError(
            f"index_reduce_ reduce={reduce!r}: torch's index_reduce_ takes {', '.join(TORCH_REDUCES)}"
        )
    if reduce not in INDEX_REDUCES:  # torch's op, which the checks name "reduce"
        op, reason = "reduce", f"reduce={reduce!r}: the bulk reduce has no {reduce}"
    elif not include_self:
        op, reason = "reduce", "include_self=False: the bulk reduce always reduces into dst's rows"
    else:
        op, reason = INDEX_REDUCES[reduce], None
    by_torch = functools.partial(dst.index_reduce_, 0, index, src, reduce, include_self=include_self)
    return reduced_rows("index_reduce_", op, reason, (dst, index, src), check_index, strict, by_torch)


# Each function's op, by `traced_rows`' op.
TRACED_OPS = {
    "gather": "gather_rows",
    "scatter": "scatter_rows_",
    "add": "index_add_",
    "reduce": "index_reduce_",
}


def traced_rows(
    op: str,
    table: torch.Tensor,
    index: torch.Tensor,
    compact: torch.Tensor | None,
    options: dict[str, Any],
    *reduce: str,
) -> torch.Tensor:
    """A rows function while torch.compile or torch.export traces it: its `torch.ops.tmakit` op
    (`TRACED_OPS`) with the call's options, which the trace records as one op and which runs the
    function at run time (bulk row copies, or torch's op where they do not serve and the call is
    not strict). A call autograd records is torch's op, traced as such, as outside a trace (strict:
    refused); its entries are then checked by torch's op itself. Returns what the function does."""
    name = TRACED_OPS[op]
    check_index, strict = flags(name, options.pop("check_index"), options.pop("strict"))
    written = compact if op == "gather" else table
    if recorded_by_autograd(table, *([] if compact is None else [compact])):
        refuse_strict(strict, name, RECORDED_BY_AUTOGRAD)
        if op == "gather":
            torch = import_torch(name)
            return torch.index_select(table, 0, index, **({} if compact is None else {"out": compact}))
        if op == "scatter":
            TORCH_OPS[op](table, index, compact)
        elif op == "add":
            table.index_add_(0, index, compact, **options)
        else:
            table.index_reduce_(0, index, compact, *reduce, **options)
        return table
    mode = {"check_index": check_index, "strict": strict}
    packet = getattr(_ops(), name)
    if compact is None:  # a gather allocating its out
        return packet.default(table, index, **mode)
    if op == "gather" and (strict or compact.is_contiguous()):
        packet.out(table, index, out=compact, **mode)
    elif op == "gather":  # dynamo takes no out= of other strides (strict, TMA's path refuses one)
        compact.copy_(packet.default(table, index, **mode))
    else:
        packet.default(table, index, compact, *reduce, **options, **mode)
    return written


def _ops() -> Any:
    """`torch.ops.tmakit`, its ops registered (`tmakit.ops`, imported by the first traced call)."""
    from .. import ops

    return ops.torch.ops.tmakit


def reduced_rows(
    what: str,
    op: str,
    reason: str | None,
    rows: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    check_index: bool,
    strict: bool,
    by_torch: Callable[[], object],
) -> torch.Tensor:
    """`what`'s call on `rows` (dst, its checked index, src): the bulk reduce's `op` of src's rows
    into dst's, or where `reason` says why that cannot serve (TmaConfigError with `strict`),
    torch's op `by_torch()` after the checks the bulk path makes of the rows and the index (a 0-D
    dst has no rows to check). Returns dst."""
    dst, index, src = rows
    if reason is None:
        rows_call(op, dst, index, src, check_index, strict)
        return dst
    refuse_strict(strict, what, reason)
    if dst.dim():
        check_rows(op, dst, index, src)
        check_entries_unless_capturing(index, dst.shape[0], TORCH_CHECKS_LATE)
    torch_op(by_torch)
    return dst


def rows_path(op: str, table: torch.Tensor, index: torch.Tensor, compact: torch.Tensor) -> Route:
    """The path a rows call takes and why, without running it.

    Args:
        op: "gather", "scatter", "add", "min" or "max" (`plan.rows.ROW_OPS`).
        table: the indexed tensor (a gather's `src`, the others' `dst`).
        index: the index.
        compact: a gather's `out`, the others' `src`.

    Returns:
        A `plan.route.Route`: its `path` "tma-rows-bulk" (one bulk copy per row) or "torch", its
        `reason` the rule that chose it.

    Raises:
        TmaConfigError: an `op` not in `ROW_OPS`; as `gather_rows`.
    """
    if type(op) is not str or op not in ROW_OPS:
        raise TmaConfigError(f"rows_path op={op!r}; it takes {', '.join(ROW_OPS)}")
    index = checked_index(index, table, "rows_path")
    if table.dim() == 0:
        return torch_route(op, ZERO_D)
    check_rows(op, table, index, compact)
    return rows_route(facts(op, table, index, compact))
