"""Which kernel a large same-layout copy should take, eagerly and inside a CUDA graph (GPU): TMA's
copy (`tmakit.copy_`, strict), torch's `copy_` (the driver's memcpy eagerly, a memcpy node in a
graph), torch's element-wise kernel moving the same bits (`bitwise_or` with 0 on an integer view
of both tensors) and inductor's compiled `copy_`, at 16 MiB to 1 GiB of fp16.

    python scripts/copy_route_probe.py --commit SHA --json OUT

Device time: interleaved CUDA-graph replays over rotated buffers (`bench.timing`); eager:
back-to-back calls, host included, interleaved rounds. Every kernel's result is compared bit for
bit with torch's `copy_` first.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from tmakit import api
from tmakit.bench.report import device_context
from tmakit.bench.suites import rotation_buffers
from tmakit.bench.timing import eager_samples_us, interleaved_graph_samples_us

SIZES_MIB = (16, 64, 256, 512, 1024)
COLUMNS = 8192


def same_bits(x: torch.Tensor, o: torch.Tensor) -> None:
    """o = x bit for bit through torch's element-wise kernel (not the memcpy)."""
    torch.bitwise_or(x.view(torch.int64), 0, out=o.view(torch.int64))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--json", required=True)
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    compiled = torch.compile(lambda x, o: o.copy_(x), dynamic=False)
    calls = {
        "tmakit": lambda x, o: api.copy_(o, x, strict=True),
        "torch": lambda x, o: o.copy_(x),
        "elementwise": same_bits,
        "inductor": compiled,
    }
    eager_calls = ("tmakit", "torch", "elementwise")
    rows = []
    for mib in SIZES_MIB:
        shape = (mib * 2**20 // 2 // COLUMNS, COLUMNS)
        count = rotation_buffers(2 * mib * 2**20, l2_bytes)
        xs = [torch.randn(shape, device="cuda").half() for _ in range(count)]
        outs = [torch.empty_like(x) for x in xs]
        verified = {}
        for name, call in calls.items():
            outs[0].view(torch.uint8).fill_(0xFF)
            call(xs[0], outs[0])
            torch.cuda.synchronize()
            verified[name] = bool(torch.equal(outs[0].view(torch.int16), xs[0].view(torch.int16)))
        pairs = list(zip(xs, outs, strict=True))
        launches = {name: [lambda x=x, o=o, f=f: f(x, o) for x, o in pairs] for name, f in calls.items()}
        graph = interleaved_graph_samples_us(launches, args.samples)
        eager = eager_samples_us({name: launches[name] for name in eager_calls})
        row = {"mib": mib, "rotated_buffers": count, "verified": verified}
        row.update({f"{name}_graph_us": statistics.median(us) for name, us in graph.items()})
        row.update({f"{name}_eager_us": statistics.median(us) for name, us in eager.items()})
        rows.append(row)
        print({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()})
        del xs, outs, pairs, launches
        torch.cuda.empty_cache()
    summary = {
        f"{row['mib']} MiB": {
            "graph_fastest": min(calls, key=lambda name, row=row: row[f"{name}_graph_us"]),
            "eager_fastest": min(eager_calls, key=lambda name, row=row: row[f"{name}_eager_us"]),
        }
        for row in rows
    }
    report = {
        "study": "copy-route",
        "what": __doc__.split("\n\n")[0].replace("\n", " "),
        "context": device_context(args.commit),
        "rows": rows,
        "summary": summary,
    }
    with open(args.json, "w") as out:
        json.dump(report, out, indent=1)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
