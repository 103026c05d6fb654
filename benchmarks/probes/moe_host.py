"""Where an eager moe_dispatch / moe_combine call's host time goes: each part's host cost on a
tiny layer (`bench.timing.host_costs_us`: the GPU no bound), the public calls eagerly at
Mixtral's layer (`bench.timing.eager_samples_us`, host and device), then cProfile of the two
public calls there.

    python benchmarks/probes/moe_host.py
"""

import cProfile
import pstats
import statistics

import torch

import tmakit
from tmakit.bench.timing import eager_samples_us, host_costs_us
from tmakit.moe import call


def layer(tokens, topk, experts, hidden):
    """(x, ids, probs, a dispatch of them) on the GPU."""
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    ids = torch.randint(0, experts, (tokens, topk), device="cuda", dtype=torch.int32)
    probs = torch.rand(tokens, topk, device="cuda")
    return x, ids, probs, tmakit.moe_dispatch(x, ids, num_experts=experts, check_ids=False)


def parts(x, ids, probs, routed, experts):
    """The public calls and what each is made of, as calls of no argument."""
    rows = routed.out.shape[0]
    return {
        "moe_dispatch": lambda: tmakit.moe_dispatch(x, ids, num_experts=experts, check_ids=False),
        "moe_dispatch check_ids": lambda: tmakit.moe_dispatch(x, ids, num_experts=experts),
        "route_ids": lambda: call.route_ids(ids, experts, 1),
        "route_ids_by_torch": lambda: call.route_ids_by_torch(ids, experts, 1),
        "permute (call)": lambda: call.permute(x, routed.row_map, rows, None, False),
        "ops.moe_permute": lambda: torch.ops.tmakit.moe_permute(x, routed.row_map, rows, None, False),
        "moe_combine": lambda: tmakit.moe_combine(routed.out, routed.row_map, probs),
        "call.combine": lambda: call.combine(routed.out, routed.row_map, probs, False),
        "ops.moe_combine": lambda: torch.ops.tmakit.moe_combine(routed.out, routed.row_map, probs, False),
    }


experts = 8
tiny = parts(*layer(64, 2, experts, 256), experts)
for name, us in host_costs_us(tiny, calls=200).items():
    print(f"{name:26s} host us a call (64 tokens): {us:.1f}")
mixtral = parts(*layer(8192, 2, experts, 4096), experts)
public = {name: [mixtral[name]] for name in ("moe_dispatch", "moe_combine")}
for name, samples in eager_samples_us(public).items():
    print(f"{name:26s} eager us a call (Mixtral's layer): {statistics.median(samples):.1f}")
for name, fn in public.items():
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(100):
        fn[0]()
    profile.disable()
    torch.cuda.synchronize()
    print(f"== cProfile of 100 calls of {name} (Mixtral's layer)")
    pstats.Stats(profile).sort_stats("tottime").print_stats(22)
