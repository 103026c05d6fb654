"""Nsight Compute beside the benchmark: the shape-generic copy kernel against the kernel compiled
for the exact shape, where the benchmark found the generic one slower (small copies).

    python3 scripts/ncu_generic.py --out DIR          (driver: runs ncu, writes DIR/ncu-generic.json)
    python3 scripts/ncu_generic.py --target MIB       (what ncu profiles: each kernel launched 3 times)
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
from pathlib import Path

METRICS = [
    "gpu__time_duration.sum",
    "smsp__inst_executed.sum",
    "sm__cycles_active.avg",
    "launch__registers_per_thread",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
]
SIZES_MIB = (1, 16)


def target(mib: int) -> None:
    import torch

    import tmakit
    from tmakit.copies.api import specialised_copy_

    x = torch.randn(mib * 2**19 // 4096, 4096, device="cuda").to(torch.float16)
    for copy_ in (tmakit.copy_, specialised_copy_):  # shape-generic, then for this shape
        y = torch.empty_like(x)
        for _ in range(3):
            copy_(y, x)
        torch.cuda.synchronize()
        assert torch.equal(x.view(torch.int16), y.view(torch.int16))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--commit")
    parser.add_argument("--target", type=int)
    args = parser.parse_args()
    if args.target:
        target(args.target)
        return 0
    from tmakit.bench.report import device_context

    rows = []
    for mib in SIZES_MIB:
        command = ["ncu", "--csv", "--metrics", ",".join(METRICS), "-k", "regex:Copy"]
        command += [sys.executable, __file__, "--target", str(mib)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=240)
        lines = [line for line in done.stdout.splitlines() if line.startswith('"')]
        launches: dict[str, dict[str, str]] = {}
        for record in csv.DictReader(io.StringIO("\n".join(lines))):
            launch = launches.setdefault(record["ID"], {"kernel": record["Kernel Name"][:80]})
            launch[record["Metric Name"]] = record["Metric Value"]
        for index, (launch_id, values) in enumerate(sorted(launches.items(), key=lambda kv: int(kv[0]))):
            kind = "shape-generic" if index < 3 else "shape-specialised"  # the target's launch order
            rows.append({"mib": mib, "launch": int(launch_id), **values, "compiled_for": kind})
        if not launches:
            rows.append({"mib": mib, "error": (done.stderr or done.stdout)[-600:]})
    study = {
        "study": "ncu-generic",
        "what": "Nsight Compute per launch of tmakit.copy_ (fp16, row-major, 1 and 16 MiB): the "
        "shape-generic kernel (3 launches) then the shape-specialised one (3 launches); duration, "
        "instructions, active cycles, registers, DRAM throughput.",
        "context": {**device_context(args.commit), "step": "ncugeneric"},
        "rows": rows,
        "summary": {},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ncu-generic.json").write_text(json.dumps(study, indent=1) + "\n")
    print(json.dumps(rows)[:3000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
