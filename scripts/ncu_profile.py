"""Nsight Compute evidence for the pipeline and multicast issues, on the GPU machine.

    python3 scripts/ncu_profile.py --out DIR            (driver: runs ncu on each case below)
    python3 scripts/ncu_profile.py --target CASE N      (what ncu profiles: CASE launched N times)

Cases: the seed shape's pipelined load (where the ~8.5 us floor comes from: DRAM throughput,
achieved occupancy, warp stall reasons), the multicast kernel per cluster shape beside its
no-multicast baseline (L2-to-SM traffic; with --sections also stall reasons and scheduler
statistics; each ring also with the other consumer-release protocols and as CUTLASS's
PipelineTmaAsync writes it: `--only multicast-1x2` takes them all), and `tmakit.copy_` beside
torch's `copy_` (DRAM throughput of a copy: how close each comes to the card's limit), and an
fp32 `add_` on the load-add-store ring, on reduce stores and by torch (DRAM and L2 traffic). Raw ncu
CSV per case lands in DIR, with a summary JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

LAB = Path(__file__).resolve().parents[1] / "benchmarks"  # the lab's package, `timeline`
# Sections for "where is the limit" (names as `ncu --list-sections` prints them).
SECTIONS = ["SpeedOfLight", "Occupancy", "WarpStateStats", "MemoryWorkloadAnalysis", "LaunchStats"]
# Counters for the L2 -> SM traffic of TMA loads, tried together, then one by one if ncu refuses one.
TRAFFIC_METRICS = [
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "lts__t_bytes.sum",
    "lts__t_sectors_op_read.sum",
    "lts__t_sectors_srcunit_tex_op_read.sum",
    "l1tex__m_xbar2l1tex_read_bytes.sum",
    "lts__t_bytes_equiv_l1sectormiss_pipe_lsu_mem_global_op_ld.sum",
    "smsp__inst_executed.sum",
    "lts__t_requests_srcunit_tex_op_read.sum",
    "lts__t_sectors_srcunit_tex_lookup_hit.sum",
    "lts__t_sectors_srcunit_tex_lookup_miss.sum",
]
# A copy's DRAM traffic and how busy DRAM was (read + write against the card's peak).
COPY_METRICS = [
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__t_sectors_srcunit_tex_op_read.sum",
    "lts__t_sectors_srcunit_tex_op_write.sum",
]
# An add's: the copy's, and the L2's reads, writes and reductions (TMA reduce stores apply there).
ADD_METRICS = [
    *COPY_METRICS,
    "lts__t_sectors_op_read.sum",
    "lts__t_sectors_op_write.sum",
    "lts__t_sectors_op_red.sum",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
]
# Why warps wait (cycles per issued instruction, by reason) and how busy DRAM and the SMs were.
STALL_METRICS = [
    "regex:smsp__average_warp_latency_issue_stalled_.*\\.ratio",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__cycles_active.avg",
    "gpc__cycles_elapsed.max",
]


# The cluster rings also get the schedulers' view (issue slots, eligible warps) and sampled stall
# reasons per instruction (`smsp__pcsamp_warps_issue_stalled_*`, in SourceCounters).
MULTICAST_SECTIONS = [*SECTIONS, "SchedulerStats", "SourceCounters"]
# TMA and distributed-shared-memory activity, by name pattern (names vary by ncu version: the
# mcncu step saves `ncu --query-metrics` beside the results).
TMA_METRICS = [
    "regex:^(sm|smsp|l1tex|gpc|tpc)__.*(tma|utma|bulk|dsmem|multicast).*\\.sum$",
    "regex:^smsp__pcsamp_warps_issue_stalled_.*$",
]


# Where a multicast's saving could show: the L2 request coalescer (LRC) in front of the L2 slices
# and the L2's own request/sector counters by source unit - collected by name pattern with --extra.
EXTRA_METRICS = [
    "regex:^lrc__.*\\.sum$",
    "regex:^lts__t_(requests|sectors)_srcunit_.*_op_read\\.sum$",
    "regex:^l1tex__m_.*read.*\\.sum$",
]


def cases() -> dict[str, dict]:
    """Name -> what to launch, on the seed's configuration: a pipeline variant as `tmakit bench
    --pipeline` spells it, the seed's kernel, or the multicast ring (4 stages, consumers only wait
    and release: the loads alone) with and without multicast."""
    out = {
        "seed-pipeline-7st": {"kind": "pipeline", "variant": "stages=7"},
        "seed-pipeline-4st-f2t": {
            "kind": "pipeline",
            "variant": "stages=4,prefetch_tiles=2,prefetch_descriptor",
        },
        "seed-tile-load": {"kind": "tile_load"},
    }
    for mib, shape in ((1, (128, 4096)), (256, (8192, 16384))):  # fp16, as `tmakit bench --kernel copy`
        for who in ("tmakit", "torch"):
            out[f"copy-{mib}MiB-{who}"] = {"kind": "copy", "shape": shape, "who": who}
    for who in ("ring", "store", "torch"):  # fp32 add_ of 256 MiB: the ring, reduce stores, torch's
        out[f"add-256MiB-{who}"] = {"kind": "add", "shape": (16384, 4096), "who": who}
    for cluster in ((1, 2), (2, 1), (2, 2), (1, 4)):
        for multicast in (True, False):
            name = f"multicast-{cluster[0]}x{cluster[1]}-{'mc' if multicast else 'baseline'}"
            out[name] = {"kind": "multicast", "cluster": cluster, "multicast": multicast, "stages": 4}
            # As many persistent clusters as stay resident (`max_active_clusters`): one wave.
            out[f"{name}-persistent"] = {**out[name], "persistent": True}
            # The same ring with other consumer-release protocols (`plan.RELEASES`) and written
            # with CUTLASS's PipelineTmaAsync (benchmarks/timeline/): "<name>-<protocol>".
            for protocol in (
                ("elected-cta", "lanes", "pipeline-tma-async") if multicast else ("pipeline-tma-async",)
            ):
                out[f"{name}-{protocol}"] = {**out[name], "protocol": protocol}
    return out


def run_target(case: dict, launches: int) -> None:
    import torch

    from tmakit import SEED
    from tmakit.bench.ncu import profiled_program
    from tmakit.check.inputs import make_input_tensor
    from tmakit.check.isolate import config_to_json
    from tmakit.cluster.plan import MulticastPlan
    from tmakit.load.bench import PipelineVariant
    from tmakit.load.launch import compile_pipelined_load
    from tmakit.plan import DEFAULT_RELEASE, LoadPlan
    from tmakit.runtime.compile import to_cute_tensor
    from tmakit.runtime.device import current_stream
    from tmakit.runtime.launch import max_active_clusters, new_guard

    sys.path.insert(0, str(LAB))
    from timeline.kernels import compile_cluster_ring

    if case["kind"] == "copy":  # the one copy between profiler start and stop
        import tmakit

        src = torch.arange(case["shape"][0] * case["shape"][1], device="cuda").view(case["shape"]).half()
        dst = torch.empty_like(src)
        copy = (lambda: tmakit.copy_(dst, src)) if case["who"] == "tmakit" else (lambda: dst.copy_(src))
        profile_between(copy, launches)
        return
    if case["kind"] == "add":
        import tmakit

        src, dst = (torch.randn(case["shape"], device="cuda") for _ in range(2))
        who = case["who"]
        if who == "torch":
            profile_between(lambda: dst.add_(src), launches)
        else:
            profile_between(lambda: tmakit.add_(dst, src, strict=True, reduce_by=who), launches)
        return
    if case["kind"] == "tile_load":  # what `tmakit bench --ncu` profiles
        profiled_program(config_to_json(SEED), launches)
        return
    plan = LoadPlan(SEED)
    src = make_input_tensor(plan)
    stream = current_stream()
    if case["kind"] == "pipeline":
        variant = PipelineVariant.parse(case["variant"])
        compiled = compile_pipelined_load(variant.pipeline(plan), "none")
        args = (to_cute_tensor(src), to_cute_tensor(src), to_cute_tensor(new_guard()), stream)
    else:
        size = case["cluster"][0] * case["cluster"][1]
        walk = max_active_clusters(size) if case.get("persistent") else None
        multicast = MulticastPlan(plan, case["cluster"], case["multicast"], case["stages"], walk)
        copies = torch.empty(multicast.copies_shape, dtype=src.dtype, device="cuda")
        compiled = compile_cluster_ring(multicast, case.get("protocol", DEFAULT_RELEASE), store=False)
        args = (to_cute_tensor(src), to_cute_tensor(copies), stream)
    for _ in range(launches):
        compiled(*args)
    torch.cuda.synchronize()


def profile_between(call, launches: int) -> None:
    """`call` once (compiled before profiling starts), then `launches` times between profiler
    start and stop."""
    import torch

    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for _ in range(launches):
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


# ncu flushes the caches before each profiled launch (L2 cold); --hot-l2 keeps them
# (`--cache-control none`: the warm-up launch leaves the tensor in the L2).
CACHE_CONTROL: list[str] = []


def ncu(arguments: list[str], name: str) -> subprocess.CompletedProcess:
    """One warm-up launch, three profiled (a copy case: only what runs between profiler start
    and stop, torch's kernels too)."""
    from tmakit.bench.ncu import ncu_command

    kernels = "regex:kernel_cutlass"
    arguments = [*CACHE_CONTROL, *arguments]
    if cases()[name]["kind"] in ("copy", "add"):
        arguments, kernels = ["--profile-from-start", "off", *arguments], "regex:."
    command = ncu_command(
        arguments,
        lambda total: [sys.executable, __file__, "--target", name, str(total)],
        skip=1,
        count=3,
        kernels=kernels,
    )
    return subprocess.run(command, capture_output=True, text=True, timeout=240)


def collect_metrics(entry: dict, key: str, metrics: list[str], name: str, out: Path) -> None:
    """Profile `metrics` for case `name`, keep the raw CSV, record the values under `key` (or
    ncu's error under `key`_error)."""
    from tmakit.bench.ncu import parse_ncu_csv

    run = ncu(["--metrics", ",".join(metrics)], name)
    (out / f"ncu-{name}-{key}.csv").write_text(run.stdout)
    if run.returncode == 0:
        entry[key] = parse_ncu_csv(run.stdout)
    else:
        entry[f"{key}_error"] = run.stderr[-1500:]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", nargs=2, metavar=("CASE", "LAUNCHES"))
    parser.add_argument("--out", default=".")
    parser.add_argument(
        "--only", default="", help="comma-separated case-name prefixes (NAME$: that case alone)"
    )
    parser.add_argument("--extra", action="store_true", help="also collect EXTRA_METRICS (LRC, L2 by unit)")
    parser.add_argument("--sections", action="store_true", help="sections and stalls for multicast cases too")
    parser.add_argument("--hot-l2", action="store_true", help="profile with the L2 warm (no cache flush)")
    args = parser.parse_args()
    if args.hot_l2:
        CACHE_CONTROL[:] = ["--cache-control", "none"]
    if args.target:
        run_target(cases()[args.target[0]], int(args.target[1]))
        return 0

    from tmakit.bench.ncu import parse_ncu_csv
    from tmakit.bench.report import device_context

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {
        "what": "Nsight Compute profiles (ncu --clock-control none"
        + (", --cache-control none: L2 warm" if args.hot_l2 else "")
        + ")",
        **device_context(os.environ.get("TMAKIT_COMMIT")),
    }
    prefixes = [p for p in args.only.split(",") if p]
    for name, case in cases().items():
        if prefixes and not any(name == p[:-1] if p.endswith("$") else name.startswith(p) for p in prefixes):
            continue
        entry: dict = {"case": case}
        if case["kind"] in ("copy", "add"):
            metrics = COPY_METRICS if case["kind"] == "copy" else ADD_METRICS
            collect_metrics(entry, "metrics", metrics, name, out)
            summary[name] = entry
            print(name, json.dumps(entry.get("metrics", entry))[:400], flush=True)
            continue
        if case["kind"] != "multicast" or args.sections:
            wanted = MULTICAST_SECTIONS if case["kind"] == "multicast" else SECTIONS
            sections = ncu([arg for s in wanted for arg in ("--section", s)], name)
            (out / f"ncu-{name}-sections.csv").write_text(sections.stdout)
            entry["sections_rc"] = sections.returncode
            if sections.returncode:
                entry["sections_error"] = sections.stderr[-1500:]
            collect_metrics(entry, "stalls", STALL_METRICS, name, out)
        traffic = ncu(["--metrics", ",".join(TRAFFIC_METRICS)], name)
        if traffic.returncode == 0:
            entry["metrics"] = parse_ncu_csv(traffic.stdout)
        else:  # one unknown counter fails the whole run: take them one at a time
            entry["metrics"], entry["metric_errors"] = {}, {}
            for metric in TRAFFIC_METRICS:
                single = ncu(["--metrics", metric], name)
                if single.returncode == 0:
                    entry["metrics"].update(parse_ncu_csv(single.stdout))
                else:
                    entry["metric_errors"][metric] = single.stderr[-300:]
        if args.extra:
            collect_metrics(entry, "extra", EXTRA_METRICS, name, out)
            if case["kind"] == "multicast":
                collect_metrics(entry, "tma", TMA_METRICS, name, out)
        summary[name] = entry
        print(name, json.dumps(entry.get("metrics", {}))[:400], flush=True)
    (out / "ncu-profile.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
