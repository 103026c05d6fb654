"""Where an eager moe_dispatch / moe_combine call's host time goes: each part's host cost on a
tiny layer (`bench.timing.host_costs_us`: the GPU no bound), the public calls eagerly at
Mixtral's layer (`bench.timing.eager_samples_us`, host and device), then cProfile of the two
public calls there; then the bench's layer forward and backward (DeepSeek-V3 4096, Mixtral): its
host time against its eager time, torch.profiler's ops by host time and cProfile.

    python benchmarks/probes/moe_host.py
"""

import cProfile
import pstats
import statistics
import time

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


def layer_call(x, ids, probs, grad, experts):
    """One forward and backward of the bench's tmakit layer (`moe.bench.tmakit_layer`)."""
    from tmakit.moe.bench import tmakit_layer
    from tmakit.moe.peers import with_gradients

    return lambda: with_gradients(tmakit_layer(x, ids, probs, experts), (x, probs), grad)


for label, (tokens, topk, experts, hidden) in {
    "DeepSeek-V3 4096": (4096, 8, 256, 7168),
    "Mixtral": (8192, 2, 8, 4096),
}.items():
    x, ids, probs, _ = layer(tokens, topk, experts, hidden)
    x.requires_grad_()
    probs.requires_grad_()
    grad = torch.randn_like(x)
    fwd_bwd = layer_call(x, ids, probs, grad, experts)
    fwd_bwd()
    torch.cuda.synchronize()
    host = []
    for _ in range(30):  # the host's time of one call, the GPU idle at its start
        torch.cuda.synchronize()
        start = time.perf_counter()
        fwd_bwd()
        host.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    eager = statistics.median(eager_samples_us({"layer": [fwd_bwd]})["layer"])
    print(f"layer fwd+bwd {label}: host us a call {statistics.median(host):.1f}, eager us a call {eager:.1f}")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
        for _ in range(5):
            fwd_bwd()
        torch.cuda.synchronize()
    print(f"== torch.profiler of 5 layer calls ({label})")
    print(trace.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    profile_ = cProfile.Profile()
    profile_.enable()
    for _ in range(20):
        fwd_bwd()
    profile_.disable()
    torch.cuda.synchronize()
    print(f"== cProfile of 20 layer calls ({label}), by cumulative time")
    pstats.Stats(profile_).sort_stats("cumtime").print_stats(40)
