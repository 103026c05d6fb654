"""The rows kernel compiled once per kernel plan and index dtype, and its launcher."""

from __future__ import annotations

import functools

from ..config import DTYPES
from ..limits import GLOBAL_BASE_ALIGN, GLOBAL_STRIDE_ALIGN
from ..linter.kernels import LintVariant
from ..plan.ring import GUARD_WORDS
from ..runtime.compile import compiles, fake_tensor, placeholder_stream
from ..runtime.launch import Launcher, guarded_launcher
from ..validate import one_of
from .plan import RowsPlan

INDEX_DTYPES = ("int32", "int64")


@compiles
def compile_rows(rows: RowsPlan, index_dtype: str = "int64", tvm_ffi: bool = False) -> tuple:
    """The rows kernel (`kernels.rows.RowsKernel`) for sm_90a, one compile per
    `RowsPlan.kernel_plan` and index dtype ("int32" or "int64"): called with the table (rows,
    row_bytes) uint8 whose rows are a run-time count apart by a run-time stride (a multiple of 16
    bytes), the index (count,), the compact (count, row_bytes) uint8, the guard words and a stream
    (none with `tvm_ffi`, as in `compile_copy`)."""
    one_of(index_dtype, "rows index dtype", INDEX_DTYPES)  # the kernel reads entries as integers
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_tensor

    from .kernel import RowsKernel

    width = rows.row_bytes
    table = make_fake_tensor(
        cutlass.Uint8,
        (cute.sym_int64(symbol="rows"), width),
        (cute.sym_int64(divisibility=GLOBAL_STRIDE_ALIGN, symbol="row_stride"), 1),
        assumed_align=GLOBAL_BASE_ALIGN,
    )
    count = cute.sym_int64(symbol="count")
    compact = make_fake_compact_tensor(cutlass.Uint8, (count, width), stride_order=(1, 0), assumed_align=16)
    element = getattr(cutlass, DTYPES[index_dtype].cutlass_name)
    index = make_fake_tensor(element, (count,), (1,), assumed_align=element.width // 8)
    guard = fake_tensor(cutlass.Int32, (GUARD_WORDS,))
    kernel = RowsKernel(rows.kernel_plan())
    return kernel, table, index, compact, guard, placeholder_stream(env=tvm_ffi)


@functools.lru_cache(maxsize=256)
def rows_launcher(rows: RowsPlan, index_dtype: str, device: str) -> Launcher:
    """A callable (table, index, compact) for one rows kernel on one device (`guarded_launcher`);
    `rows` is a `RowsPlan.kernel_plan`."""
    return guarded_launcher(lambda tvm_ffi: compile_rows(rows, index_dtype, tvm_ffi=tvm_ffi), device)


# The variants `tmakit lint --kernel` compiles (`tmakit.linter.kernels`): a small plan of each kernel.
def _lint_rows(op: str, dtype: str | None = None, index_dtype: str = "int64") -> LintVariant:
    return LintVariant(
        f"rows by index: {op}{f' of {dtype}' if dtype else ''}, 512-byte rows, {index_dtype} index",
        lambda: compile_rows.__wrapped__(RowsPlan(op, 1, 512, 64, dtype=dtype).kernel_plan(), index_dtype),
        dtype,
    )


LINT_VARIANTS = {
    "rows-gather": _lint_rows("gather"),
    "rows-scatter": _lint_rows("scatter"),
    "rows-add": _lint_rows("add", "bf16"),
    "rows-min": _lint_rows("min", "int32", "int32"),
    "rows-max": _lint_rows("max", "int64"),
}
