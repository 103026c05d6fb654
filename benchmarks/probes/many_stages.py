"""The grouped copy's ring shape on one list, timed against torch: `pack` of a transformer layer's
parameters (and `copy_many_` of them) by the grouped kernel under several `ManyPlan`s (stages,
stage bytes, blocks), in interleaved CUDA-graph replays beside `torch.cat` and `_foreach_copy_`,
every result checked byte for byte first. An exploration of `many.plan`'s defaults:

    python benchmarks/probes/many_stages.py --json PATH [--plans 6x32,7x32,3x32x2] [--samples 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from tmakit.bench.report import device_context
from tmakit.bench.timing import interleaved_graph_samples_us
from tmakit.many.bench import LAYER
from tmakit.many.launch import many_launcher
from tmakit.many.plan import ManyPlan, pack_offsets


def parse_plan(text: str, sm_count: int) -> ManyPlan:
    """ "STAGESxKIB" or "STAGESxKIBxBLOCKS_PER_SM"."""
    stages, kib, *per_sm = (int(part) for part in text.split("x"))
    return ManyPlan(stages=stages, stage_bytes=kib * 1024, sm_count=sm_count * (per_sm[0] if per_sm else 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, required=True, help="where the study is written")
    parser.add_argument("--plans", default="6x32,7x32,4x48,3x64,3x32x2,4x24x2")
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()

    import torch

    device = torch.device("cuda", 0)
    sm_count = torch.cuda.get_device_properties(device).multi_processor_count
    generator = torch.Generator(device="cuda").manual_seed(2026)
    srcs = [torch.randn(s, device="cuda", generator=generator).to(torch.bfloat16) for s in LAYER]
    dsts = [torch.empty_like(s) for s in srcs]
    nbytes = [s.nbytes for s in srcs]
    offsets, total = pack_offsets(nbytes)
    flat = torch.empty(total // 2, dtype=torch.bfloat16, device="cuda")
    flat_u8 = flat.view(torch.uint8)
    launches, checks = {}, {}
    for text in args.plans.split(","):
        plan = parse_plan(text, sm_count)
        for op, targets in (
            ("pack", [flat_u8.data_ptr() + o for o in offsets]),
            ("copy", [d.data_ptr() for d in dsts]),
        ):
            chunks, starts = plan.chunk_table([s.data_ptr() for s in srcs], targets, nbytes)
            table = (torch.from_numpy(chunks).to(device), torch.from_numpy(starts).to(device))
            launcher = many_launcher(plan, str(device))
            name = f"{op} {text}"
            launches[name] = [lambda t=table, f=launcher: f(*t)]
            checks[name] = op
    flats = [s.reshape(-1) for s in srcs]
    launches["torch cat"] = [lambda: torch.cat(flats, out=flat[: sum(f.numel() for f in flats)])]
    launches["torch _foreach_copy_"] = [lambda: torch._foreach_copy_(dsts, srcs)]
    verdicts = {}
    for name, op in checks.items():
        flat.fill_(float("nan"))
        for d in dsts:
            d.fill_(float("nan"))
        launches[name][0]()
        torch.cuda.synchronize()
        got = (
            [flat_u8[o : o + n] for o, n in zip(offsets, nbytes, strict=True)]
            if op == "pack"
            else [d.view(torch.uint8).reshape(-1) for d in dsts]
        )
        ok = all(torch.equal(g, s.view(torch.uint8).reshape(-1)) for g, s in zip(got, srcs, strict=True))
        verdicts[name] = "ok: every byte" if ok else "MISMATCH"
    wrong = [name for name, verdict in verdicts.items() if verdict != "ok: every byte"]
    if wrong:
        raise SystemExit(f"wrong bytes from {', '.join(wrong)}: nothing timed")
    samples = interleaved_graph_samples_us(launches, args.samples)
    moved = 2 * sum(nbytes)
    rows = [
        {
            "case": name,
            "median_us": statistics.median(us),
            "tb_per_s": moved / statistics.median(us) / 1e6,
            "verified": verdicts.get(name, "-"),
            "samples_us": us,
        }
        for name, us in samples.items()
    ]
    document = {
        "study": "many-stages",
        "what": "the grouped copy's ring (stages x KiB [x blocks per SM]) packing and copying a transformer "
        "layer's bf16 parameters, CUDA-graph replays interleaved with torch.cat and _foreach_copy_, L2 cold "
        "(405 MB a launch), bytes read plus written",
        "context": device_context(os.environ.get("TMAKIT_COMMIT")),
        "rows": rows,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=1))
    for row in rows:
        print(f"{row['case']:28s} {row['median_us']:8.1f} us {row['tb_per_s']:.3f} TB/s {row['verified']}")


if __name__ == "__main__":
    main()
