"""The GPU experiments: run a kernel on position-hashed inputs and compare what it wrote with the
reference, every element. Here what every family's experiment shares (a padded store-back compared
with its input, a ring launched with its hang guard, the first wrong tile) and the copy's; a
family's own experiments are its `check` part (`tmakit.registry`). Needs a Hopper GPU and torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..config import DTYPES, dtype_of
from ..limits import POISON
from ..plan import CopyPlan, LoadPlan, copy_destination
from ..runtime.compile import CompiledKernel, to_cute_tensor
from ..runtime.device import current_stream, signed_view_dtype
from ..runtime.launch import compile_copy, new_guard, raise_if_timed_out
from . import reference
from .inputs import make_input_tensor

if TYPE_CHECKING:
    import torch


def compare_with_input(plan: LoadPlan, src: torch.Tensor, out: torch.Tensor) -> reference.Verdict:
    """Compare a padded store-back `out` with the GPU input `src`, every element's bits, on the
    device: the input where the tensor is, zeros past its edge (TMA's out-of-bounds fill)."""
    import torch

    bits_type = signed_view_dtype(plan.config.element)
    expected = torch.zeros(plan.padded_shape, dtype=bits_type, device="cuda")
    rows, cols = plan.matrix_shape
    expected[..., :rows, :cols] = src.view(bits_type)
    return reference.compare_tiles(plan, expected, out.view(bits_type))


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
