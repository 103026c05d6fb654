"""Copies: `copy_`, `copy` (dst.copy_(src), src.clone()) through TMA's ring, as the tensors are
laid out, on a view of the same memory or transposed tile by tile, torch's `copy_` where TMA does
not serve the pair (`copy_path` says which and why). The ring kernel, its compile and the plans
every family builds on (`CopyOptions`, `CopyPlan`, a copy's class) are the core's
(`kernels.copy`, `runtime.launch.compile_copy`, `plan.copy`, `plan.copy_class`).

The package is `copies`, not `copy`: importing a package sets its name on `tmakit`, where
`tmakit.copy` is the function.

    plan     copy_route (which path serves a copy), plan_pair and decide_copy: the decision
    call     how a new call is planned: its checks, route, class, launcher; a strict call's refusal
    views    the launchers around a route: its views, torch's copy_, the driver's memcpy
    api      the public functions and their dispatch
    op       torch.ops.tmakit.copy_ and copy (default and typed)
    bench    the copy and transpose studies against torch's copy_
    explain  `tmakit plan`/`explain --kernel copy|transpose`
"""

from ..registry import FamilyRecord

FAMILY = FamilyRecord(
    name="copy",
    summary="dst.copy_(src) through TMA's ring, as laid out, on a view or transposed",
    parts=frozenset({"plan", "api", "op", "bench", "explain"}),
)
