"""What DRAM allows a copy on this card: read-only, write-only and read+write streams, each by
several mechanisms (TMA, torch's kernels and its driver memcpy, Triton's plain loads and stores),
timed like `tmakit bench` (eager passes on a stream, L2 cold: buffers rotated) and each profiled
by Nsight Compute over an application range that holds 100 of its operations back to back and
nothing else, so that the driver's memcpy behind torch's `copy_`, which ncu's kernel replay cannot
see, is measured too.

    python3 benchmarks/probes/dram_ceiling.py --out DIR [--mib 1024]     (times, then runs ncu per case)
    python3 benchmarks/probes/dram_ceiling.py --target CASE MIB          (what ncu profiles)

Writes DIR/dram-ceiling.json: per case, bytes moved, us per operation (median), GB/s of
read+write traffic, and ncu's DRAM bytes, range duration and throughput (% of peak sustained,
and bytes / duration as GB/s: the range's gaps included, so a little under the operations' own).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Case -> (direction, what it is). Read+write traffic counts both directions.
CASES = {
    "read-tmakit-load-16x256-8st": ("read", "tmakit pipelined TMA load, load only (16x256 tiles, 8 stages)"),
    "read-tmakit-load-64x256-4st": ("read", "tmakit pipelined TMA load, load only (64x256 tiles, 4 stages)"),
    "read-triton-sum": ("read", "Triton: 16-byte loads, one partial sum per 32 KiB block"),
    "read-torch-sum": ("read", "torch sum"),
    "write-torch-fill": ("write", "torch fill_ (elementwise kernel)"),
    "write-triton-store": ("write", "Triton: 16-byte stores of a constant, 32 KiB per block"),
    "copy-tmakit": ("copy", "tmakit.copy_ (defaults: 16x256 tiles, 8 stages, TMA load + TMA store)"),
    "copy-torch-memcpy": ("copy", "torch copy_ (the driver's device-to-device memcpy)"),
    "copy-torch-neg": ("copy", "torch neg(out=) (elementwise kernel: one read, one write)"),
    "copy-triton": ("copy", "Triton: 16-byte loads and stores, 32 KiB per block"),
}
NCU_METRICS = [
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
]
NCU_OPERATIONS = 100  # back to back in the profiled range: its start and end gaps (~1 ms) amortised
TRITON_BLOCK_ELEMENTS = 16384  # fp16 elements per Triton program: 32 KiB


def _triton_kernels() -> dict[str, Any]:
    import triton
    import triton.language as tl

    @triton.jit
    def read_sum(x, partial, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(partial + tl.program_id(0), tl.sum(tl.load(x + offsets).to(tl.float32)))

    @triton.jit
    def store_constant(y, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y + offsets, tl.full((BLOCK,), 1.0, tl.float16))

    @triton.jit
    def copy(x, y, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y + offsets, tl.load(x + offsets))

    return {"read": read_sum, "write": store_constant, "copy": copy}


def operations(case: str, mib: int, buffers: int) -> tuple[list[Callable[[], Any]], list[tuple]]:
    """`buffers` launches of `case` over distinct memory (rotating them keeps the L2 cold),
    compiled, and the (source, output) pair each one reads and writes."""
    import torch

    import tmakit

    shape = (mib * 2**20 // 2 // 16384, 16384)  # fp16, 16384 wide as `tmakit bench --kernel copy`
    numel = shape[0] * shape[1]
    grid = (numel // TRITON_BLOCK_ELEMENTS,)
    block = TRITON_BLOCK_ELEMENTS

    def source() -> Any:
        return (torch.arange(numel, device="cuda", dtype=torch.int32) % 2039).to(torch.float16).view(shape)

    sources = [source() for _ in range(buffers)]
    outs = [torch.empty(shape, dtype=torch.float16, device="cuda") for _ in range(buffers)]
    pairs = list(zip(sources, outs, strict=True))
    direction = CASES[case][0]
    if case.startswith("read-tmakit-load"):
        from tmakit.config import LoadConfig
        from tmakit.load.launch import compile_pipelined_load
        from tmakit.plan import LoadPlan, PipelinePlan
        from tmakit.runtime.compile import to_cute_tensor
        from tmakit.runtime.device import current_stream
        from tmakit.runtime.launch import new_guard

        tile, stages = ((16, 256), 8) if "16x256" in case else ((64, 256), 4)
        sm_count = torch.cuda.get_device_properties(0).multi_processor_count
        pipeline = PipelinePlan(
            LoadPlan(LoadConfig(shape, "fp16", tile)), stages=stages, persistent=True, sm_count=sm_count
        )
        compiled = compile_pipelined_load(pipeline, "none")
        guard = to_cute_tensor(new_guard())
        cute_sources = [to_cute_tensor(s) for s in sources]
        return [lambda s=s: compiled(s, s, guard, current_stream()) for s in cute_sources], pairs
    if "triton" in case:
        kernel = _triton_kernels()[direction]
        partial = torch.empty(grid[0], dtype=torch.float32, device="cuda")
        if direction == "read":
            return [lambda s=s: kernel[grid](s, partial, BLOCK=block) for s in sources], pairs
        if direction == "write":
            return [lambda o=o: kernel[grid](o, BLOCK=block) for o in outs], pairs
        return [lambda s=s, o=o: kernel[grid](s, o, BLOCK=block) for s, o in pairs], pairs
    launches = {
        "read-torch-sum": [lambda s=s: s.sum() for s in sources],
        "write-torch-fill": [lambda o=o: o.fill_(1.0) for o in outs],
        "copy-tmakit": [lambda s=s, o=o: tmakit.copy_(o, s) for s, o in pairs],
        "copy-torch-memcpy": [lambda s=s, o=o: o.copy_(s) for s, o in pairs],
        "copy-torch-neg": [lambda s=s, o=o: torch.neg(s, out=o) for s, o in pairs],
    }[case]
    return launches, pairs


def check(case: str, mib: int) -> str:
    """A copy's output against its input, every element (the other cases produce no copy)."""
    import torch

    if CASES[case][0] != "copy":
        return "not a copy"
    (launch,), ((source, out),) = operations(case, mib, 1)
    launch()
    torch.cuda.synchronize()
    expected = -source if case == "copy-torch-neg" else source
    return "every element equal" if torch.equal(out, expected) else "WRONG"


