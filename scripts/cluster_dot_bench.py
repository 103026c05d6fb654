"""The cluster row dot, out[b, m] = sum_k A[b, m, k] * X[m, k]: the CTAs of a cluster share each X
tile. With multicast against without (the same kernel and launch, each CTA loading X itself), one
cluster per strip and persistent clusters ("auto": as many as the GPU keeps resident), beside
torch's expressions (each this torch has; the fastest is named in the summary). Every row
verified on the same inputs first; device time from CUDA-graph replays (medians); GB/s counts A
and X once. Writes cluster-dot.json into --out.

    python3 scripts/cluster_dot_bench.py --out DIR [--commit SHA] [--samples N]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SEED_COLS = 1792  # the seed's K
# (part, A's shape, cluster, L2 hot). L2 hot: A + X in 37.8 MB (fp16), inside the H200's 60 MB L2
# (the seed's 8448 rows would need 87-144 MB), 132 CTAs either way; L2 cold: a larger X
# (256 MiB, A 1 GiB) rotated past the L2.
CASES = [
    ("hot-1x2", (4, 2112, SEED_COLS), (1, 2), True),
    ("hot-2x2", (4, 2112, SEED_COLS), (2, 2), True),
    ("cold-1x2", (4, 32768, 4096), (1, 2), False),
    ("cold-2x2", (4, 32768, 4096), (2, 2), False),
]
STAGES = 4


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--commit", default=None)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--only", default="", help="comma-separated part prefixes (default: all)")
    args = parser.parse_args()

    from tmakit.bench.report import device_context
    from tmakit.bench.suites import bench_cluster_dot
    from tmakit.plan import ClusterDotPlan
    from tmakit.runtime.launch import max_active_clusters

    context = device_context(args.commit)
    context.update(step="dotbench", stages=STAGES, samples=args.samples)
    peak = context.get("peak_bandwidth")
    rows, parts = [], {}
    prefixes = [p for p in args.only.split(",") if p]
    for part, shape, cluster, hot_l2 in CASES:
        if prefixes and not any(part.startswith(p) for p in prefixes):
            continue
        dot = ClusterDotPlan(shape, cluster=cluster, stages=STAGES)
        resident = max_active_clusters(dot.cluster_size)
        part_rows = bench_cluster_dot(dot, context["l2_bytes"], hot_l2, args.samples, resident)
        medians = {row.kernel: row.median_us for row in part_rows}
        tmakit = {k: v for k, v in medians.items() if k.startswith("tmakit")}
        torch_rows = {k: v for k, v in medians.items() if k.startswith("torch")}
        fastest_torch = min(torch_rows, key=torch_rows.get) if torch_rows else None
        parts[part] = {
            "shape": list(shape),
            "cluster": list(cluster),
            "hot_l2": hot_l2,
            "persistent_clusters_auto": resident,
            "fastest_torch": fastest_torch,
            "multicast_speedup": {
                k: tmakit[k.replace(" multicast ", " no-multicast ")] / v
                for k, v in tmakit.items()
                if " multicast " in k and k.replace(" multicast ", " no-multicast ") in tmakit
            },
            "over_fastest_torch": {k: torch_rows[fastest_torch] / v for k, v in tmakit.items()}
            if fastest_torch
            else {},
        }
        for row in part_rows:
            rows.append({"part": part, **row.summary(peak), "samples_us": row.samples_us})
            print(
                f"{part:>15} {row.kernel:<55} {row.median_us:9.2f} us {row.gbps:7.0f} GB/s  "
                f"{(row.verified or '-')[:60]}",
                flush=True,
            )
    result = {
        "study": "cluster-dot",
        "what": "out[b, m] = sum_k A[b, m, k] * X[m, k] (fp16 in, fp32 sums): tmakit's cluster dot, X "
        "multicast to the cluster against each CTA loading X itself (same kernel and launch), one "
        "cluster per strip and persistent ('auto': the driver's resident clusters), beside torch's "
        "expressions; every row verified first; CUDA-graph replay medians; GB/s of A + X",
        "context": context,
        "rows": rows,
        "summary": {"parts": parts, "speedup": "ratios > 1: the named row is faster"},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cluster-dot.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all((row["verified"] or "").startswith("ok") for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
