"""The MoE routing built on the device, the routing kernels (`moe.kernel.RoutingKernel`: count,
scan, assign) beside torch's sort and scans (`moe.call.route_ids_by_torch`), for the shapes of
the MoE study and larger: each routing checked bit for bit against torch's first, then both timed
by interleaved CUDA-graph replays over rotated ids (`bench.timing`), medians in microseconds.

    python benchmarks/probes/moe_routing.py --out moe-routing.json [--samples 50]

The ids are a random top-k of distinct experts a token (a router's), int32 and int64.
"""

from __future__ import annotations

import argparse
import json
import statistics
from functools import partial
from pathlib import Path

# tokens, topk, experts, align
SHAPES = (
    (8192, 2, 8, 1),  # Mixtral
    (8192, 2, 8, 16),
    (4096, 8, 256, 1),  # DeepSeek
    (4096, 8, 256, 128),
    (16384, 8, 256, 1),
    (16384, 8, 256, 128),
    (16384, 8, 1024, 16),
)
ROTATED = 4  # id buffers a pass walks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()
    import torch

    from tmakit.bench.timing import interleaved_graph_samples_us
    from tmakit.moe import call

    generator = torch.Generator(device="cuda").manual_seed(2026)
    rows = []
    for tokens, topk, experts, align in SHAPES:
        for dtype in (torch.int32, torch.int64):
            scores = [torch.rand(tokens, experts, device="cuda", generator=generator) for _ in range(ROTATED)]
            ids = [s.topk(topk, dim=1).indices.to(dtype) for s in scores]
            for one in ids:
                got, want = (
                    call.route_ids_by_kernel(one, experts, align),
                    call.route_ids_by_torch(one, experts, align),
                )
                for name, have, expected in zip(got._fields, got, want, strict=True):
                    if not torch.equal(have, expected):
                        raise SystemExit(
                            f"{tokens}x{topk} of {experts}, align {align}, {dtype}: {name} differs"
                        )
            routes = {"kernels": call.route_ids_by_kernel, "torch": call.route_ids_by_torch}
            samples = interleaved_graph_samples_us(
                {
                    name: [partial(route, one, experts, align) for one in ids]
                    for name, route in routes.items()
                },
                samples=args.samples,
            )
            row = {
                "tokens": tokens,
                "topk": topk,
                "experts": experts,
                "align": align,
                "ids": str(dtype).removeprefix("torch."),
                "verified": "ok: every field equal to torch's routing",
                **{f"{name}_median_us": statistics.median(values) for name, values in samples.items()},
            }
            rows.append(row)
            print(json.dumps(row))
    if args.out:
        args.out.write_text(json.dumps({"study": "moe-routing", "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
