"""Four models written in torch expressions, eager forward and backward, with and without
`tmakit.enable()`, in interleaved rounds in one process: each model's median step time both ways,
their ratio, the share of the step's device time the overridden aten ops take (torch.profiler,
without the overrides), the calls the overrides served (`tmakit.stats`), and whether the outputs
and gradients are the same bit for bit (else the largest difference, beside torch's own between
two runs without: a row summed from many rows by atomic adds differs run to run).

    python benchmarks/probes/enable_models.py [--small] [--rounds N] [--out FILE]

The models: (a) an MoE layer (router top-k, `index_select` dispatch, an `mm` per expert,
`index_add_` combine); (b) a transformer block whose attention reshapes heads with
`transpose(1, 2).contiguous()`; (c) an embedding-bag-heavy model (`index_select` of sparse
features, `index_add_` in its backward); (d) FSDP2's own copy-in and copy-out of 1,000
parameters (`torch._foreach_copy_` into a flat buffer, `split_with_sizes_copy` out), per pair of
tensors. `--small` runs each on the CPU at a tiny size (the test's: nothing is overridden there).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

import torch

import tmakit
from tmakit.bench.timing import host_costs_us


def moe_layer(device: str, small: bool) -> Callable[[], list]:
    tokens, hidden, experts, topk, ffn = (64, 32, 4, 2, 16) if small else (16384, 4096, 8, 2, 256)
    generator = torch.Generator(device).manual_seed(0)
    x = torch.randn(tokens, hidden, device=device, generator=generator, requires_grad=True)
    router = torch.randn(hidden, experts, device=device, generator=generator, requires_grad=True)
    weights = torch.randn(experts, hidden, ffn, device=device, generator=generator) / hidden**0.5
    weights.requires_grad_()

    def step() -> list:
        probs, ids = torch.softmax(x @ router, -1).topk(topk, dim=-1)
        out = torch.zeros_like(x)
        order = torch.argsort(ids.flatten(), stable=True)
        token = order // topk
        rows = x.index_select(0, token)  # dispatch
        counts = torch.bincount(ids.flatten(), minlength=experts).tolist()
        outputs = [part @ weights[e] @ weights[e].t() for e, part in enumerate(rows.split(counts))]
        expert_out = torch.cat(outputs) * probs.flatten()[order, None]
        out = out.index_add(0, token, expert_out)  # combine
        return [out, *torch.autograd.grad(out.square().mean(), (x, router, weights))]

    return step


def transformer_block(device: str, small: bool) -> Callable[[], list]:
    batch, seq, heads, dim = (2, 8, 2, 8) if small else (8, 2048, 32, 128)
    width = heads * dim
    generator = torch.Generator(device).manual_seed(1)
    x = torch.randn(batch, seq, width, device=device, generator=generator, requires_grad=True)
    qkv = torch.randn(width, 3 * width, device=device, generator=generator) / width**0.5
    proj = torch.randn(width, width, device=device, generator=generator) / width**0.5
    qkv.requires_grad_(), proj.requires_grad_()

    def step() -> list:
        q, k, v = (x @ qkv).split(width, -1)
        q, k, v = (t.view(batch, seq, heads, dim).transpose(1, 2).contiguous() for t in (q, k, v))
        attention = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = attention.transpose(1, 2).contiguous().view(batch, seq, width) @ proj
        return [out, *torch.autograd.grad(out.square().mean(), (x, qkv, proj))]

    return step


def embedding_bags(device: str, small: bool) -> Callable[[], list]:
    rows, width, lookups, bags = (100, 8, 64, 8) if small else (1 << 20, 128, 1 << 18, 4096)
    generator = torch.Generator(device).manual_seed(2)
    table = torch.randn(rows, width, device=device, generator=generator, requires_grad=True)
    index = torch.randint(0, rows, (lookups,), device=device, generator=generator)
    bag = torch.randint(0, bags, (lookups,), device=device, generator=generator).sort().values

    def step() -> list:
        gathered = table.index_select(0, index)
        pooled = torch.zeros(bags, width, device=device).index_add(0, bag, gathered)
        return [pooled, *torch.autograd.grad(pooled.square().mean(), (table,))]

    return step


def fsdp_copies(device: str, small: bool) -> Callable[[], list]:
    count = 20 if small else 1000
    generator = torch.Generator(device).manual_seed(3)
    sizes = torch.randint(1, 64 if small else 65536, (count,), generator=generator.manual_seed(3)).tolist()
    params = [torch.randn(n, device=device) for n in sizes]
    flat = torch.empty(sum(sizes), device=device)
    views = list(flat.split(sizes))
    outs = [torch.empty(n, device=device) for n in sizes]

    def step() -> list:
        torch._foreach_copy_(views, params)  # copy-in
        torch.split_with_sizes_copy(flat, sizes, out=outs)  # copy-out
        return [flat.clone(), *outs]

    return step


MODELS = {
    "moe layer": moe_layer,
    "transformer block": transformer_block,
    "embedding bags": embedding_bags,
    "fsdp copy-in/out": fsdp_copies,
}


def timed_ms(step: Callable[[], list], device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    step()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def overridden_share(step: Callable[[], list], device: str) -> float | None:
    """The share of the step's device time in the aten ops `enable` overrides (without them)."""
    if device != "cuda":
        return None
    from tmakit import overrides

    names = {f"aten::{name}" for name in overrides.available()}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        step()
        torch.cuda.synchronize()
    events = profile.key_averages()
    total = sum(event.self_device_time_total for event in events)
    mine = sum(event.device_time_total for event in events if event.key in names)
    return mine / total if total else None


