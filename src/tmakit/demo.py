"""`tmakit demo`: the seed's kernel, end to end, on whatever machine this is."""

from __future__ import annotations

from collections.abc import Callable

from .bench.suites import run_load_on_gpu
from .model.schedule import replay, seed_schedule
from .plan import LoadPlan
from .ptx import TMA_INSTRUCTIONS, expect_tx_byte_counts, find_instructions
from .runtime.compile import TARGET_ARCH, dsl_version_warning, installed_dsl_version
from .runtime.device import find_hopper_gpu
from .runtime.launch import compile_tile_load


def run_demo(plan: LoadPlan, highlight: tuple[int, int] = (1, 2), echo: Callable = print) -> bool:
    """Print the plan, then run and verify the kernel on a Hopper GPU, or, without one, compile it
    for sm_90a and show its TMA instructions. Returns whether everything checked out."""
    echo(f"CuTe DSL (nvidia-cutlass-dsl) {installed_dsl_version() or 'not installed'}")
    warning = dsl_version_warning()
    if warning:
        echo(warning)
    echo("")
    echo(plan.summary())
    echo("")
    echo(plan.diagram(highlight))
    echo("")

    gpu_name, why = find_hopper_gpu()
    if gpu_name is not None:
        return _demo_on_gpu(plan, gpu_name, echo)
    echo(f"No Hopper GPU here: {why}.")
    echo(f"Compiling the kernel for {TARGET_ARCH} anyway and reading its PTX.")
    return _demo_compile_only(plan, echo)


def _demo_on_gpu(plan: LoadPlan, gpu_name: str, echo: Callable) -> bool:
    echo(f"GPU: {gpu_name}")
    run = run_load_on_gpu(plan)
    echo(f"compile:  {run.compile_seconds:.2f} s (excluded from the kernel time)")
    echo(f"verify:   {run.verdict}")
    echo(
        f"kernel:   {run.median_us:.1f} us median device time, load-only "
        f"(min {min(run.kernel_us):.1f}, max {max(run.kernel_us):.1f}; CUDA-graph replay, "
        f"L2 warm), {plan.tensor_bytes / run.median_us / 1e3:.0f} GB/s read"
    )
    return run.verdict.ok


def _demo_compile_only(plan: LoadPlan, echo: Callable) -> bool:
    compiled = compile_tile_load(plan, consumer="store", keep_ptx=True)
    echo(f"compile:  {compiled.compile_seconds:.2f} s")
    found = find_instructions(compiled.ptx or "")
    for prefix, meaning in TMA_INSTRUCTIONS.items():
        if prefix in found:
            echo(f"  {found[prefix].opcode}\n      x{found[prefix].count}: {meaning}")
        else:
            echo(f"  MISSING {prefix}: {meaning}")
    echo("")
    echo("The seed's run, block 0, replayed on the CPU model of TMA and mbarrier (tmakit check):")
    schedule = replay(seed_schedule(plan))
    echo(schedule.describe())
    echo("")
    counts = expect_tx_byte_counts(compiled.ptx or "")
    ok = set(counts) == {plan.expected_tx_bytes} and all(p in found for p in TMA_INSTRUCTIONS) and schedule.ok
    echo(
        f"expect_tx in PTX: {counts} bytes; plan expects {plan.expected_tx_bytes} -> "
        + ("agree" if ok else "DISAGREE")
    )
    return ok
