"""Inputs for the experiments, made on the GPU: position-hashed tensors (bit for bit the host's
`reference.position_hash`), and raw bit patterns moved to and from the device."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..config import DType
from ..plan import LoadPlan
from ..runtime.device import signed_view_dtype, torch_dtype
from .reference import position_hash

if TYPE_CHECKING:
    import torch

_HASH_CHUNK_ELEMENTS = 1 << 26  # int64 temporaries of 512 MiB at most


def bits_to_device(bits: np.ndarray, element: DType) -> torch.Tensor:
    """Upload raw bit patterns and reinterpret them as `element` on the GPU."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(bits)).cuda().view(torch_dtype(element))


def make_input_tensor(plan: LoadPlan) -> torch.Tensor:
    """The position-hashed input made on the GPU itself (`verify.position_hash`, bit for bit the
    host's values), with the plan's shape and strides: no host round trip even at gigabytes."""
    import torch

    config = plan.config
    bits = config.element.bits
    tensor = torch.empty_strided(
        config.shape, config.element_strides, dtype=signed_view_dtype(config.element), device="cuda"
    )
    rows, cols = plan.matrix_shape
    matrices = tensor.view(signed_view_dtype(config.element)).reshape(plan.batch_count, rows, cols)
    col_index = torch.arange(cols, device="cuda", dtype=torch.int64)[None, :]
    rows_per_chunk = max(1, _HASH_CHUNK_ELEMENTS // cols)
    for batch in range(plan.batch_count):
        for first in range(0, rows, rows_per_chunk):
            row_index = torch.arange(first, min(rows, first + rows_per_chunk), device="cuda")[:, None]
            values = position_hash(row_index, col_index, bits, batch)
            values = values - (((values >> (bits - 1)) & 1) << bits)  # to the signed type's range
            matrices[batch, first : first + len(row_index)] = values.to(matrices.dtype)
    if matrices.data_ptr() != tensor.data_ptr():  # reshape copied: the writes above were lost
        raise AssertionError("the (batch, rows, cols) view does not alias the strided input")
    return tensor.view(torch_dtype(config.element))


def device_to_bits(tensor: torch.Tensor) -> np.ndarray:
    """Download a GPU tensor as raw bit patterns of the same width."""
    import torch

    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    raw = tensor.view(width).cpu().numpy()
    return raw.view(f"uint{8 * tensor.element_size()}")
