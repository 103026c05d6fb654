"""`tmakit demo`: the seed's kernel (or, with a cluster, the multicast kernel), end to end, on
whatever machine this is. The kernels, their compiles and their GPU runs are the load and cluster
families', read by name (`tmakit.registry.exporting`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import registry
from .explain import highlight_tile
from .model import SHOWN_TILES, multicast_schedule, replay, seed_schedule, tiles_to_replay
from .plan import LoadPlan
from .ptx import TMA_INSTRUCTIONS, expect_tx_byte_counts, find_instructions
from .runtime.compile import TARGET_ARCH, dsl_version_warning, installed_dsl_version
from .runtime.device import find_hopper_gpu

MULTICAST_OPCODE = "multicast::cluster"  # what marks a TMA load that lands in several CTAs


def run_demo(
    plan: LoadPlan,
    highlight: tuple[int, int] | None = None,
    echo: Callable = print,
    multicast: Any = None,
    report: dict[str, Any] | None = None,
) -> bool:
    """Print the plan, then run and verify the kernel on a Hopper GPU, or, without one, compile it
    for sm_90a and show its TMA instructions. With `multicast` (a `MulticastPlan`), the cluster
    kernel: every CTA's copy is verified (GPU) or the multicast load is found in the PTX (CPU).
    Returns whether everything checked out; `report` (`tmakit demo --json`) gets what was found,
    by name."""
    report = {} if report is None else report
    diagram = plan.diagram(highlight_tile(plan, highlight))  # a wrong tile is refused before printing
    plan.check_specialised()  # the demo's kernel is compiled for this shape: refused before printing too
    report["dsl_version"] = installed_dsl_version()
    echo(f"CuTe DSL (nvidia-cutlass-dsl) {report['dsl_version'] or 'not installed'}")
    warning = dsl_version_warning()
    if warning:
        echo(warning)
    echo("")
    echo(plan.summary(multicast.grid_line() if multicast else None))
    if multicast is not None:
        echo(multicast.summary())
    echo("")
    echo(diagram)
    echo("")

    gpu_name, why = find_hopper_gpu()
    report["gpu"] = gpu_name
    if gpu_name is not None:
        if multicast is not None:
            return _demo_multicast_on_gpu(multicast, gpu_name, echo, report)
        return _demo_on_gpu(plan, gpu_name, echo, report)
    report["no_gpu_because"] = why
    echo(f"No Hopper GPU here: {why}.")
    echo(f"Compiling the kernel for {TARGET_ARCH} anyway and reading its PTX.")
    if multicast is not None:
        return _demo_multicast_compile_only(multicast, echo, report)
    return _demo_compile_only(plan, echo, report)


def _demo_on_gpu(plan: LoadPlan, gpu_name: str, echo: Callable, report: dict[str, Any]) -> bool:
    echo(f"GPU: {gpu_name}")
    run = registry.exporting("run_load_on_gpu", "bench").run_load_on_gpu(plan)
    report.update(
        compile_seconds=run.compile_seconds,
        verify=str(run.verdict),
        correct=run.verdict.ok,
        kernel_median_us=run.median_us,
    )
    echo(f"compile:  {run.compile_seconds:.2f} s (excluded from the kernel time)")
    echo(f"verify:   {run.verdict}")
    echo(
        f"kernel:   {run.median_us:.1f} us median device time, load-only "
        f"(min {min(run.kernel_us):.1f}, max {max(run.kernel_us):.1f}; CUDA-graph replay, "
        f"L2 warm), {plan.tensor_bytes / run.median_us / 1e3:.0f} GB/s read"
    )
    return run.verdict.ok


def _demo_multicast_on_gpu(multicast: Any, gpu_name: str, echo: Callable, report: dict[str, Any]) -> bool:
    echo(f"GPU: {gpu_name}")
    verdicts = registry.exporting("verify_multicast_load", "check").verify_multicast_load(multicast)
    report["verify"] = [str(verdict) for verdict in verdicts]
    report["correct"] = all(verdict.ok for verdict in verdicts)
    for rank, verdict in enumerate(verdicts):
        echo(f"verify:   CTA {rank} of every cluster: {verdict}")
    return all(verdict.ok for verdict in verdicts)


def _show_instructions(ptx: str, echo: Callable, report: dict[str, Any]) -> dict:
    found = find_instructions(ptx)
    report["ptx_instructions"] = {
        prefix: found[prefix].count if prefix in found else 0 for prefix in TMA_INSTRUCTIONS
    }
    for prefix, meaning in TMA_INSTRUCTIONS.items():
        if prefix in found:
            echo(f"  {found[prefix].opcode}\n      x{found[prefix].count}: {meaning}")
        else:
            echo(f"  MISSING {prefix}: {meaning}")
    echo("")
    return found


def _expect_tx_agrees(
    ptx: str, expected_tx_bytes: int, echo: Callable, ok: bool, report: dict[str, Any]
) -> bool:
    counts = expect_tx_byte_counts(ptx)
    report["expect_tx_bytes"] = {"ptx": list(counts), "plan": expected_tx_bytes}
    ok = ok and set(counts) == {expected_tx_bytes}
    echo(
        f"expect_tx in PTX: {counts} bytes; plan expects {expected_tx_bytes} -> "
        + ("agree" if ok else "DISAGREE")
    )
    return ok


def _replayed(plan: LoadPlan, echo: Callable) -> int:
    """The tiles of a block the demo replays (its loads repeat every 2 tiles), said when not all."""
    replayed = tiles_to_replay(plan.tiles_per_block, 2)
    if replayed < plan.tiles_per_block:
        echo(
            f"(its first {replayed} of {plan.tiles_per_block} tiles, which the rest repeat; "
            "tmakit check --full replays them all)"
        )
    return replayed


def _demo_compile_only(plan: LoadPlan, echo: Callable, report: dict[str, Any] | None = None) -> bool:
    report = {} if report is None else report
    compile_tile_load = registry.exporting("compile_tile_load", "launch").compile_tile_load
    compiled = compile_tile_load(plan, consumer="store", keep_ptx=True)
    echo(f"compile:  {compiled.compile_seconds:.2f} s")
    report["compile_seconds"] = compiled.compile_seconds
    found = _show_instructions(compiled.ptx or "", echo, report)
    echo("Block 0's loads replayed on the CPU model of TMA and mbarrier (tmakit check)")
    replayed = _replayed(plan, echo)
    schedule = replay(seed_schedule(plan, tiles=replayed))
    echo(schedule.describe(limit=SHOWN_TILES))
    echo("")
    ok = all(p in found for p in TMA_INSTRUCTIONS) and schedule.ok
    report["schedule_ok"] = schedule.ok
    return _expect_tx_agrees(compiled.ptx or "", plan.expected_tx_bytes, echo, ok, report)


def _demo_multicast_compile_only(
    multicast: Any, echo: Callable, report: dict[str, Any] | None = None
) -> bool:
    report = {} if report is None else report
    plan = multicast.load
    compile_multicast_load = registry.exporting("compile_multicast_load", "launch").compile_multicast_load
    compiled = compile_multicast_load(multicast, keep_ptx=True)
    echo(f"compile:  {compiled.compile_seconds:.2f} s")
    report["compile_seconds"] = compiled.compile_seconds
    found = _show_instructions(compiled.ptx or "", echo, report)
    load = found.get("cp.async.bulk.tensor")
    multicasts = load is not None and MULTICAST_OPCODE in load.opcode
    report["multicast_load"] = multicasts
    echo(
        f"the TMA load is {'' if multicasts else 'NOT '}a {MULTICAST_OPCODE} load: each CTA issues "
        f"its {multicast.issued_bytes_per_cta}-byte slice into all {multicast.cluster_size} CTAs"
    )
    cluster = "x".join(map(str, multicast.cluster))
    echo(
        f"Cluster 0's loads replayed on the CPU model of TMA and mbarrier (tmakit check --cluster {cluster})"
    )
    replayed = _replayed(plan, echo)
    schedule = replay(multicast_schedule(replayed, multicast.cluster_size, plan.expected_tx_bytes))
    echo(schedule.describe(cta=None, limit=SHOWN_TILES))
    echo("")
    ok = all(p in found for p in TMA_INSTRUCTIONS) and multicasts and schedule.ok
    report["schedule_ok"] = schedule.ok
    return _expect_tx_agrees(compiled.ptx or "", plan.expected_tx_bytes, echo, ok, report)