def same(a: list, b: list) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def largest_difference(a: list, b: list) -> float:
    """The largest elementwise |a - b| over the outputs and gradients (0.0: the same)."""
    return max(
        float((x.double() - y.double()).abs().max()) if x.numel() else 0.0 for x, y in zip(a, b, strict=True)
    )


def handed_back_host_us(calls: int = 2000, rounds: int = 15) -> dict:
    """What an override adds to a call it hands back, host time: a same-layout `copy_` called
    directly, and the `copy_` a `clone` of a contiguous tensor reaches inside it; and an
    `index_select` of 4 KiB rows (the rows route gives it to torch). Each call's host time with
    and without `enable()` over interleaved rounds of back-to-back calls (tiny tensors: the GPU
    is not the bound), the median of each round's difference."""
    small = torch.randn(256, device="cuda")
    dst = torch.empty_like(small)
    table = torch.randn(64, 1024, device="cuda")
    index = torch.arange(16, device="cuda")
    cases = {
        "copy_ direct (same layout)": lambda: dst.copy_(small),
        "copy_ inside clone (same layout)": lambda: small.clone(),
        "index_select direct (4 KiB rows)": lambda: table.index_select(0, index),
    }

    with tmakit.enabled():
        for call in cases.values():
            call()  # each path warm
    differences: dict[str, list[float]] = {name: [] for name in cases}
    without: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):  # a round each way, interleaved: the host's speed drifts within a run
        off = host_costs_us(cases, calls=calls, repeats=1)
        with tmakit.enabled():
            on = host_costs_us(cases, calls=calls, repeats=1)
        for name in cases:
            differences[name].append(on[name] - off[name])
            without[name].append(off[name])
    return {
        name: {
            "host_us_without": statistics.median(without[name]),
            "added_us": statistics.median(differences[name]),
        }
        for name in cases
    }


def run(small: bool, rounds: int) -> dict:
    device = "cpu" if small else "cuda"
    found = {}
    for name, make in MODELS.items():
        step = make(device, small)
        without = step()
        again = (
            step()
        )  # torch's own run-to-run difference: its index_add_ adds a repeated row's sums in any order
        with tmakit.enabled():
            tmakit.stats(reset=True)
            with_overrides = step()
            served = {" ".join(key): calls for key, calls in tmakit.stats(reset=True).items()}
        times: dict[str, list[float]] = {"without": [], "with": []}
        for _ in range(rounds):  # interleaved: each round both ways
            times["without"].append(timed_ms(step, device))
            with tmakit.enabled():
                times["with"].append(timed_ms(step, device))
        medians = {way: statistics.median(samples) for way, samples in times.items()}
        found[name] = {
            "ms_without": medians["without"],
            "ms_with": medians["with"],
            "speedup": medians["without"] / medians["with"],
            "spread_without": (max(times["without"]) - min(times["without"])) / medians["without"],
            "overridden_share": overridden_share(step, device),
            "served": served,
            "same_outputs": same(without, with_overrides),
            "largest_difference": largest_difference(without, with_overrides),
            "torch_run_to_run_difference": largest_difference(without, again),
        }
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="tiny models on the CPU (the test's)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    found = run(args.small, args.rounds)
    host = {} if args.small else handed_back_host_us()
    for name, row in host.items():
        print(
            f"{name:34s} host {row['host_us_without']:6.2f} us a call, "
            f"+{row['added_us']:.2f} us under enable()"
        )
    for name, row in found.items():
        print(
            f"{name:20s} {row['ms_without']:9.3f} ms without, {row['ms_with']:9.3f} with "
            f"({row['speedup']:.3f}x), share {row['overridden_share']}, same {row['same_outputs']}"
        )
    if args.out:
        context = {"torch": torch.__version__, "tmakit_commit": os.environ.get("TMAKIT_COMMIT")}
        if torch.cuda.is_available():
            context["device"] = torch.cuda.get_device_name()
        document = {
            "study": "enable-models",
            "what": __doc__.split("\n\n")[0],
            "context": context,
            "rows": found,
            "handed_back_host": host,
        }
        with open(args.out, "w") as out:
            json.dump(document, out, indent=1)


if __name__ == "__main__":
    main()
