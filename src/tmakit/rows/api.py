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

from ..api.tensors import check_budget, check_torch_tensor, compile_check, import_torch, recorded_by_autograd
from ..errors import TmaConfigError
from ..plan.budget import call_budget
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
    dim: int | torch.Tensor = 0,
    index: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    *,
    check_index: bool = True,
    strict: bool = False,
    sms: int | None = None,
) -> torch.Tensor:
    """`torch.index_select(src, dim, index, out=out)`: the rows of `src` that `index` names, in its
    order. Torch's order, `gather_rows(src, dim, index)`, or tmakit's, `gather_rows(src, index)`
    (dim 0): a tensor where torch's order has `dim` is the index, and the arguments given after it
    each move one place along (`gather_rows(src, index, out)`). Dim 0 is served by bulk row copies
    where they serve; another dim `d` is the view with `d` first (`src.movedim(d, 0)`, and out's),
    whose rows are one run only where the dims after `d` are of extent 1, so torch's op serves it
    but there.

    Args:
        src: the table, rank >= 1, its rows contiguous for the TMA path.
        dim: the dim `index` indexes (torch's order; negative counts from the last), or the index
            itself (tmakit's order, dim 0).
        index: 1-D (or 0-D) int32 or int64 tensor on `src`'s device; entries in [0, src.shape[dim]).
        out: the result, `src`'s shape but len(index) along `dim`, of src's dtype (allocated,
            contiguous, when None).
        check_index: check every entry on the host first (a synchronisation); skipped inside a
            CUDA-graph capture. Unchecked, an entry out of range leaves its row of `out` as it was.
            Where torch's op serves the call the entries are checked either way (outside a
            capture): torch's own check writes part of the rows before it raises on the CPU, and
            ends the process on a GPU.
        strict: raise instead of taking torch's op where bulk row copies cannot serve.
        sms: an SM budget (`tmakit.sm_budget`): the bulk row copies' persistent grid takes this
            many SMs, one block each; None: the enclosing budget's, else the whole GPU.

    Returns:
        `out`.

    Raises:
        TmaConfigError: a tensor, dtype, shape or device the op does not take; a `dim` that is not
            one of the table's; an argument missing or given twice; an index entry out of range
            (with `check_index`); an `sms` past the GPU's SM count; with `strict`, why bulk
            row copies cannot serve. While torch.compile traces the call, what the op's fake
            implementation refuses, wrapped in dynamo's error (the entries are checked when the
            traced program runs).
    """
    sms = call_budget(sms)
    check_budget(sms, src)
    if out is None and type(dim) is not int and (index is None or type(index) is type(dim)):
        # tmakit's order, (src, index) or (src, index, out): each argument one place along
        dim, index, out = 0, dim, index
    elif type(dim) is not int or dim or index is None:
        dim, (index, out) = rows_arguments("gather_rows", src, dim, (index, out), ("index",))
        if dim:
            return gathered_along(src, dim, index, out, check_index, strict, sms)
    if is_compiling():
        mode = {"check_index": check_index, "strict": strict, "sms": sms}
        return traced_rows("gather", src, index, out, mode)
    torch = import_torch("gather_rows")
    check_index, strict = flags("gather_rows", check_index, strict)
    given = out is not None
    if not given and plain_tensors(src, index) and src.dim():
        out = torch.empty((index.numel(), *src.shape[1:]), dtype=src.dtype, device=src.device)
    if out is not None and known_call("gather", src, index, out, check_index, strict, sms):
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
    if not known_call("gather", src, index, out, check_index, strict, sms):
        rows_call("gather", src, index, out, check_index, strict, sms)
    return out


