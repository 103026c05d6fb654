"""The load family's GPU experiments: tile loads and pipelined loads run on position-hashed inputs,
every element compared with the input (and, for tile loads, every shared-memory byte against the
CPU model of TMA). Needs a Hopper GPU and torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..check import reference
from ..check.inputs import bits_to_device, device_to_bits, make_input_tensor
from ..check.run import compare_with_input, launch_guarded
from ..config import RAW_BYTE, LoadConfig
from ..limits import POISON
from ..plan import LoadPlan, PipelinePlan
from ..runtime.compile import CompiledKernel, to_cute_tensor
from ..runtime.device import current_stream, signed_view_dtype
from .launch import compile_pipelined_load, compile_tile_load

if TYPE_CHECKING:
    import torch

# What the core reads by name (`registry.exporting`): `tmakit verify`'s verifications.
__all__ = ["check_on_gpu", "verify_pipelined_load"]


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
