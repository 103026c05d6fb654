"""The load family's public function: `load_tiles`, a tensor's tiles as TMA puts them in shared
memory (`config_for` and `padded_empty`, which describe and allocate what it loads, are the
core's: `tmakit.api`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..api.load import config_for
from ..api.tensors import check_torch_tensor, compile_check, import_torch
from ..config import SEED
from ..plan import LoadPlan, check_run_time_extents, stand_in_config
from ..runtime.compile import to_cute_tensor
from ..runtime.device import current_stream
from ..runtime.dispatch import CallTable
from ..runtime.launch import tvm_ffi_available
from ..validate import check_base_address, check_outer_strides, typed
from .launch import compile_tile_load

if TYPE_CHECKING:
    import torch

__all__ = ["load_tiles"]

# torch.compiler.is_compiling, asked first by `load_tiles`: a trace records its torch op instead.
is_compiling = compile_check(globals(), "is_compiling")


def load_tiles(tensor: torch.Tensor, tile: tuple[int, int] = SEED.tile, swizzle: int = 0) -> torch.Tensor:
    """Load `tensor` tile by tile with TMA and return what arrived in shared memory, tile by tile.
    Compiled once per dtype, rank, layout, tile and swizzle where TVM-FFI is installed (else once
    per shape); a call like one seen before skips the planning, not the check of the address.

    Args:
        tensor: a CUDA tensor TMA can load (`config_for`'s rules).
        tile: (rows, columns) of the TMA box.
        swizzle: the shared-memory swizzle in bytes: 0, 32, 64 or 128.

    Returns:
        A row-major tensor of the padded shape (whole tiles), TMA's zeros past the tensor's edge.

    Raises:
        TmaConfigError: before anything compiles, for what TMA cannot load (`config_for`); while
            torch.compile traces the call, what the op's fake refuses, wrapped in dynamo's error."""
    if is_compiling():  # its op, which a trace records (TMA's loads alone, as this function)
        return _ops().load_tiles.default(tensor, *tile, swizzle)
    torch = import_torch("load_tiles")
    padded_shape, launch = _LOADS.known(
        lambda: (tensor.shape, tensor.stride(), tensor.dtype, tensor.device, typed(tile), typed(swizzle)),
        lambda: plan_load_tiles(tensor, tile, swizzle),
    )
    check_base_address(tensor.data_ptr())  # every call: where the tensor lies is not in the key
    out = torch.empty(padded_shape, dtype=tensor.dtype, device=tensor.device)
    launch(tensor, out)
    return out


def _ops() -> Any:
    """`torch.ops.tmakit`, its ops registered (`tmakit.ops`, imported by the first traced call)."""
    from .. import ops

    return ops.torch.ops.tmakit


# The calls seen (`runtime.dispatch.CallTable`): (padded shape, launch) by the tensor's shape, strides, dtype
# and device, the tile and the swizzle.
_LOADS: CallTable = CallTable()


def plan_load_tiles(
    tensor: torch.Tensor, tile: tuple[int, int], swizzle: int
) -> tuple[tuple[int, ...], Callable[[torch.Tensor, torch.Tensor], None]]:
    """A new call's checks in full: the padded shape it returns and how to launch it."""
    import_torch("load_tiles")
    check_torch_tensor(tensor, "load_tiles", "tensor")
    config = config_for(tensor, tile, swizzle)
    plan = LoadPlan(config)
    if not tvm_ffi_available():
        compiled = compile_tile_load(plan, consumer="store")

        def launch(tensor: torch.Tensor, out: torch.Tensor) -> None:
            compiled(to_cute_tensor(tensor), to_cute_tensor(out), current_stream())

        return plan.padded_shape, launch
    check_run_time_extents(config.shape, config.tile)
    rank = len(config.shape)
    stand_in = stand_in_config(rank, config.dtype, config.tile, config.major, swizzle=swizzle)
    compiled = compile_tile_load(LoadPlan(stand_in), consumer="store", tvm_ffi=True, shape_generic=True)
    nbytes, contiguous = config.element.nbytes, config.contiguous_index
    fixed = check_outer_strides(config.shape, config.element_strides, nbytes, contiguous)

    def launch_generic(tensor: torch.Tensor, out: torch.Tensor) -> None:
        compiled.function(tensor if fixed is None else tensor.as_strided(config.shape, fixed), out)

    return plan.padded_shape, launch_generic