def scatter_rows_(
    dst: torch.Tensor,
    dim: int | torch.Tensor = 0,
    index: torch.Tensor | None = None,
    src: torch.Tensor | None = None,
    *,
    check_index: bool = True,
    strict: bool = False,
    sms: int | None = None,
) -> torch.Tensor:
    """`dst.index_copy_(dim, index, src)`: row i of `src` into row `index[i]` of `dst` (with
    repeated entries, which one lands is not defined, as in torch). Torch's order,
    `scatter_rows_(dst, dim, index, src)`, or tmakit's, `scatter_rows_(dst, index, src)` (dim 0),
    told apart and served along `dim` as `gather_rows`.

    Args:
        dst: the table written, rank >= 1.
        dim: as `gather_rows`'s.
        index: 1-D int32 or int64, entries in [0, dst.shape[dim]).
        src: `dst`'s shape but len(index) along `dim`, dst's dtype.
        check_index: as `gather_rows`'s (unchecked, an out-of-range entry writes nothing).
        strict, sms: as `gather_rows`'s.

    Returns:
        `dst`.

    Raises:
        TmaConfigError: as `gather_rows`.
    """
    sms = call_budget(sms)
    check_budget(sms, dst)
    mode = {"check_index": check_index, "strict": strict, "sms": sms}
    if src is None and type(index) is type(dim):  # tmakit's order, (dst, index, src)
        dim, index, src = 0, dim, index
    elif type(dim) is not int or dim or src is None:
        dim, (index, src) = rows_arguments("scatter_rows_", dst, dim, (index, src), ("index", "src"))
        if dim:
            scatter_rows_(*along("scatter_rows_", dim, dst, index, src), **mode)
            return dst
    if is_compiling():
        return traced_rows("scatter", dst, index, src, mode)
    check_index, strict = flags("scatter_rows_", check_index, strict)
    if not known_call("scatter", dst, index, src, check_index, strict, sms):
        index = checked_index(index, dst, "scatter_rows_")
        rows_call("scatter", dst, index, src, check_index, strict, sms)
    return dst


def index_add_(
    dst: torch.Tensor,
    dim: int | torch.Tensor = 0,
    index: torch.Tensor | None = None,
    src: torch.Tensor | None = None,
    *,
    alpha: int | float = 1,
    check_index: bool = True,
    strict: bool = False,
    sms: int | None = None,
) -> torch.Tensor:
    """`dst.index_add_(dim, index, src, alpha=alpha)`: row i of `src` added into row `index[i]` of
    `dst` by the bulk reduce, each element's add atomic, so repeated entries all count (float
    adds in an order the GPU picks, as torch's atomic adds). Torch's order,
    `index_add_(dst, dim, index, src)`, or tmakit's, `index_add_(dst, index, src)` (dim 0), told
    apart and served along `dim` as `gather_rows`.

    Args:
        dst: the table, rank >= 1; the bulk reduce adds int32, int64, uint32, uint64, float32,
            float16 and bfloat16 (others, and `alpha` other than 1, take torch's op).
        dim: as `gather_rows`'s.
        index: 1-D int32 or int64, entries in [0, dst.shape[dim]).
        src: `dst`'s shape but len(index) along `dim`, dst's dtype.
        alpha: the multiplier of `src`.
        check_index: as `gather_rows`'s (unchecked, an out-of-range entry adds nothing).
        strict, sms: as `gather_rows`'s.

    Returns:
        `dst`.

    Raises:
        TmaConfigError: as `gather_rows`; an `alpha` that is not a number.
    """
    sms = call_budget(sms)
    check_budget(sms, dst)
    if src is None and type(index) is type(dim):  # tmakit's order, (dst, index, src)
        dim, index, src = 0, dim, index
    elif type(dim) is not int or dim or src is None:
        dim, (index, src) = rows_arguments("index_add_", dst, dim, (index, src), ("index", "src"))
        if dim:
            options = {"alpha": alpha, "check_index": check_index, "strict": strict, "sms": sms}
            index_add_(*along("index_add_", dim, dst, index, src), **options)
            return dst
    if is_compiling():
        options = {"alpha": alpha, "check_index": check_index, "strict": strict, "sms": sms}
        return traced_rows("add", dst, index, src, options)
    check_index, strict = flags("index_add_", check_index, strict)
    if not isinstance(alpha, numbers.Real):
        raise TmaConfigError(f"index_add_'s alpha is {alpha!r} ({type(alpha).__name__}); it must be a number")
    alpha = int(alpha) if isinstance(alpha, numbers.Integral) else float(alpha)
    if alpha == 1 and known_call("add", dst, index, src, check_index, strict, sms):
        return dst
    index = checked_index(index, dst, "index_add_")
    reason = None if alpha == 1 else f"alpha={alpha}: the bulk reduce adds the rows as they are"
    by_torch = functools.partial(dst.index_add_, 0, index, src, alpha=alpha)
    mode = (check_index, strict, sms)
    return reduced_rows("index_add_", "add", reason, (dst, index, src), mode, by_torch)


