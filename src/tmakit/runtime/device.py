"""The torch side of a launch: finding a Hopper GPU, torch's dtypes and current stream.

torch is optional (the `gpu` extra): it is imported only when a GPU run is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..config import DType

if TYPE_CHECKING:
    import torch


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


def torch_dtype(element: DType) -> torch.dtype:
    """The torch dtype of a tmakit `DType`."""
    import torch

    return getattr(torch, element.torch_name)


_SIGNED_OF_WIDTH = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def signed_view_dtype(element: DType) -> torch.dtype:
    """The torch integer type of the element's width: raw bits of any dtype compare exactly."""
    import torch

    return getattr(torch, _SIGNED_OF_WIDTH[element.nbytes])


def current_stream() -> Any:
    """torch's current stream as the CUstream CuTe DSL launches take (graph capture needs it)."""
    import cuda.bindings.driver as cuda
    import torch

    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)