def run_target(case: str, mib: int) -> None:
    """`NCU_OPERATIONS` operations over two buffers between profiler start and stop (each warmed
    up before)."""
    import torch

    launches, _ = operations(case, mib, 2)
    for launch in launches:
        launch()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for index in range(NCU_OPERATIONS):
        launches[index % 2]()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def ncu_range(case: str, mib: int, out: Path) -> dict:
    """Nsight Compute over the range between the target's profiler start and stop
    (`NCU_OPERATIONS` operations), clocks left alone: replayed by
    re-running the application ("app-range"), else by saving and restoring memory ("range")."""
    from tmakit.bench.ncu import parse_ncu_csv

    result: dict = {}
    for mode in ("app-range", "range"):
        command = [
            "ncu", "--replay-mode", mode, "--clock-control", "none", "--csv",
            "--metrics", ",".join(NCU_METRICS), sys.executable, __file__, "--target", case, str(mib),
        ]  # fmt: skip
        run = subprocess.run(command, capture_output=True, text=True, timeout=240)
        (out / f"ncu-{case}-{mode}.csv").write_text(run.stdout + run.stderr[-3000:])
        try:
            values = parse_ncu_csv(run.stdout) if run.returncode == 0 else {}
        except (ValueError, KeyError) as error:
            values = {"parse_error": str(error)}
        if values and "parse_error" not in values:
            moved = sum(values.get(f"dram__bytes_{side}.sum", [0])[0] for side in ("read", "write"))
            duration_us = values.get("gpu__time_duration.sum", [0])[0]
            rate = moved / duration_us / 1e3 if duration_us else None
            return {"replay_mode": mode, "operations": NCU_OPERATIONS, "dram_gb_per_s": rate, **values}
        result[mode] = values or {"error": (run.stderr or run.stdout)[-800:], "rc": run.returncode}
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", nargs=2, metavar=("CASE", "MIB"))
    parser.add_argument("--out", default=".")
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--ncu", default="copy-,read-tmakit-load-16x256,read-triton,write-",
                        help="comma-separated case-name prefixes to profile; empty: none")  # fmt: skip
    args = parser.parse_args()
    if args.target:
        run_target(args.target[0], int(args.target[1]))
        return 0

    import torch

    from tmakit.bench.report import device_context
    from tmakit.bench.suites import rotation_buffers
    from tmakit.bench.timing import stream_samples_us

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    context = device_context(os.environ.get("TMAKIT_COMMIT"))
    tensor_bytes = args.mib * 2**20
    buffers = rotation_buffers(tensor_bytes, context["l2_bytes"])
    summary: dict = {"what": "DRAM ceiling: read, write and copy streams", "mib": args.mib, **context}
    for case, (direction, what) in CASES.items():
        moved = tensor_bytes * (2 if direction == "copy" else 1)
        entry: dict = {"what": what, "direction": direction, "bytes_moved": moved, "buffers": buffers}
        try:
            entry["check"] = check(case, args.mib)
            samples = stream_samples_us(operations(case, args.mib, buffers)[0], args.samples)
            entry["us"] = statistics.median(samples)
            entry["gb_per_s"] = moved / entry["us"] / 1e3
            entry["us_min_max"] = [min(samples), max(samples)]
        except Exception as error:  # noqa: BLE001 - one failing mechanism must not hide the others
            entry["error"] = f"{type(error).__name__}: {error}"[-1500:]
        torch.cuda.empty_cache()
        summary[case] = entry
        print(case, json.dumps({k: v for k, v in entry.items() if k != "what"})[:300], flush=True)
    (out / "dram-ceiling.json").write_text(json.dumps(summary, indent=1) + "\n")
    profiled = [p for p in args.ncu.split(",") if p]
    for case in CASES:  # after every timing: a slow profile must not cost the timings
        if any(case.startswith(p) for p in profiled):
            summary[case]["ncu"] = ncu_range(case, args.mib, out)
            print(case, "ncu", json.dumps(summary[case]["ncu"])[:300], flush=True)
            (out / "dram-ceiling.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