def index_reduce_(
    dst: torch.Tensor,
    dim: int | torch.Tensor = 0,
    index: torch.Tensor | None = None,
    src: torch.Tensor | None = None,
    reduce: str | None = None,
    *,
    include_self: bool = True,
    check_index: bool = True,
    strict: bool = False,
    sms: int | None = None,
) -> torch.Tensor:
    """`dst.index_reduce_(dim, index, src, reduce, include_self=include_self)`: "amax" and "amin"
    of int32, int64, uint32 and uint64 rows by the bulk reduce (signed types compared signed);
    "prod", "mean", floats and `include_self=False` take torch's op. Torch's order,
    `index_reduce_(dst, dim, index, src, reduce)`, or tmakit's, `index_reduce_(dst, index, src,
    reduce)` (dim 0), told apart and served along `dim` as `gather_rows`.

    Args:
        dst: the table, rank >= 1.
        dim: as `gather_rows`'s.
        index: 1-D int32 or int64, entries in [0, dst.shape[dim]).
        src: `dst`'s shape but len(index) along `dim`, dst's dtype.
        reduce: "amax", "amin", "prod" or "mean".
        include_self: whether `dst`'s rows take part (the bulk reduce's only form).
        check_index, strict, sms: as `gather_rows`'s.

    Returns:
        `dst`.

    Raises:
        TmaConfigError: as `gather_rows`; a `reduce` torch does not name.
    """
    sms = call_budget(sms)
    check_budget(sms, dst)
    options = {"include_self": include_self, "check_index": check_index, "strict": strict, "sms": sms}
    if reduce is None and type(index) is type(dim):  # tmakit's order, (dst, index, src, reduce)
        dim, index, src, reduce = 0, dim, index, src
    elif type(dim) is not int or dim or reduce is None:
        dim, (index, src, reduce) = rows_arguments(
            "index_reduce_", dst, dim, (index, src, reduce), ("index", "src", "reduce")
        )
        if dim:
            index_reduce_(*along("index_reduce_", dim, dst, index, src), reduce, **options)
            return dst
    if is_compiling():
        return traced_rows("reduce", dst, index, src, options, reduce)
    check_index, strict = flags("index_reduce_", check_index, strict)
    include_self = flag(include_self, "index_reduce_'s include_self")
    known = type(reduce) is str and reduce in INDEX_REDUCES and include_self
    if known and known_call(INDEX_REDUCES[reduce], dst, index, src, check_index, strict, sms):
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
    mode = (check_index, strict, sms)
    return reduced_rows("index_reduce_", op, reason, (dst, index, src), mode, by_torch)


# Each function's calls in both orders, for the errors that name them.
FORMS = {
    "gather_rows": "gather_rows(src, dim, index, out=None) or gather_rows(src, index, out=None)",
    "scatter_rows_": "scatter_rows_(dst, dim, index, src) or scatter_rows_(dst, index, src)",
    "index_add_": "index_add_(dst, dim, index, src) or index_add_(dst, index, src)",
    "index_reduce_": (
        "index_reduce_(dst, dim, index, src, reduce) or index_reduce_(dst, index, src, reduce)"
    ),
}


