"""Reduce stores: `reduce_into_` and `add_` (dst = dst op src) through TMA reduce stores on the
copy's ring, or the load-add-store ring, torch's op where they cannot serve (`reduce_path` says
which and why). The (op, dtype) table and the CPU reference of what a reduce writes are the core's
(`plan.reduce_ops`, `model.reduce_ops`): the rows' bulk reduce shares them.

    plan     ReducePlan (a copy whose stores reduce), the ring's rules and reduce_route
    kernel   ReduceKernel (the copy with reduce stores), LoadReduceKernel (the load-add-store ring)
    launch   compile_reduce and the launchers around it
    call     how a call runs: its checks, route, kernel planned for its class, torch's op
    api      the public functions, and ReducePlan
    op       torch.ops.tmakit.reduce_into_ (default and typed)
    bench    the reduce study against torch's in-place ops
    explain  `tmakit plan`/`explain --kernel reduce --reduce OP`
"""

from ..registry import FamilyRecord

FAMILY = FamilyRecord(
    name="reduce",
    summary="dst = dst op src by TMA reduce stores or the load-add-store ring",
    parts=frozenset({"plan", "kernel", "launch", "api", "op", "bench", "explain"}),
)
