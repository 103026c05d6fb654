"""How a rows call runs (`api.rows` holds the ops): the checks of its tensors and index, its
route (`plan.rows.rows_tma_rule`: bulk row copies or torch's op), the repeated-call table that
skips them for a call like one served before, and the launch on the tensors' bytes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..api.tensors import (
    check_torch_tensor,
    check_written,
    cuda_index,
    device_facts,
    device_name,
    dtype_name,
    import_torch,
    lazy_bit,
    recorded_by_autograd,
    tensor_facts,
)
from ..config import dtype_of
from ..errors import TmaConfigError, TorchOpError
from ..limits import GLOBAL_BASE_ALIGN
from ..plan.budget import call_budget
from ..runtime.dispatch import KEY_ERRORS, CallTable
from ..validate import flag
from .launch import rows_launcher
from .plan import RowsFacts, call_plan, rows_route, rows_tma_rule

if TYPE_CHECKING:
    import torch

ZERO_D = "a 0-D table, which torch's op takes as one row of one element"
# torch's ops check an index entry as they reach it: on the CPU after writing the rows before it,
# on a GPU by a device assert that ends the process. So their path checks every entry first
# whatever `check_index` says (inside a CUDA-graph capture nothing may synchronise).
TORCH_CHECKS_LATE = True


# -- the call -----------------------------------------------------------------------------------
TORCH_OPS = {
    "gather": lambda table, index, compact: torch_module().index_select(table, 0, index, out=compact),
    # torch's index_copy_ takes an int64 index alone; the others, and the bulk copies, take int32 too
    "scatter": lambda table, index, compact: table.index_copy_(0, index.long(), compact),
    "add": lambda table, index, compact: table.index_add_(0, index, compact),
    "min": lambda table, index, compact: table.index_reduce_(0, index, compact, "amin"),
    "max": lambda table, index, compact: table.index_reduce_(0, index, compact, "amax"),
}


def torch_module():
    global _TENSOR_TYPE, _STRIDED
    torch = import_torch("rows")
    _TENSOR_TYPE, _STRIDED = torch.Tensor, torch.strided
    return torch


_TENSOR_TYPE = _STRIDED = None  # torch.Tensor and torch.strided once torch is imported


def rows_call(
    op: str,
    table: torch.Tensor,
    index: torch.Tensor,
    compact: torch.Tensor,
    check_index: bool,
    strict: bool,
    sms: int | None = None,
) -> None:
    """Check, route and run one rows call (a 0-D table: torch's op, which takes it as a row) on
    an SM budget of `sms` (`plan.budget`; the public functions refused one past the GPU's SM
    count first, `api.tensors.check_budget`)."""
    if table.dim() == 0:
        refuse_strict(strict, f"rows op {op}", ZERO_D)
        check_written(written(op, table, compact), f"rows op {op}", "the written tensor")
        torch_op(TORCH_OPS[op], table, index, compact)
        return
    check_rows(op, table, index, compact)
    if not index.numel():
        return
    read = facts(op, table, index, compact)
    rule = rows_tma_rule(read, strict)
    if rule is not None:
        refuse_strict(strict, f"rows op {op}", rule)
        run = functools.partial(_by_torch, op)
    else:
        run = functools.partial(_launch, _launch_of(op, table, index, sms), op)
    if read.lazy is None and not read.recorded:  # what the key holds is all the route read
        _KNOWN.keep(_call_key(op, table, index, compact, strict, sms), run)  # bounded: index lengths vary
    run(table, index, compact, check_index)


# Calls whose checks and route passed, by everything those read (`_call_key`), with how each
# runs (the kernel or torch's op): a repeated call skips them. Tensors that require grad, lazily
# applied bits or one storage take the full path.
_KNOWN: CallTable = CallTable()


def _call_key(op: str, table, index, compact, strict: bool, sms: int | None) -> tuple:
    return (
        op,
        strict,
        sms,
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


def plain_tensors(*values: object) -> bool:
    """Whether every value is a dense, strided torch tensor (no subclass, nested or sparse one)."""
    tensor = _TENSOR_TYPE
    return tensor is not None and all(
        type(value) is tensor and value.layout is _STRIDED and not value.is_nested for value in values
    )


def known_call(
    op: str, table, index, compact, check_index: bool, strict: bool, sms: int | None = None
) -> bool:
    """Run a call whose key was served before (True), else nothing (False)."""
    if not plain_tensors(table, index, compact):
        return False
    if table.requires_grad or compact.requires_grad or table.is_neg() or compact.is_neg():
        return False
    if written(op, table, compact).is_inference():  # written only in inference mode
        return False
    if table.is_conj() or compact.is_conj():
        return False
    try:
        run = _KNOWN.get(_call_key(op, table, index, compact, strict, sms))
        if run is None or table.untyped_storage().data_ptr() == compact.untyped_storage().data_ptr():
            return False
    except KEY_ERRORS:  # a tensor whose strides or memory cannot be read: the full path names it
        return False
    run(table, index, compact, check_index)
    return True


def _by_torch(op: str, table, index, compact, check_index: bool) -> None:
    """torch's op, the index checked first, asked or not (`TORCH_CHECKS_LATE`), but inside a
    capture."""
    check_entries_unless_capturing(index, table.shape[0], TORCH_CHECKS_LATE)
    torch_op(TORCH_OPS[op], table, index, compact)


def _launch(launch: Callable, op: str, table, index, compact, check_index: bool) -> None:
    """The index checked (unless not asked, or inside a capture), the kernel launched on the
    tensors' bytes, the table's version bumped where it was written."""
    torch = torch_module()
    check_entries_unless_capturing(index, table.shape[0], check_index)
    launch(_byte_rows(table), index, _byte_rows(compact))
    torch.autograd.graph.increment_version(written(op, table, compact))


def kernel_below_autograd(
    op: str, table: torch.Tensor, index: torch.Tensor, compact: torch.Tensor
) -> Callable[[], None] | str:
    """A rows call as torch's own kernel for its aten op runs it (`tmakit.enable`): where the
    route (`plan.rows_route`) takes the call, its launch (of no argument; the tensors checked by
    the caller, holding no autograd record: the dispatcher recorded the call), which asserts the
    index's range on the device as torch's kernels do (no synchronisation) and bumps no version
    (the dispatcher does); else the route's reason. Nothing is written before the launch. Inside
    a `tmakit.sm_budget`, on that budget."""
    torch = torch_module()
    route = rows_route(facts(op, table, index, compact))
    if not route.by_tma:
        return route.reason
    launch = _launch_of(op, table, index, call_budget(None))

    def run() -> None:
        torch._assert_async(((index >= 0) & (index < table.shape[0])).all(), f"{op}: index out of range")
        launch(_byte_rows(table), index, _byte_rows(compact))

    return run


def _launch_of(op: str, table: torch.Tensor, index: torch.Tensor, sms: int | None = None) -> Callable:
    """The compiled kernel's launch for a call the route gave bulk row copies (`_launcher`)."""
    row_bytes = table.element_size() * _row_elements(table)
    dtype = None if op in ("gather", "scatter") else dtype_of(dtype_name(table.dtype))
    return _launcher(op, row_bytes, dtype, dtype_name(index.dtype), table.get_device(), sms)


@functools.lru_cache(maxsize=256)
def _launcher(op: str, row_bytes: int, dtype: str | None, index_dtype: str, device: int, sms: int | None):
    """The launch of the compiled rows kernel for one (op, row size, reduce dtype, index dtype) on
    one device and SM budget (the `Launcher`'s function itself: a repeated call pays no wrapper),
    of `rows.plan.call_plan`."""
    sm_count = device_facts(torch_module().device("cuda", device))[0]
    plan = call_plan(op, row_bytes, dtype, sm_count, sms)
    index = "int64" if index_dtype == "int64" else "int32"
    return rows_launcher(plan, index, f"cuda:{device}").launch


def _byte_rows(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor`'s memory as (rows, row bytes) uint8 with its row stride (its rows contiguous)."""
    return tensor.view(tensor.shape[0], _row_elements(tensor)).view(torch_module().uint8)


def written(op: str, table: torch.Tensor, compact: torch.Tensor) -> torch.Tensor:
    """The tensor a rows call writes: a gather's `out`, the others' table."""
    return compact if op == "gather" else table


def _row_elements(tensor: torch.Tensor) -> int:
    count = 1
    for extent in tensor.shape[1:]:
        count *= extent
    return count


# -- checks -------------------------------------------------------------------------------------
def checked_index(index: object, table: object, what: str) -> torch.Tensor:
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


def check_rows(op: str, table: torch.Tensor, index: torch.Tensor, compact: torch.Tensor) -> None:
    name = "out" if op == "gather" else "src"
    check_torch_tensor(compact, f"rows op {op}", name)
    check_written(written(op, table, compact), f"rows op {op}", "out" if op == "gather" else "dst")
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


def check_entries_unless_capturing(index: torch.Tensor, rows: int, check_index: bool) -> None:
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


def flags(what: str, check_index: object, strict: object) -> tuple[bool, bool]:
    return flag(check_index, f"{what}'s check_index"), flag(strict, f"{what}'s strict")


def torch_op(call: Callable, *args: object, **kwargs: object) -> object:
    """torch's own op (its result returned), whose refusal (a value its schema or kernel does not
    take) is raised as TmaConfigError with torch's words."""
    try:
        return call(*args, **kwargs)
    except (RuntimeError, TypeError, ValueError, IndexError) as error:
        raise TorchOpError(f"torch's op refused the call: {error}") from None


def refuse_strict(strict: bool, what: str, reason: str) -> None:
    if strict:
        raise TmaConfigError(f"{what}: bulk row copies cannot serve this call: {reason}")


def facts(op: str, table: torch.Tensor, index: torch.Tensor, compact: torch.Tensor) -> RowsFacts:
    read = tensor_facts(table)
    return RowsFacts(
        op=op,
        table=read,
        compact=tensor_facts(compact),
        index_device=cuda_index(index),
        index_dtype=dtype_name(index.dtype),
        lazy=lazy_bit(table, compact),
        recorded=recorded_by_autograd(table, compact),
        gpu=device_name(read.device) if read.device >= 0 else "",
    )
