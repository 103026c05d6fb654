"""The MoE combine's ring shapes and its backward's, beside TransformerEngine's unpermute and its
backward, on DeepSeek-V3's and Mixtral's layers (bf16): each shape's output checked bit for bit
against the default ring's (the same sums in the same order), then all timed by interleaved
CUDA-graph replays over rotated inputs, medians in microseconds; the rate counts the rows read
once and the rows written. What the combine's defaults (`moe.plan.COMBINE_STAGES`,
`COMBINE_WARPS`, `CombinePlan.blocks_per_sm`) should be read from.

    python benchmarks/probes/moe_combine_rings.py --out moe-combine-rings.json [--samples 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from functools import partial
from pathlib import Path

# name, tokens, topk, experts, hidden
SHAPES = (("deepseek-v3", 4096, 8, 256, 7168), ("mixtral", 8192, 2, 8, 4096))
# stages, consumer warps, blocks a SM
RINGS = ((6, 4, 1), (4, 4, 2), (6, 4, 2), (8, 4, 1), (6, 8, 1), (4, 8, 2))
ROTATED = 3  # input sets a pass walks: past the L2 at these sizes


def same(got: tuple, expected: tuple) -> bool:
    """A ring's outputs against the default ring's: the combine's and y's gradient bit for bit (the
    same fp32 sums or products); the probabilities' gradient within fp32 rounding (another count of
    consumer warps sums its partial dot products in another order)."""
    import torch

    if not torch.equal(got[0], expected[0]):
        return False
    return len(got) == 1 or torch.allclose(got[1], expected[1], rtol=1e-5, atol=1e-3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    import torch

    from tmakit.bench.timing import interleaved_graph_samples_us
    from tmakit.moe import call, peers
    from tmakit.moe.launch import combine_launcher
    from tmakit.moe.plan import CombinePlan

    te = peers.transformer_engine().module
    generator = torch.Generator(device="cuda").manual_seed(2026)
    rows_out = []
    for name, tokens, topk, experts, hidden in SHAPES:
        sets = []
        for _ in range(ROTATED):
            ids = torch.rand(tokens, experts, device="cuda", generator=generator).topk(topk, dim=1).indices
            routed = call.route_ids(ids, experts, 1)
            rows = tokens * topk
            y = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16, generator=generator)
            grad = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, generator=generator)
            probs = torch.rand(tokens, topk, device="cuda", generator=generator)
            sets.append((ids, routed.row_map, y, grad, probs))
        base = CombinePlan(
            hidden * 2, topk, "bf16", sm_count=torch.cuda.get_device_properties(0).multi_processor_count
        )
        variants: dict[str, list] = {}
        for backward in (False, True):
            expected = []
            for stages, warps, per_sm in RINGS:
                plan = replace(base, stages=stages, consumer_warps=warps, blocks_per_sm=per_sm, grad=backward)
                launch = combine_launcher(plan, "cuda:0").launch
                label = f"tmakit {'combine_grad' if backward else 'combine'} {stages}st {warps}w {per_sm}/SM"
                calls = []
                for index, (_, row_map, y, grad, probs) in enumerate(sets):
                    if backward:
                        grad_y = torch.empty_like(y)
                        partials = torch.empty((tokens, topk, plan.partials), device="cuda")
                        named = call.named_rows(row_map, rows)
                        run = partial(
                            launch, call._bytes(y), call._bytes(grad), row_map, probs, grad_y, partials, named
                        )
                        run()
                        got = (grad_y.clone(), partials.sum(dim=2))
                    else:
                        out = torch.empty(tokens, hidden, device="cuda", dtype=torch.bfloat16)
                        run = partial(launch, call._bytes(y), row_map, probs, out)
                        run()
                        got = (out.clone(),)
                    if len(expected) <= index:
                        expected.append(got)
                    elif not same(got, expected[index]):
                        raise SystemExit(f"{name}: {label} differs from the default ring's")
                    calls.append(run)
                variants[label] = calls
        if te is not None:
            for backward in (False, True):
                calls = []
                for ids, _, y, grad, probs in sets:
                    mask = peers.routing_mask(ids, experts)
                    te_map = te.make_row_id_map(mask, tokens, experts)
                    merging = peers.merging_probs(ids, probs, experts)
                    if backward:
                        calls.append(
                            partial(
                                te.unpermute_with_mask_map_bwd_with_merging_probs,
                                grad,
                                te_map,
                                y,
                                merging,
                                None,
                                tokens,
                                experts,
                                y.shape[0],
                                hidden,
                            )
                        )
                    else:
                        calls.append(
                            partial(
                                te.unpermute_with_mask_map,
                                y,
                                te_map,
                                merging,
                                None,
                                None,
                                tokens,
                                experts,
                                hidden,
                            )
                        )
                variants[f"TE unpermute{' backward' if backward else ''}"] = calls
        samples = interleaved_graph_samples_us(variants, samples=args.samples)
        moved = {
            False: (tokens * topk + tokens) * hidden * 2,
            True: (tokens * topk * 2 + tokens) * hidden * 2,
        }
        for label, values in samples.items():
            backward = "grad" in label or "backward" in label
            median = statistics.median(values)
            row = {
                "case": name,
                "variant": label,
                "median_us": median,
                "tb_per_s": moved[backward] / median / 1e6,
            }
            rows_out.append(row)
            print(json.dumps(row))
    if args.out:
        context = {"transformer_engine": peers.peer_context()["transformer_engine"]}
        args.out.write_text(
            json.dumps({"study": "moe-combine-rings", "context": context, "rows": rows_out}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
