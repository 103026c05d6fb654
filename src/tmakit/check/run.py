"""The GPU experiments: run each kernel family on position-hashed inputs and compare what it
wrote with the reference, every element (and, for tile loads, every shared-memory byte against
the CPU model). Needs a Hopper GPU and torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..config import DTYPES, RAW_BYTE, LoadConfig, dtype_of
from ..limits import POISON
from ..plan import (
    DEFAULT_RELEASE,
    ClusterDotPlan,
    CopyPlan,
    LoadPlan,
    MulticastPlan,
    PipelinePlan,
    copy_destination,
)
from ..runtime.compile import CompiledKernel, to_cute_tensor
from ..runtime.device import current_stream, signed_view_dtype
from ..runtime.launch import (
    compile_cluster_dot,
    compile_copy,
    compile_multicast_load,
    compile_pipelined_load,
    compile_tile_load,
    new_guard,
    raise_if_timed_out,
)
from . import reference
from .inputs import bits_to_device, device_to_bits, make_input_tensor

if TYPE_CHECKING:
    import torch


def verify_tile_load(plan: LoadPlan, tile_shift: tuple[int, int] = (0, 0)) -> reference.Verdict:
    """Load every tile on the GPU, store each back to a poisoned output, compare every element's
    bits on the device (the out-of-bounds part of edge tiles included: it must arrive as zeros)."""
    import torch

    compiled = compile_tile_load(plan, consumer="store", tile_shift=tile_shift)
    src = make_input_tensor(plan)
    bits_type = signed_view_dtype(plan.config.element)
    out = torch.full(plan.padded_shape, POISON, dtype=bits_type, device="cuda")
    compiled(to_cute_tensor(src), to_cute_tensor(out.view(src.dtype)), current_stream())
    return compare_with_input(plan, src, out)


def compare_with_input(plan: LoadPlan, src: torch.Tensor, out: torch.Tensor) -> reference.Verdict:
    """Compare a padded store-back `out` with the GPU input `src`, every element's bits, on the
    device: the input where the tensor is, zeros past its edge (TMA's out-of-bounds fill)."""
    import torch

    bits_type = signed_view_dtype(plan.config.element)
    expected = torch.zeros(plan.padded_shape, dtype=bits_type, device="cuda")
    rows, cols = plan.matrix_shape
    expected[..., :rows, :cols] = src.view(bits_type)
    return reference.compare_tiles(plan, expected, out.view(bits_type))


def dump_shared_bytes(plan: LoadPlan) -> np.ndarray:
    """The raw shared-memory bytes of every tile load, as TMA placed them (swizzle included):
    uint8 array (total tile loads, tile bytes), tile loads ordered (batch, row_block, column_tile)."""

    compiled = compile_tile_load(plan, consumer="raw")
    src = make_input_tensor(plan)
    poison = np.full((plan.total_tile_loads, plan.expected_tx_bytes), reference.POISON[8], dtype=np.uint8)
    out = bits_to_device(poison, RAW_BYTE)
    compiled(to_cute_tensor(src), to_cute_tensor(out), current_stream())
    return device_to_bits(out)


def check_on_gpu(config: LoadConfig) -> dict:
    """Verify one configuration on the GPU: the logical view (every element, through the
    swizzled layout) and the physical shared-memory bytes (against the CPU model of TMA).
    Returns a JSON-ready dict with "status" ok / mismatch."""
    plan = LoadPlan(config)
    verdict = verify_tile_load(plan)
    result = {"status": "ok" if verdict.ok else "mismatch", "logical": str(verdict)}
    physical = reference.compare_shared_bytes(plan, dump_shared_bytes(plan))
    result["physical"] = str(physical)
    if not physical.ok:
        result["status"] = "mismatch"
    return result


def verify_multicast_load(
    multicast: MulticastPlan, release: str = DEFAULT_RELEASE
) -> list[reference.Verdict]:
    """Every CTA of every cluster stores the tiles it received; each CTA's copy is compared with
    the input, every element (so a slice that reached only some CTAs shows up by CTA rank).
    `release`: the ring's protocol (`compile_multicast_load`)."""
    return verify_multicast_kernel(multicast, compile_multicast_load(multicast, release=release))


def verify_multicast_kernel(multicast: MulticastPlan, compiled: CompiledKernel) -> list[reference.Verdict]:
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


def run_pipelined_load(
    pipeline: PipelinePlan,
    consumer: str,
    src: torch.Tensor,
    hang_guard: bool = False,
    compiled: CompiledKernel | None = None,
) -> torch.Tensor:
    """Launch once on `src` and return the consumer's output (raises TmaHangError if guarded).
    `compiled`: a kernel called as `compile_pipelined_load`'s is, run instead of the plan's (a
    test's kernel with a faulty ring, compiled with the hang guard when `hang_guard`)."""
    import torch

    plan = pipeline.load
    if compiled is None:
        compiled = compile_pipelined_load(pipeline, consumer, hang_guard=hang_guard)
    if consumer == "rowsum":
        out = torch.zeros(pipeline.rowsum_shape, dtype=torch.float32, device="cuda")  # added into
    else:
        bits = signed_view_dtype(plan.config.element)
        out = torch.full(plan.padded_shape, POISON, dtype=bits, device="cuda").view(src.dtype)
    return launch_guarded(compiled, src, out, hang_guard)


def run_copy(copy: CopyPlan, src: torch.Tensor, hang_guard: bool = False) -> torch.Tensor:
    """Copy `src` once into a poisoned destination of the plan's layout and return it (raises
    TmaHangError if guarded)."""
    import torch

    plan = copy.load
    compiled = compile_copy(copy, hang_guard=hang_guard)
    bits = signed_view_dtype(plan.config.element)
    strides = copy_destination(copy).element_strides
    out = torch.empty_strided(plan.config.shape, strides, dtype=bits, device="cuda")
    out.fill_(POISON)  # every element the destination has
    return launch_guarded(compiled, src, out.view(src.dtype), hang_guard)


def launch_guarded(
    compiled: CompiledKernel, src: torch.Tensor, out: torch.Tensor, hang_guard: bool
) -> torch.Tensor:
    """Launch a ring kernel on (src, out) with fresh guard words; raise TmaHangError if guarded
    and a wait ran out."""
    import torch

    guard = new_guard()
    compiled(to_cute_tensor(src), to_cute_tensor(out), to_cute_tensor(guard), current_stream())
    torch.cuda.synchronize()
    if hang_guard:
        raise_if_timed_out(guard)
    return out


def verify_pipelined_load(
    pipeline: PipelinePlan,
    consumer: str = "store",
    hang_guard: bool = False,
    compiled: CompiledKernel | None = None,
) -> reference.Verdict | str:
    """Store-back: every element compared (a `Verdict`). Row sums: every row against torch's
    row sum of the same tensor in fp64 (a one-line verdict string, "ok ..." or not).
    `hang_guard` and `compiled` as `run_pipelined_load` takes them."""
    import torch

    plan = pipeline.load
    src = make_input_tensor(plan)
    out = run_pipelined_load(pipeline, consumer, src, hang_guard, compiled)
    if consumer == "store":
        return compare_with_input(plan, src, out)
    rows = plan.matrix_shape[0]
    found = out[..., :rows].double()
    expected_sums = src.double().sum(-1)
    scale = src.double().abs().sum(-1).clamp_min(1.0)
    relative = (found - expected_sums).abs() / scale
    error = relative.max().item()
    if error < 1e-5:
        return f"ok: {found.numel()} row sums within {error:.1e} of torch (relative to sum |x|)"
    first = [int(i) for i in torch.nonzero(relative >= 1e-5)[0]]
    return (
        f"WRONG: row sums off by up to {error:.1e} (relative to sum |x|); first wrong row {first}, "
        f"row block {first[-1] // plan.config.tile[0]}: {found[tuple(first)].item()} vs "
        f"{expected_sums[tuple(first)].item()}"
    )


def verify_copy(copy: CopyPlan, hang_guard: bool = False) -> reference.Verdict:
    """A copy into a poisoned destination, every element compared with the input (the
    destination padded like a store-back scratch, then the same check)."""
    import torch

    plan = copy.load
    src = make_input_tensor(plan)
    out = run_copy(copy, src, hang_guard)
    bits = signed_view_dtype(plan.config.element)
    padded = torch.zeros(plan.padded_shape, dtype=bits, device="cuda")
    rows, cols = plan.matrix_shape
    padded[..., :rows, :cols] = out.view(bits)
    return compare_with_input(plan, src, padded)


def first_wrong_tile(found: torch.Tensor, expected: torch.Tensor, tile: tuple[int, int]) -> str | None:
    """None when `found` equals `expected` bit for bit; else the first wrong element and its tile
    (batch..., row block, column tile)."""
    import torch

    bits = signed_bits(found)
    wrong = bits(found) != bits(expected)
    if not bool(wrong.any()):
        return None
    index = [int(i) for i in torch.nonzero(wrong)[0]]
    *batch, row, col = index
    return (
        f"{int(wrong.sum())} wrong elements; first at {tuple(index)}, tile "
        f"{(*batch, row // tile[0], col // tile[1])}: "
        f"{found[tuple(index)].item()} vs {expected[tuple(index)].item()}"
    )


def signed_bits(tensor: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """A view of a tensor's raw bits as the signed integer type of its width (exact compares)."""
    bits_dtype = signed_view_dtype(DTYPES[dtype_of(tensor.dtype)])
    return lambda t: t.view(bits_dtype)