def rows_arguments(
    what: str, table: object, dim: object, after: tuple[object, ...], needed: tuple[str, ...]
) -> tuple[int, tuple[Any, ...]]:
    """A rows call's dim, from 0 to the table's rank - 1, and the arguments after it (`after`:
    the index's and those after, as bound), in torch's order or tmakit's: a tensor where torch's
    order has the dim is the index (dim 0), and the arguments given after it, in order, fill the
    places after the index's. TmaConfigError for a dim that is not an int naming one of the
    table's dims, one of the `needed` arguments (the index's and those after, by name) missing,
    or more arguments than there are places."""
    torch = import_torch(what)
    if isinstance(dim, torch.Tensor):  # tmakit's order: each argument given one place along
        given = [value for value in after if value is not None]
        if len(given) >= len(after):
            raise TmaConfigError(
                f"{what} got the index and {len(given)} arguments after it, one more than it takes: "
                f"{FORMS[what]}"
            )
        dim, after = 0, (dim, *given, *[None] * (len(after) - 1 - len(given)))
    missing = [name for name, value in zip(needed, after, strict=False) if value is None]
    if missing:
        raise TmaConfigError(f"{what} got no {' and no '.join(missing)}: {FORMS[what]}")
    check_torch_tensor(table, what, "the table")
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise TmaConfigError(
            f"{what}'s dim is {dim!r} ({type(dim).__name__}); it takes an int dim or, in its place, the "
            f"index tensor (dim 0): {FORMS[what]}"
        )
    rank = max(table.dim(), 1)  # torch's ops take a 0-D table as one row
    if not -rank <= dim < rank:
        raise TmaConfigError(
            f"{what} dim={dim} of a table of shape {tuple(table.shape)}: its dims are {-rank} to "
            f"{rank - 1}; pass one of those"
        )
    return int(dim) % rank, after


def along(
    what: str, dim: int, table: torch.Tensor, index: torch.Tensor, compact: object, name: str = "src"
) -> tuple[Any, ...]:
    """(table, index, compact) of a call along `dim`: the views with `dim` first, whose rows the
    dim-0 call moves. TmaConfigError for a compact tensor (`name`) of another rank than the
    table's."""
    check_torch_tensor(compact, what, name)
    check_torch_tensor(index, what, "index")
    if compact.dim() != table.dim():
        shape = (*table.shape[:dim], index.numel(), *table.shape[dim + 1 :])
        raise TmaConfigError(
            f"{what} along dim {dim}: {name} is {tuple(compact.shape)} and the table "
            f"{tuple(table.shape)}; {name} takes the table's shape with len(index) along dim {dim}: {shape}"
        )
    return table.movedim(dim, 0), index, compact.movedim(dim, 0)


def gathered_along(
    src: torch.Tensor,
    dim: int,
    index: torch.Tensor,
    out: torch.Tensor | None,
    check_index: bool,
    strict: bool,
    sms: int | None,
) -> torch.Tensor:
    """`gather_rows` along `dim` (not 0): into `out`, or a new contiguous tensor, seen with `dim`
    first; where autograd records the call (no `out`), torch's `index_select` itself, as along
    dim 0, its entries checked first outside a trace."""
    torch = import_torch("gather_rows")
    if out is None and recorded_by_autograd(src):
        refuse_strict(flags("gather_rows", check_index, strict)[1], "gather_rows", RECORDED_BY_AUTOGRAD)
        index = checked_index(index, src, "gather_rows")
        if not is_compiling():
            check_entries_unless_capturing(index, src.shape[dim], TORCH_CHECKS_LATE)
        return torch_op(torch.index_select, src, dim, index)
    if out is None:
        check_torch_tensor(index, "gather_rows", "index")
        shape = (*src.shape[:dim], index.numel(), *src.shape[dim + 1 :])
        out = torch.empty(shape, dtype=src.dtype, device=src.device)
    mode = {"check_index": check_index, "strict": strict, "sms": sms}
    gather_rows(*along("gather_rows", dim, src, index, out, "out"), **mode)
    return out


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
    sms = options.pop("sms")
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
    mode = {"check_index": check_index, "strict": strict, "sms": sms}
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
    mode: tuple[bool, bool, int | None],
    by_torch: Callable[[], object],
) -> torch.Tensor:
    """`what`'s call on `rows` (dst, its checked index, src) in `mode` (check_index, strict,
    sms): the bulk reduce's `op` of src's rows into dst's, or where `reason` says why that cannot
    serve (TmaConfigError with `strict`), torch's op `by_torch()` after the checks the bulk path
    makes of the rows and the index (a 0-D dst has no rows to check). Returns dst."""
    dst, index, src = rows
    check_index, strict, sms = mode
    if reason is None:
        rows_call(op, dst, index, src, check_index, strict, sms)
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
        op: "gather", "scatter", "add", "min" or "max" (`rows.plan.ROW_OPS`).
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
