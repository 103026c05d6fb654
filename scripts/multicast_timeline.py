"""Where the multicast ring's time goes, on the GPU machine.

    python3 scripts/multicast_timeline.py --out DIR [--clusters 1x2,2x2] [--protocols ...]
        [--stages 4,7] [--walks strip,auto]

For each cluster shape, with multicast and without, and for each consumer-release protocol
(`plan.RELEASES`, plus "pipeline-tma-async": the same ring written with CUTLASS's
PipelineTmaAsync): every CTA's copy of every tile verified (store-back kernel), the load-only
kernel timed L2-hot (median of graph replays), then one L2-hot launch of the instrumented kernel
whose per-CTA stamps (`benchmarks/timeline/layout.py`) are summarised: per step the producer's wait for a free
stage, the consumer's wait for a full one, the fill time after the last slice's issue, the
spread of issues across a cluster, the time from the last release to the stage's reuse. The
seed shape's plain one-CTA ring (no cluster) is timed alongside. Writes DIR/multicast-timeline.json
and the raw stamps, DIR/stamps-<variant>.npy ((plane, cta, word) int64; plane 0 globaltimer ns,
plane 1 clock64). The instrumented and comparison kernels and the study are the lab in
benchmarks/timeline/, outside tmakit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from dataclasses import replace
from pathlib import Path

LAB = Path(__file__).resolve().parents[1] / "benchmarks"  # the lab's package, `timeline`


def parse_cluster(text: str) -> tuple[int, int]:
    rows, cols = text.lower().split("x")
    return int(rows), int(cols)


def headline(report: dict) -> str:
    """One line per variant: time, stamps' cost, and the medians that say where time goes."""
    timeline = report["timeline"]
    steps = timeline["per_step"]
    med = lambda d: d.get("median", float("nan"))  # noqa: E731
    fills = [med(s["fill_after_cluster_last_issue_ns"]) for s in steps]
    spreads = [med(s["issue_spread_in_cluster_ns"]) for s in steps]
    return (
        f"{report['variant']:<48} {report['median_us']:7.2f} us"
        f" (instrumented {report['instrumented_median_us']:6.2f})"
        f"  {'ok' if report['all_ok'] else 'WRONG'}"
        f" | per CTA: setup {med(timeline['cta_phases_ns']['setup (start->ready)']):6.0f} ns"
        f", ring {med(timeline['cta_phases_ns']['ring (ready->done)']):6.0f}"
        f", after the last tile {med(timeline['cta_phases_ns']['after the last tile (landed->end)']):4.0f}"
        f", lifetime {med(timeline['cta_phases_ns']['lifetime (start->end)']):5.0f}"
        f", producer waits {med(timeline['totals_per_cta_ns']['producer_wait']):6.0f}"
        f", consumer waits {med(timeline['totals_per_cta_ns']['consumer_wait']):6.0f}"
        f" | fill after last issue (per step) {[round(f) for f in fills]}"
        f" | issue spread {[round(s) for s in spreads]}"
        f" | reuse after last release {med(timeline['stage_reuse_after_last_release_ns']):5.0f}"
        f" | CTAs per SM {med(timeline['waves']):.0f}, SMs {timeline['sms_used']}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=".")
    parser.add_argument("--clusters", default="1x2,2x2")
    parser.add_argument(
        "--protocols", default="", help="comma-separated; default: all (timeline.kernels.PROTOCOLS)"
    )
    parser.add_argument(
        "--stages", default="4,7", help="comma-separated ring depths (7: every tile of a strip in flight)"
    )
    parser.add_argument(
        "--walks",
        default="strip",
        help="comma-separated: 'strip' (one cluster per strip), N persistent clusters, or 'auto' "
        "(as many persistent clusters as stay resident: runtime.launch.max_active_clusters)",
    )
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--commit", default=os.environ.get("TMAKIT_COMMIT"))
    args = parser.parse_args()

    import numpy as np

    from tmakit import SEED, LoadPlan
    from tmakit.bench.report import device_context
    from tmakit.runtime.launch import max_active_clusters

    sys.path.insert(0, str(LAB))
    from timeline.kernels import PROTOCOLS
    from timeline.study import measure, plain_ring_us, variants

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    protocols = [p for p in args.protocols.split(",") if p] or list(PROTOCOLS)
    unknown = [p for p in protocols if p not in PROTOCOLS]
    if unknown:
        parser.error(f"unknown protocols {unknown}; one of {PROTOCOLS}")
    plan = LoadPlan(SEED)
    depths = [int(s) for s in args.stages.split(",") if s]
    summary: dict = {
        "what": "multicast ring timeline: seed shape, L2 hot, load-only rings",
        "shape": list(SEED.shape),
        "tile": list(SEED.tile),
        "stages": depths,
        **device_context(args.commit),
        "plain_ring_us": {},
        "variants": [],
    }
    clusters = [parse_cluster(c) for c in args.clusters.split(",") if c]
    named = {"strip": None, "auto": "auto"}
    walks = tuple(named[w] if w in named else int(w) for w in args.walks.split(",") if w)
    summary["max_active_clusters"] = {size: max_active_clusters(size) for size in (1, 2, 4)}
    print(f"max active clusters (1 CTA per SM): {summary['max_active_clusters']}", flush=True)
    for stages in depths:
        plain = plain_ring_us(plan, stages, args.samples)
        summary["plain_ring_us"][stages] = plain
        print(f"plain one-CTA {stages}-stage ring (no cluster): {plain:.2f} us", flush=True)
        for variant in variants(clusters, protocols, walks):
            if variant.persistent_clusters == "auto":
                size = variant.cluster[0] * variant.cluster[1]
                variant = replace(variant, persistent_clusters=max_active_clusters(size))
            name = f"{stages}st {variant.name}"
            try:
                report, raw = measure(plan, variant, stages, args.samples)
            except Exception as error:  # one failing variant must not lose the others
                summary["variants"].append({"variant": name, "stages": stages, "error": repr(error)[-800:]})
                print(f"{name}: FAILED {error!r}", flush=True)
                traceback.print_exc()
                continue
            np.save(out / f"stamps-{name.replace(' ', '_')}.npy", raw)
            summary["variants"].append({"stages": stages, **report})
            print(f"{stages} stages: {headline(report)}", flush=True)
            (out / "multicast-timeline.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "multicast-timeline.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
