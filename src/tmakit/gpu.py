"""The CUDA side of the experiments: finding a Hopper GPU and moving bit patterns through torch.

torch is optional (the `gpu` extra): it is imported only here and only when a GPU run is asked for.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .config import DType


def find_hopper_gpu() -> tuple[str | None, str]:
    """(device name, reason): the name of CUDA device 0 if it is a Hopper (sm_90) GPU that torch
    can use, else None and a sentence saying why not."""
    try:
        import torch
    except ImportError:
        return None, "torch is not installed (GPU runs need the `gpu` extra: pip install torch)"
    if not torch.cuda.is_available():
        return None, "no CUDA GPU is visible to torch"
    major, minor = torch.cuda.get_device_capability(0)
    name = torch.cuda.get_device_name(0)
    if major != 9:
        return None, f"{name} is sm_{major}{minor}; tmakit's kernels target Hopper (sm_90a)"
    return name, f"{name} (sm_{major}{minor})"


def torch_dtype(element: DType) -> Any:
    import torch

    return getattr(torch, element.torch_name)


def bits_to_device(bits: np.ndarray, element: DType) -> Any:
    """Upload raw bit patterns and reinterpret them as `element` on the GPU."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(bits)).cuda().view(torch_dtype(element))


_SIGNED_OF_WIDTH = {1: "int8", 2: "int16", 4: "int32"}
_HASH_CHUNK_ELEMENTS = 1 << 26  # int64 temporaries of 512 MiB at most


def signed_view_dtype(element: DType) -> Any:
    """The torch integer type of the element's width: raw bits of any dtype compare exactly."""
    import torch

    return getattr(torch, _SIGNED_OF_WIDTH[element.nbytes])


def make_input_tensor(plan: Any) -> Any:
    """The position-hashed input made on the GPU itself (`verify.position_hash`, bit for bit the
    host's values), with the plan's shape and strides: no host round trip even at gigabytes."""
    import torch

    from .verify import position_hash

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


def device_to_bits(tensor: Any) -> np.ndarray:
    """Download a GPU tensor as raw bit patterns of the same width."""
    import torch

    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[tensor.element_size()]
    raw = tensor.view(width).cpu().numpy()
    return raw.view(f"uint{8 * tensor.element_size()}")


def current_stream() -> Any:
    """torch's current stream as the CUstream CuTe DSL launches take (graph capture needs it)."""
    import cuda.bindings.driver as cuda
    import torch

    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)
