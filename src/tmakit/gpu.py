"""The CUDA side of the experiments: finding a Hopper GPU and moving bit patterns through torch.

torch is optional (the `gpu` extra): it is imported only here and only when a GPU run is asked for.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .config import DType

_TORCH_DTYPES = {
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "fp8e4m3": "float8_e4m3fn",
    "fp8e5m2": "float8_e5m2",
    "int8": "int8",
    "uint8": "uint8",
}


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

    return getattr(torch, _TORCH_DTYPES[element.name])


def bits_to_device(bits: np.ndarray, element: DType) -> Any:
    """Upload raw bit patterns and reinterpret them as `element` on the GPU."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(bits)).cuda().view(torch_dtype(element))


_SIGNED_OF_WIDTH = {1: "int8", 2: "int16", 4: "int32"}


def strided_bits_to_device(bits: np.ndarray, config: Any) -> Any:
    """Upload logical bit patterns into a GPU tensor with `config`'s shape and element strides
    (padded rows or a column-major layout stay what they are), typed as `config`'s dtype."""
    import torch

    element = config.element
    width = getattr(torch, _SIGNED_OF_WIDTH[element.nbytes])
    tensor = torch.empty_strided(config.shape, config.element_strides, dtype=width, device="cuda")
    tensor.copy_(torch.from_numpy(np.ascontiguousarray(bits).view(width_name(element))))
    return tensor.view(torch_dtype(element))


def width_name(element: DType) -> str:
    return _SIGNED_OF_WIDTH[element.nbytes]


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


def graph_time_us(launch: Any, launches_per_graph: int = 20, replays: int = 30) -> list[float]:
    """Device time per launch, one sample per graph replay: `launch()` captured
    `launches_per_graph` times into a CUDA graph, each replay timed with events.

    A compiled CuTe DSL call costs ~10 us of host time, as long as a small kernel, so timing
    individual launches measures the host; graph replay leaves only device time."""
    import torch

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        launch()  # warm-up outside the capture (first call loads the module)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(launches_per_graph):
                launch()
        graph.replay()
        torch.cuda.synchronize()
        samples = []
        for _ in range(replays):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            graph.replay()
            end.record(stream)
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1000.0 / launches_per_graph)
    return samples
