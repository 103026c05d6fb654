"""Rows by index: `gather_rows`, `scatter_rows_`, `index_add_`, `index_reduce_` (dim 0, as torch's
`index_select`, `index_copy_`, `index_add_`, `index_reduce_`) through a bulk copy per row, torch's
op where they cannot serve (`rows_path` says which and why).

    plan     RowsPlan (a ring of row stages) and rows_tma_rule (when its kernel serves a call)
    kernel   RowsKernel: a bulk copy per row, the row's address from the index the warps read
    launch   compile_rows and the launcher around it
    model    the plan's bulk copies replayed on the CPU
    call     how a call runs: its checks, route, repeated-call table and launch
    api      the public functions
    op       torch.ops.tmakit.gather_rows, scatter_rows_, index_add_, index_reduce_
    bench    the rows study against torch's index ops
    explain  `tmakit plan`/`explain --kernel rows --rows OP:COUNT`
"""

from ..registry import FamilyRecord

FAMILY = FamilyRecord(
    name="rows",
    summary="rows gathered, scattered or reduced by index, a bulk copy a row",
    parts=frozenset({"plan", "kernel", "launch", "model", "api", "op", "bench", "explain"}),
)
