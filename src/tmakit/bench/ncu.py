"""Nsight Compute: the command line tmakit profiles with, its CSV parsed into microseconds and
bytes, and the program it profiles (`python -m tmakit.bench.ncu CONFIG_JSON LAUNCHES`: the load
family's load-only tile load, read by name)."""

from __future__ import annotations

import csv
import io
import json
import statistics
import subprocess
import sys

from .. import registry
from ..check.inputs import make_input_tensor
from ..check.isolate import config_from_json, config_to_json
from ..plan import LoadPlan
from ..runtime.compile import to_cute_tensor
from ..runtime.device import current_stream

# Nsight Compute's units, to microseconds and bytes.
NCU_UNIT_SCALE = {
    "ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
    "byte": 1.0, "B": 1.0, "Kbyte": 1e3, "KB": 1e3, "Mbyte": 1e6, "MB": 1e6, "Gbyte": 1e9, "GB": 1e9,
}  # fmt: skip


def parse_ncu_csv(text: str) -> dict[str, list[float]]:
    """Metric name -> values (times in us, sizes in bytes) from `ncu --csv` output, one value per
    profiled kernel; lines that are not CSV records (the program's own output) are skipped."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    values: dict[str, list[float]] = {}
    for record in csv.DictReader(io.StringIO("\n".join(lines))):
        if record["Metric Value"] in ("n/a", ""):  # a counter this kernel never touched
            continue
        unit = record.get("Metric Unit", "")
        if unit not in NCU_UNIT_SCALE and ("second" in unit or "byte" in unit):  # counts pass as they are
            raise ValueError(f"unknown Nsight Compute unit {unit!r} for {record['Metric Name']}")
        value = float(record["Metric Value"].replace(",", "")) * NCU_UNIT_SCALE.get(unit, 1.0)
        values.setdefault(record["Metric Name"], []).append(value)
    return values


def ncu_kernel_times(plan: LoadPlan, launches: int = 10) -> dict:
    """Nsight Compute's gpu__time_duration and dram__bytes_read for the load-only kernel, caches
    flushed before each launch (ncu's default), clocks left alone (--clock-control none)."""
    command = ncu_command(
        ["--metrics", "gpu__time_duration.sum,dram__bytes_read.sum"],
        lambda total: [sys.executable, "-m", "tmakit.bench.ncu", config_to_json(plan.config), str(total)],
        skip=2,
        count=launches,
    )
    completed = subprocess.run(command, capture_output=True, text=True)
    values = parse_ncu_csv(completed.stdout)
    times = values.get("gpu__time_duration.sum", [])
    reads = values.get("dram__bytes_read.sum", [])
    if not times:
        return {"error": (completed.stderr or completed.stdout)[-1500:], "command": json.dumps(command)}
    return {
        "gpu_time_us": times,
        "median_us": statistics.median(times),
        "dram_bytes_read": reads,
        "median_dram_bytes_read": statistics.median(reads) if reads else None,
    }


def ncu_command(
    arguments: list[str], target, skip: int, count: int, kernels: str = "regex:kernel_cutlass"
) -> list[str]:
    """An Nsight Compute command line: tmakit's kernels only (or those `kernels` names), clocks
    left alone, CSV out, `skip` warm-up launches then `count` profiled; `target(total)` is the
    program's argv, asked to launch `skip + count` times."""
    return [
        "ncu", "--clock-control", "none", "--csv", "-k", kernels,
        "--launch-skip", str(skip), "--launch-count", str(count), *arguments, *target(skip + count),
    ]  # fmt: skip


def profiled_program(config_json: str, launches: int) -> None:
    """What ncu profiles: the load-only kernel launched `launches` times."""
    import torch

    plan = LoadPlan(config_from_json(config_json))
    compile_tile_load = registry.exporting("compile_tile_load", "launch").compile_tile_load
    compiled = compile_tile_load(plan, consumer="none")
    src = to_cute_tensor(make_input_tensor(plan))
    for _ in range(launches):
        compiled(src, src, current_stream())
    torch.cuda.synchronize()


if __name__ == "__main__":
    profiled_program(sys.argv[1], int(sys.argv[2]))
