"""Running the seed's kernel: compile once per configuration, verify on the GPU, time it.

This is the experiment layer over `kernels.seed_load`; the CLI and tests call it.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass

from . import verify
from .compile import CompiledKernel, compile_kernel, fake_tensor, placeholder_stream
from .plan import LoadPlan


@functools.lru_cache(maxsize=64)
def compile_seed_load(
    plan: LoadPlan,
    store_back: bool = True,
    tile_shift: tuple[int, int] = (0, 0),
    keep_ptx: bool = False,
) -> CompiledKernel:
    """Compile the seed kernel for sm_90a; no GPU needed (the tensors are descriptions only).

    `store_back=False` is the seed's load-only kernel; `tile_shift` is for verifier tests only."""
    from .kernels.seed_load import SeedLoadKernel

    src = fake_tensor(plan.config.element, plan.config.shape)
    out = fake_tensor(plan.config.element, plan.padded_shape) if store_back else src
    return compile_kernel(
        SeedLoadKernel(plan, store_back=store_back, tile_shift=tile_shift),
        src,
        out,
        placeholder_stream(),
        keep_ptx=keep_ptx,
    )


@dataclass(frozen=True)
class SeedRun:
    """What one GPU run of the seed's experiment found."""

    verdict: verify.Verdict
    compile_seconds: float
    kernel_us: list[float]  # load-only kernel, device time per launch (graph replay samples)

    @property
    def median_us(self) -> float:
        return statistics.median(self.kernel_us)


def verify_seed_load(plan: LoadPlan, tile_shift: tuple[int, int] = (0, 0)) -> verify.Verdict:
    """Load every tile on the GPU, store each back to a poisoned output, compare every element."""
    from . import gpu
    from .compile import to_cute_tensor

    compiled = compile_seed_load(plan, store_back=True, tile_shift=tile_shift)
    input_bits = verify.make_input_bits(plan)
    src = gpu.bits_to_device(input_bits, plan.config.element)
    out = gpu.bits_to_device(verify.make_poisoned_output_bits(plan), plan.config.element)
    compiled(to_cute_tensor(src), to_cute_tensor(out), gpu.current_stream())
    found = gpu.device_to_bits(out)  # .cpu() synchronises
    return verify.compare_tiles(plan, verify.expected_output_bits(plan, input_bits), found)


def time_seed_load(plan: LoadPlan) -> list[float]:
    """Device time of the load-only seed kernel (microseconds per launch, one sample a replay)."""
    from . import gpu
    from .compile import to_cute_tensor

    compiled = compile_seed_load(plan, store_back=False)
    src = to_cute_tensor(gpu.bits_to_device(verify.make_input_bits(plan), plan.config.element))
    return gpu.graph_time_us(lambda: compiled(src, src, gpu.current_stream()))


def run_seed_on_gpu(plan: LoadPlan) -> SeedRun:
    compile_seconds = compile_seed_load(plan, store_back=True).compile_seconds
    verdict = verify_seed_load(plan)
    return SeedRun(verdict, compile_seconds, time_seed_load(plan))
