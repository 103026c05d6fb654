"""Which kernel a large copy should take inside a CUDA graph and eagerly (GPU): TMA's copy
(`tmakit.copy_`, strict) with its default plan and with other options, the grouped copy of one
pair (`tmakit.copy_many_`), torch's `copy_` (the driver's memcpy eagerly, a memcpy node in a
graph), torch's element-wise kernel moving the same bits (`copies.views.same_bits`, the driver's
rule's kernel inside a large capture) and inductor's compiled `copy_`; same-layout fp16 copies
and transposing ones (a column-major source), past the L2.

    python benchmarks/probes/copy_route_probe.py --commit SHA --json OUT

Device time: interleaved CUDA-graph replays over rotated buffers (`bench.timing`); eager:
back-to-back calls, host included, interleaved rounds. Every kernel's result is compared bit for
bit with torch's `copy_` first, on a poisoned destination.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

import tmakit
from tmakit.bench.report import device_context
from tmakit.bench.suites import rotation_buffers
from tmakit.bench.timing import eager_samples_us, interleaved_graph_samples_us
from tmakit.copies.views import same_bits
from tmakit.errors import TmaConfigError

COLUMNS = 8192
CASES = (("copy", 256), ("copy", 512), ("copy", 1024), ("transpose", 256), ("transpose", 1024))
TMA_OPTIONS = {  # name: copy_'s keywords, each beside the default plan
    "copy": {"tma": {}, "tma_bulk": {"bulk": True}, "tma_2_blocks": {"blocks_per_sm": 2}},
    "transpose": {
        "tma": {},
        "tma_2_blocks": {"blocks_per_sm": 2},
        "tma_tile_64x128": {"tile": (64, 128)},
        "tma_tile_128x128": {"tile": (128, 128)},
    },
}


def calls_of(op: str) -> dict:
    compiled = torch.compile(lambda x, o: o.copy_(x), dynamic=False)
    calls = {
        name: (lambda x, o, kw=kw: tmakit.copy_(o, x, strict=True, **kw))
        for name, kw in TMA_OPTIONS[op].items()
    }
    calls["inductor"] = compiled
    calls["torch"] = lambda x, o: o.copy_(x)
    if op == "copy":
        calls["grouped"] = lambda x, o: tmakit.copy_many_([o], [x])
        calls["elementwise"] = same_bits
    return calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--json", required=True)
    parser.add_argument("--samples", type=int, default=25)
    args = parser.parse_args()
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    rows = []
    for op, mib in CASES:
        torch._dynamo.reset()
        calls = calls_of(op)
        shape = (mib * 2**20 // 2 // COLUMNS, COLUMNS)
        count = rotation_buffers(2 * mib * 2**20, l2_bytes)
        if op == "transpose":
            xs = [torch.randn(shape[::-1], device="cuda").half().t() for _ in range(count)]
        else:
            xs = [torch.randn(shape, device="cuda").half() for _ in range(count)]
        outs = [torch.empty(shape, device="cuda", dtype=torch.half) for _ in range(count)]
        verified = {}
        for name, call in list(calls.items()):
            try:
                for x, o in zip(xs, outs, strict=True):  # every pair once eagerly (the grouped route kept)
                    o.view(torch.uint8).fill_(0xFF)
                    call(x, o)
            except TmaConfigError as error:  # an option this case's plan refuses: said, not timed
                verified[name] = f"refused: {error}"
                del calls[name]
                continue
            torch.cuda.synchronize()
            verified[name] = all(torch.equal(o, x) for x, o in zip(xs, outs, strict=True))
        pairs = list(zip(xs, outs, strict=True))
        launches = {name: [lambda x=x, o=o, f=f: f(x, o) for x, o in pairs] for name, f in calls.items()}
        graph = interleaved_graph_samples_us(launches, args.samples)
        eager = eager_samples_us({name: launches[name] for name in calls if name != "inductor"})
        row = {"op": op, "mib": mib, "rotated_buffers": count, "verified": verified}
        row.update({f"{name}_graph_us": statistics.median(us) for name, us in graph.items()})
        row.update({f"{name}_eager_us": statistics.median(us) for name, us in eager.items()})
        row["graph_fastest"] = min(calls, key=lambda name, row=row: row[f"{name}_graph_us"])
        row["eager_fastest"] = min(eager, key=lambda name, row=row: row[f"{name}_eager_us"])
        rows.append(row)
        print({k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
        del xs, outs, pairs, launches
        torch.cuda.empty_cache()
    report = {
        "study": "copy-route",
        "what": __doc__.split("\n\n")[0].replace("\n", " "),
        "context": device_context(args.commit),
        "rows": rows,
    }
    with open(args.json, "w") as out:
        json.dump(report, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
