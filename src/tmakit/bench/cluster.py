"""The cluster suites: multicast loads against the same cluster without, and the cluster row dot
beside torch's expressions, every tmakit row verified in the same run."""

from __future__ import annotations

from dataclasses import replace

from ..check.run import compare_dot, make_dot_inputs, run_cluster_dot, verify_multicast_load
from ..plan import ClusterDotPlan, LoadPlan, MulticastPlan
from ..runtime.compile import to_cute_tensor
from ..runtime.device import current_stream
from ..runtime.launch import compile_cluster_dot, compile_multicast_load
from .baselines import TORCH_DOTS
from .report import BenchRow
from .suites import rotated_sources, rotation_buffers
from .timing import graph_samples_us, interleaved_graph_samples_us


def bench_multicast(
    plan: LoadPlan,
    cluster: tuple[int, int],
    stages: int,
    l2_bytes: int,
    hot_l2: bool,
    samples: int,
    persistent_clusters: int | None = None,
) -> list[BenchRow]:
    """The cluster kernel's loads alone (ring of `stages` per CTA, consumers only wait and
    release), with multicast and without (each CTA loading every whole tile itself), each first
    verified with its store-back in the same run, then timed interleaved
    (`interleaved_graph_samples_us`: the differences are a few percent). Every CTA of a cluster
    receives the whole strip, so SMs receive cluster-size x the tensor either way; multicast
    reads it from L2 once. With `persistent_clusters`, both again with that many resident
    clusters walking the tiles."""
    import torch

    config = plan.config
    sources = rotated_sources(plan, l2_bytes, hot_l2)
    walks = (None,) if persistent_clusters is None else (None, persistent_clusters)
    scratch = {}
    launches, found = {}, {}
    for walk, multicast in [(walk, multicast) for walk in walks for multicast in (True, False)]:
        cluster_plan = MulticastPlan(plan, cluster, multicast, max(stages, 2), walk)
        verdicts = verify_multicast_load(cluster_plan)
        compiled = compile_multicast_load(cluster_plan, store=False)
        # Never written (the load-only kernel); one per cluster size.
        copies = scratch.setdefault(
            cluster_plan.copies_shape,
            torch.empty(cluster_plan.copies_shape, dtype=sources[0].dtype, device="cuda"),
        )
        pairs = [(to_cute_tensor(s), to_cute_tensor(copies)) for s in sources]
        what = "multicast" if multicast else "no-multicast"
        name = f"tmakit {what} {cluster[0]}x{cluster[1]} {cluster_plan.stages}st"
        name += "" if walk is None else f" {cluster_plan.clusters} persistent clusters"
        launches[name] = [lambda p=p, c=compiled: c(p[0], p[1], current_stream()) for p in pairs]
        found[name] = (cluster_plan, walk, verdicts, compiled.compile_seconds)
    timed = interleaved_graph_samples_us(launches, samples)
    rows = []
    for name, (cluster_plan, walk, verdicts, compile_seconds) in found.items():
        ok = sum(v.ok for v in verdicts)
        rows.append(
            BenchRow(
                name,
                "load",
                tuple(config.shape),
                config.dtype,
                plan.tensor_bytes,
                timed[name],
                f"{ok}/{len(verdicts)} CTAs of the cluster hold every tile ({verdicts[0]})",
                compile_seconds,
                {
                    "cluster": list(cluster),
                    "stages": cluster_plan.stages,
                    "persistent_clusters": walk,
                    "multicast": cluster_plan.multicast,
                    "bytes_to_sms": cluster_plan.cluster_size * plan.tensor_bytes,
                    "rotated_buffers": len(sources),
                    "timed": "interleaved with the other cluster rows",
                },
            )  # fmt: skip
        )
    del sources, scratch, launches
    torch.cuda.empty_cache()
    return rows


