"""How long the CPU model takes to replay one block's schedule, by the number of tiles (no GPU).

    python scripts/replay_bench.py --out benchmarks/results/model-replay.json

Replays the seed's loop and a 4-stage ring for blocks of 1,024 to 16,384 tiles (best of three
runs each) and writes the study in the one schema of benchmarks/results.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import time

from tmakit import LoadConfig, LoadPlan
from tmakit.model import pipeline_schedule, replay, seed_schedule

TILES = (1024, 4096, 16384)


def best_seconds(events: list, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        report = replay(events)
        times.append(time.perf_counter() - start)
        assert report.ok, report.describe()[-500:]
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the JSON here (default: print it)")
    parser.add_argument("--commit", help="the commit measured")
    args = parser.parse_args()
    rows = []
    for tiles in TILES:
        plan = LoadPlan(LoadConfig((64, 256 * tiles), "fp16", (64, 256)))
        for schedule, events in (
            ("seed loop", seed_schedule(plan)),
            ("4-stage ring", pipeline_schedule(tiles, 4, plan.expected_tx_bytes)),
        ):
            rows.append(
                {"schedule": schedule, "tiles": tiles, "events": len(events), "seconds": best_seconds(events)}
            )
            print(f"{schedule:>12}: {tiles:6d} tiles, {len(events):6d} events: {rows[-1]['seconds']:.3f} s")
    study = {
        "study": "model-replay",
        "what": "CPU model: one block's schedule replayed against the mbarrier models, best of 3 runs",
        "context": {
            "machine": f"{platform.machine()}, {platform.processor() or 'cpu'} (no GPU)",
            "python": platform.python_version(),
            "commit": args.commit,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        },
        "rows": rows,
        "summary": {
            "seconds_per_1000_tiles_at_16384": {
                row["schedule"]: 1000 * row["seconds"] / row["tiles"]
                for row in rows
                if row["tiles"] == TILES[-1]
            }
        },
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(study, f, indent=1)
            f.write("\n")
    else:
        print(json.dumps(study, indent=1))


if __name__ == "__main__":
    main()
