"""Describe and allocate what TMA loads: `config_for` (a tensor's load configuration, what the
copy's views are described by too) and `padded_empty` (a tensor TMA can load, whatever its
extents). `load_tiles`, which loads one, is the load family's (`tmakit.load.api`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import DTYPES, SEED, LoadConfig, dtype_of, major_of, padded_strides
from ..errors import TmaConfigError
from ..limits import MAX_TENSOR_BYTES
from ..plan import LoadPlan
from ..validate import flag, span_bytes
from .tensors import checked_shape, checked_tensor, import_torch

if TYPE_CHECKING:
    import numpy as np
    import torch


def config_for(
    tensor: torch.Tensor | np.ndarray,
    tile: tuple[int, int] = SEED.tile,
    swizzle: int = 0,
    *,
    on_gpu: bool = True,
) -> LoadConfig:
    """The load configuration of a torch tensor (or numpy array): shape, dtype and strides read
    from the tensor itself - a transposed view stays column-major, never reinterpreted.

    Args:
        tensor: a torch tensor or numpy array of rank 2 to 5.
        tile: (rows, columns) of the TMA box.
        swizzle: the shared-memory swizzle in bytes: 0, 32, 64 or 128.
        on_gpu: require a tensor on a CUDA device (False: describe a CPU tensor or an array).

    Returns:
        The `LoadConfig`, checked as `LoadPlan` checks it.

    Raises:
        TmaConfigError: for a tensor TMA cannot serve: an unsupported dtype, a rank outside 2..5,
            no stride-1 dim, strides not multiples of 16 bytes, a base address not 16-byte
            aligned, a tensor off a CUDA device when `on_gpu`; and for a tile or swizzle TMA
            refuses."""
    shape, dtype, strides = checked_tensor(tensor, flag(on_gpu, "on_gpu"))
    config = LoadConfig(shape, dtype, tile, swizzle, major_of(strides, shape), strides)
    LoadPlan(config)  # validates the strides and the tile
    return config


def padded_empty(
    shape: tuple[int, ...], dtype: torch.dtype | str, major: str = "row", device: str = "cuda"
) -> torch.Tensor:
    """An uninitialised torch tensor of `shape` whose contiguous dim is padded to a multiple of
    16 bytes, so TMA can load it: e.g. a 1000 x 777 bf16 matrix gets 784-element rows. This is how
    odd and prime extents are reached; the view has exactly the wanted shape.

    Args:
        shape: the extents, rank 2 to 5.
        dtype: a torch dtype or tmakit's name of one TMA loads ("bf16").
        major: "row" (each row contiguous) or "col" (each column contiguous).
        device: where to allocate.

    Returns:
        The tensor: `shape` exactly, strides padded.

    Raises:
        TmaConfigError: for a rank outside 2..5, a negative extent, an unknown major, a dtype TMA
            does not load, a span past 2^63 - 1 bytes, or a device this torch cannot allocate on."""
    torch = import_torch("padded_empty")
    shape = checked_shape(shape)
    if major not in ("row", "col"):
        raise TmaConfigError(
            f"major {major!r} is not a layout; use 'row' (rows contiguous) or 'col' (columns contiguous)"
        )
    element = DTYPES[dtype_of(dtype)]
    torch_dtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, element.torch_name)
    strides = padded_strides(shape, element.nbytes, major)
    if 0 not in shape:
        span = span_bytes(shape, strides, element.nbytes)
        if span > MAX_TENSOR_BYTES:
            raise TmaConfigError(
                f"shape {shape} {element.name} with padded rows spans {span} bytes; a tensor can span at "
                f"most {MAX_TENSOR_BYTES} (2^63 - 1): split it"
            )
    try:
        return torch.empty_strided(shape, strides, dtype=torch_dtype, device=device)
    except (AssertionError, RuntimeError, TypeError, ValueError, OverflowError) as error:  # no such device
        raise TmaConfigError(
            f"padded_empty cannot allocate on device {device!r}: {str(error).splitlines()[0]} (pass a device "
            "this torch has, e.g. 'cuda' with a CUDA build of torch)"
        ) from None
