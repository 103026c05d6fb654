"""The cluster family's GPU experiments: every CTA's copy of a multicast load, and every row of the
cluster dot, compared with the reference on position-hashed inputs. Needs a Hopper GPU and torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..check.inputs import make_input_tensor
from ..check.reference import Verdict
from ..check.run import compare_with_input
from ..limits import POISON
from ..plan import DEFAULT_RELEASE
from ..runtime.compile import CompiledKernel, to_cute_tensor
from ..runtime.device import current_stream, signed_view_dtype
from .launch import compile_cluster_dot, compile_multicast_load
from .plan import ClusterDotPlan, MulticastPlan

if TYPE_CHECKING:
    import torch

# What the core reads by name (`registry.exporting`): `verify --cluster`'s and the demo's check.
__all__ = ["verify_multicast_load"]


def verify_multicast_load(multicast: MulticastPlan, release: str = DEFAULT_RELEASE) -> list[Verdict]:
    """Every CTA of every cluster stores the tiles it received; each CTA's copy is compared with
    the input, every element (so a slice that reached only some CTAs shows up by CTA rank).
    `release`: the ring's protocol (`compile_multicast_load`)."""
    return verify_multicast_kernel(multicast, compile_multicast_load(multicast, release=release))


def verify_multicast_kernel(multicast: MulticastPlan, compiled: CompiledKernel) -> list[Verdict]:
    """`verify_multicast_load` of a compiled cluster kernel that is called as tmakit's is, (src, each
    CTA's copy, stream), and stores what each CTA received (a comparison ring of one's own)."""
    import torch

    plan = multicast.load
    src = make_input_tensor(plan)
    bits_type = signed_view_dtype(plan.config.element)
    copies = torch.full(multicast.copies_shape, POISON, dtype=bits_type, device="cuda")
    compiled(to_cute_tensor(src), to_cute_tensor(copies.view(src.dtype)), current_stream())
    return [compare_with_input(plan, src, copies[rank]) for rank in range(multicast.cluster_size)]


def make_dot_inputs(dot: ClusterDotPlan) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, X) on the GPU, position-hashed (`make_input_tensor`). X is its hash read backwards along
    each row: made as A's would be, it would equal A[0] and a kernel that read A's tile twice (or
    X's) would pass for batch 0."""
    return make_input_tensor(dot.a_load), make_input_tensor(dot.x_load).flip(-1).contiguous()


# A row's fp32 sum against torch's fp32 sum, relative to sum |a * x|: every product of two fp16
# or bf16 values is exact in fp32, so only the two summation orders differ, by a few units of
# 2^-24 per partial sum (about 1e-7 on these inputs); a missing or doubled tile is off by far more.
DOT_TOLERANCE = 1e-5


def compare_dot(
    dot: ClusterDotPlan,
    a: torch.Tensor,
    x: torch.Tensor,
    out: torch.Tensor,
    tolerance: float = DOT_TOLERANCE,
) -> str:
    """Every out[b, m] against torch's `(A.float() * X.float()).sum(-1)`, within `tolerance` of
    sum |a * x|: a one-line verdict, "ok ..." or "WRONG ..." naming the first wrong (batch, row),
    its strip and its CTA's rank. A NaN (the poison, never written) counts as wrong."""
    import torch

    products = a.float() * x.float()
    expected = products.sum(-1)
    scale = products.abs().sum(-1).clamp_min(torch.finfo(torch.float32).tiny)
    del products
    relative = (out.float() - expected).abs() / scale
    wrong = ~(relative <= tolerance)
    if not bool(wrong.any()):
        return (
            f"ok: {out.numel()} row dots within {relative.max().item():.1e} of torch's fp32 sum "
            f"(relative to sum |a * x|, tolerance {tolerance:.0e})"
        )
    batch, row = (int(i) for i in torch.nonzero(wrong)[0])
    return (
        f"WRONG: {int(wrong.sum())} of {out.numel()} row dots; first at (batch {batch}, row {row}), "
        f"strip {row // dot.tile[0]}, CTA rank {batch % dot.cluster_size} of its cluster: "
        f"{out[batch, row].item()} vs {expected[batch, row].item()}"
    )


def run_cluster_dot(dot: ClusterDotPlan, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """One launch on (A, X) into a NaN-poisoned (B, M) fp32 output, returned."""
    import torch

    out = torch.full(dot.out_shape, float("nan"), dtype=torch.float32, device="cuda")
    compile_cluster_dot(dot)(to_cute_tensor(a), to_cute_tensor(x), to_cute_tensor(out), current_stream())
    torch.cuda.synchronize()
    return out


def verify_cluster_dot(dot: ClusterDotPlan) -> str:
    """The cluster row dot on position-hashed inputs, every row compared (`compare_dot`)."""
    a, x = make_dot_inputs(dot)
    return compare_dot(dot, a, x, run_cluster_dot(dot, a, x))
