"""Running tile loads: compile once per configuration, verify on the GPU, time.

This is the experiment layer over `kernels.tile_load`; the CLI, the benchmarks and the tests
call it. Compiling needs no GPU (the tensors are descriptions only).
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from typing import Any

from . import verify
from .compile import CompiledKernel, compile_kernel, fake_source, fake_tensor, placeholder_stream
from .plan import LoadPlan


@functools.lru_cache(maxsize=256)
def compile_tile_load(
    plan: LoadPlan,
    consumer: str = "store",
    tile_shift: tuple[int, int] = (0, 0),
    keep_ptx: bool = False,
    tvm_ffi: bool = False,
) -> CompiledKernel:
    """Compile the tile-load kernel for sm_90a. `consumer="none"` is the seed's load-only
    kernel; `tile_shift` is for verifier tests only; `tvm_ffi` as in `compile_kernel`."""
    from .kernels.tile_load import TileLoadKernel

    element = plan.config.element
    src = fake_source(plan.config)
    scratch = {
        "none": src,
        "store": fake_tensor(element, plan.padded_shape),
        "raw": fake_tensor(verify.RAW_BYTE, (plan.total_tile_loads, plan.expected_tx_bytes)),
    }[consumer]
    return compile_kernel(
        TileLoadKernel(plan, consumer=consumer, tile_shift=tile_shift),
        src,
        scratch,
        placeholder_stream(env=tvm_ffi),
        keep_ptx=keep_ptx,
        tvm_ffi=tvm_ffi,
    )


@dataclass(frozen=True)
class LoadRun:
    """What one GPU run of the load experiment found."""

    verdict: verify.Verdict
    compile_seconds: float
    kernel_us: list[float]  # load-only kernel, device time per launch (graph replay samples)

    @property
    def median_us(self) -> float:
        return statistics.median(self.kernel_us)


def verify_tile_load(plan: LoadPlan, tile_shift: tuple[int, int] = (0, 0)) -> verify.Verdict:
    """Load every tile on the GPU, store each back to a poisoned output, compare every element's
    bits on the device (the out-of-bounds part of edge tiles included: it must arrive as zeros)."""
    import torch

    from . import gpu
    from .compile import to_cute_tensor

    compiled = compile_tile_load(plan, consumer="store", tile_shift=tile_shift)
    src = gpu.make_input_tensor(plan)
    bits_type = gpu.signed_view_dtype(plan.config.element)
    out = torch.full(plan.padded_shape, -1, dtype=bits_type, device="cuda")  # all-ones: the poison
    compiled(to_cute_tensor(src), to_cute_tensor(out.view(src.dtype)), gpu.current_stream())
    return compare_with_input(plan, src, out)


def compare_with_input(plan: LoadPlan, src: Any, out: Any) -> verify.Verdict:
    """Compare a padded store-back `out` with the GPU input `src`, every element's bits, on the
    device: the input where the tensor is, zeros past its edge (TMA's out-of-bounds fill)."""
    import torch

    from . import gpu

    bits_type = gpu.signed_view_dtype(plan.config.element)
    expected = torch.zeros(plan.padded_shape, dtype=bits_type, device="cuda")
    rows, cols = plan.matrix_shape
    expected[..., :rows, :cols] = src.view(bits_type)
    return verify.compare_tiles(plan, expected, out.view(bits_type))


def dump_shared_bytes(plan: LoadPlan) -> Any:
    """The raw shared-memory bytes of every tile load, as TMA placed them (swizzle included):
    uint8 array (total tile loads, tile bytes), tile loads ordered (batch, row_block, column_tile)."""
    import numpy as np

    from . import gpu
    from .compile import to_cute_tensor

    compiled = compile_tile_load(plan, consumer="raw")
    src = gpu.make_input_tensor(plan)
    poison = np.full((plan.total_tile_loads, plan.expected_tx_bytes), 0xFF, dtype=np.uint8)
    out = gpu.bits_to_device(poison, verify.RAW_BYTE)
    compiled(to_cute_tensor(src), to_cute_tensor(out), gpu.current_stream())
    return gpu.device_to_bits(out)


def time_tile_load(plan: LoadPlan) -> list[float]:
    """Device time of the load-only kernel (microseconds per launch, one sample a graph replay)."""
    from . import gpu
    from .bench import graph_samples_us
    from .compile import to_cute_tensor

    compiled = compile_tile_load(plan, consumer="none")
    src = to_cute_tensor(gpu.make_input_tensor(plan))
    return graph_samples_us([lambda: compiled(src, src, gpu.current_stream())], samples=30)


def run_load_on_gpu(plan: LoadPlan) -> LoadRun:
    compile_seconds = compile_tile_load(plan, consumer="store").compile_seconds
    verdict = verify_tile_load(plan)
    return LoadRun(verdict, compile_seconds, time_tile_load(plan))


def check_on_gpu(config: Any) -> dict:
    """Verify one configuration on the GPU: the logical view (every element, through the
    swizzled layout) and the physical shared-memory bytes (against the CPU model of TMA).
    Returns a JSON-ready dict with "status" ok / mismatch."""
    plan = LoadPlan(config)
    verdict = verify_tile_load(plan)
    result = {"status": "ok" if verdict.ok else "mismatch", "logical": str(verdict)}
    physical = verify.compare_shared_bytes(plan, dump_shared_bytes(plan))
    result["physical"] = str(physical)
    if not physical.ok:
        result["status"] = "mismatch"
    return result


@functools.lru_cache(maxsize=64)
def compile_multicast_load(multicast: Any, keep_ptx: bool = False, store: bool = True) -> CompiledKernel:
    """Compile the cluster kernel (`kernels.multicast`) for sm_90a: multicast, or the baseline;
    single-tile, or an N-stage ring per CTA when the plan has stages > 1 (`store=False`: the
    ring's consumers only wait and release, for timing)."""
    from .kernels.multicast import MulticastLoadKernel, PipelinedMulticastKernel

    plan = multicast.load
    src = fake_source(plan.config)
    copies = fake_tensor(plan.config.element, multicast.copies_shape)
    if multicast.stages > 1:
        kernel = PipelinedMulticastKernel(multicast, store)
    elif not store:
        raise ValueError("the single-tile multicast kernel always stores (use stages > 1 for load-only)")
    else:
        kernel = MulticastLoadKernel(multicast)
    return compile_kernel(kernel, src, copies, placeholder_stream(), keep_ptx=keep_ptx)


def verify_multicast_load(multicast: Any) -> list[verify.Verdict]:
    """Every CTA of every cluster stores the tiles it received; each CTA's copy is compared with
    the input, every element (so a slice that reached only some CTAs shows up by CTA rank)."""
    import torch

    from . import gpu
    from .compile import to_cute_tensor

    plan = multicast.load
    compiled = compile_multicast_load(multicast)
    src = gpu.make_input_tensor(plan)
    bits_type = gpu.signed_view_dtype(plan.config.element)
    copies = torch.full(multicast.copies_shape, -1, dtype=bits_type, device="cuda")
    compiled(to_cute_tensor(src), to_cute_tensor(copies.view(src.dtype)), gpu.current_stream())
    return [compare_with_input(plan, src, copies[rank]) for rank in range(multicast.cluster_size)]