# How far torch's dot expressions may be from the fp32 sum (relative to sum |a * x|), by how they
# round (`baselines.TORCH_DOTS`): a result or products rounded to the input type are off by up to
# its unit roundoff (2^-11 for fp16, 2^-8 for bf16; 4x that here); cuBLAS's fp32 accumulation
# may add in a different order and with tensor-core rounding.
TORCH_DOT_TOLERANCE = {
    "fp32": {"fp16": 1e-4, "bf16": 1e-4},
    "output": {"fp16": 2.0**-9, "bf16": 2.0**-6},
    "products": {"fp16": 2.0**-9, "bf16": 2.0**-6},
}


def bench_cluster_dot(
    dot: ClusterDotPlan,
    l2_bytes: int,
    hot_l2: bool,
    samples: int,
    persistent_clusters: int | None = None,
    torch_baselines: bool = True,
) -> list[BenchRow]:
    """The cluster row dot with multicast and without (the same kernel, cluster and launch; each
    CTA then loads the whole X tile itself), both one cluster per strip and, with
    `persistent_clusters`, that many resident clusters; beside torch's expressions
    (`baselines.TORCH_DOTS`, each one this torch has). Every row verified first on the same
    inputs (every out[b, m]); GB/s counts A and X read once. `dot`'s own `multicast` and
    `persistent_clusters` are replaced by each variant's."""
    import torch

    count = rotation_buffers(dot.input_bytes, l2_bytes, hot_l2)
    a, x = make_dot_inputs(dot)
    operands = [(a, x)] + [(a.clone(), x.clone()) for _ in range(count - 1)]  # own memory each
    out = torch.empty(dot.out_shape, dtype=torch.float32, device="cuda")
    cute_out = to_cute_tensor(out)
    cute_operands = [(to_cute_tensor(a_), to_cute_tensor(x_)) for a_, x_ in operands]
    row = lambda name, samples_us, verified, compile_seconds=None, **notes: BenchRow(  # noqa: E731
        name, "load", dot.shape, dot.dtype, dot.input_bytes, samples_us, verified, compile_seconds,
        {"rotated_buffers": count, "hot_l2": hot_l2, "tile": list(dot.tile), **notes},
    )  # fmt: skip
    rows = []
    walks = (None,) if persistent_clusters is None else (None, persistent_clusters)
    launches, found = {}, {}
    for walk, multicast in [(walk, multicast) for walk in walks for multicast in (True, False)]:
        variant = replace(dot, multicast=multicast, persistent_clusters=walk)
        verdict = compare_dot(variant, a, x, run_cluster_dot(variant, a, x))
        compiled = compile_cluster_dot(variant)
        what = "multicast" if multicast else "no-multicast"
        name = f"tmakit cluster dot {what} {dot.cluster[0]}x{dot.cluster[1]} {dot.stages}st"
        name += "" if walk is None else f" {variant.clusters} persistent clusters"
        launches[name] = [
            lambda p=p, c=compiled, o=cute_out: c(p[0], p[1], o, current_stream()) for p in cute_operands
        ]
        found[name] = (variant, walk, multicast, verdict, compiled)
    timed = interleaved_graph_samples_us(launches, samples)  # the variants differ by a few percent
    for name, (variant, walk, multicast, verdict, compiled) in found.items():
        rows.append(
            row(
                name,
                timed[name],
                verdict,
                compiled.compile_seconds,
                cluster=list(dot.cluster),
                stages=dot.stages,
                consumer_warps=dot.consumer_warps,
                persistent_clusters=walk,
                clusters=variant.clusters,
                multicast=multicast,
                l2_read_bytes=variant.l2_read_bytes,
            )
        )
    for name, (function, rounding) in (TORCH_DOTS if torch_baselines else {}).items():
        try:
            result = function(a, x)
        except (TypeError, RuntimeError) as error:  # an expression this torch lacks
            print(f"{name}: skipped ({type(error).__name__}: {str(error).splitlines()[0][:120]})")
            continue
        verdict = compare_dot(dot, a, x, result, TORCH_DOT_TOLERANCE[rounding][dot.dtype])
        launches = [lambda a_=a_, x_=x_, f=function: f(a_, x_) for a_, x_ in operands]
        rows.append(row(name, graph_samples_us(launches, samples), verdict, rounding=rounding))
    del operands, cute_operands, out, cute_out, a, x
    torch.cuda.empty_cache()
    return rows
