"""Where an eager moe_dispatch / moe_combine call's host time goes (Mixtral's shape): each
part's host time per call (calls back to back, the GPU left to run behind) and with the GPU's
time (synchronised at the end), then cProfile of the two public calls.

    python benchmarks/probes/moe_host.py
"""

import cProfile
import pstats
import time

import torch

import tmakit
from tmakit.moe import call


def per_call_us(fn, calls=200):
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    total = (time.perf_counter() - start) / calls * 1e6
    return round(host, 1), round(total, 1)


tokens, topk, experts, hidden = 8192, 2, 8, 4096  # Mixtral's layer
x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
ids = torch.randint(0, experts, (tokens, topk), device="cuda", dtype=torch.int32)
probs = torch.rand(tokens, topk, device="cuda")
d = tmakit.moe_dispatch(x, ids, num_experts=experts, check_ids=False)
y = d.out
parts = {
    "moe_dispatch": lambda: tmakit.moe_dispatch(x, ids, num_experts=experts, check_ids=False),
    "moe_dispatch check_ids": lambda: tmakit.moe_dispatch(x, ids, num_experts=experts),
    "route_ids": lambda: call.route_ids(ids, experts, 1),
    "permute (call)": lambda: call.permute(x, d.row_map, y.shape[0], None, False),
    "ops.moe_permute": lambda: torch.ops.tmakit.moe_permute(x, d.row_map, y.shape[0], None, False),
    "moe_combine": lambda: tmakit.moe_combine(y, d.row_map, probs),
    "call.combine": lambda: call.combine(y, d.row_map, probs, False),
    "ops.moe_combine": lambda: torch.ops.tmakit.moe_combine(y, d.row_map, probs, False),
    "route_ids_by_torch": lambda: call.route_ids_by_torch(ids, experts, 1),
    "torch.sort int64 16k": lambda: torch.sort(ids.reshape(-1).long(), stable=True),
}
for name, fn in parts.items():
    print(f"{name:28s} host, host+device us/call: {per_call_us(fn)}")
for name in ("moe_dispatch", "moe_combine"):
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(100):
        parts[name]()
    profile.disable()
    torch.cuda.synchronize()
    print(f"== cProfile of 100 calls of {name}")
    pstats.Stats(profile).sort_stats("tottime").print_stats(22)
