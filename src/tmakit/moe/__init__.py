"""Mixture-of-experts token movement: `moe_dispatch` (each token's row to its experts' rows,
expert-major, groups padded for grouped GEMMs) and `moe_combine` (each token's expert rows summed
back, weighted by the router's probabilities, in fp32), with their backward passes, by bulk copies
addressed from a row map built on the device.

    plan     DispatchPlan and CombinePlan (the rings), RoutingPlan (the routing kernels' grid and
             limits), moe_tma_rule (when the kernels serve)
    kernel   DispatchKernel (a row loaded once, stored topk times), CombineKernel (a token's rows
             loaded a chunk at a time and summed), RoutingKernel (the row map: count, scan, assign)
    launch   compile_dispatch, compile_combine, compile_routing and their launchers
    model    a plan's bulk copies replayed on the CPU, the routing kernels' algorithm
    call     the routing on the device (the row map: the routing kernels or torch's sort), the
             route, the launches, torch's expressions
    api      moe_dispatch, moe_combine, moe_path
    op       torch.ops.tmakit.moe_route, moe_permute, moe_combine (fakes, autograd)
    bench    the MoE study against torch's expressions and TransformerEngine's kernels
    explain  `tmakit plan`/`explain --kernel moe`
"""

from ..registry import FamilyRecord

FAMILY = FamilyRecord(
    name="moe",
    summary="mixture-of-experts dispatch and combine, a bulk copy a row",
    parts=frozenset({"plan", "kernel", "launch", "model", "api", "op", "bench", "explain"}),
)
