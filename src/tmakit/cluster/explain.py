"""`tmakit explain --cluster` (and `plan --cluster`): each CTA's slice of the marked tile in a
cluster sharing it by multicast, and whether multicast paid on the H200. A section of the load's
explanation (`tmakit.explain`, which reads these by name): the family has no `--kernel` of its
own, and `--cluster` is the core's option."""

# No `from __future__ import annotations`: the DSL reads the traced function's annotations as objects.
import argparse
from typing import Any

from ..explain.measured import (
    H200_HOT_L2_TIME_RATIO,
    H200_SHARED_TILE_SPEEDUP,
    HOT_L2_SOURCE,
    SHARED_TILE_SOURCE,
)
from ..runtime.compile import compile_kernel, fake_source
from .plan import MulticastPlan

KERNELS = ()  # no --kernel: a cluster is drawn and explained with the load's --cluster
FLAGS = ()  # --cluster is the core's: plan, explain, check, verify, demo and bench take it
WHAT = ""  # nothing for --kernel's help
# What the core reads by name (`registry.exporting`): the cluster section of the load's explanation.
__all__ = ["cluster_lines", "cluster_numbers", "cluster_section"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """None of its own: `--cluster` is the core's (`cli.args.add_cluster`)."""


def cluster_numbers(multicast: MulticastPlan) -> dict[str, Any]:
    """The cluster's numbers from the plan alone (no tracing), with the measured time ratio."""
    measured = H200_HOT_L2_TIME_RATIO.get(tuple(multicast.cluster))  # None: a shape not measured
    return {
        "cluster": list(multicast.cluster),
        "launch_grid": list(multicast.launch_grid),
        "h200_hot_l2_time_ratio": None
        if measured is None
        else {"one_cluster_per_strip": measured[0], "persistent_clusters": measured[1]},
        "multicast_mask": multicast.multicast_mask,
        "expected_tx_bytes_per_cta": multicast.load.expected_tx_bytes,
        "ctas": [
            {
                "rank": rank,
                "x_y": [rank % multicast.cluster[0], rank // multicast.cluster[0]],
                "tile_rows": list(multicast.slice_of(rank)),
                "issued_bytes": multicast.issued_bytes_per_cta,
            }
            for rank in range(multicast.cluster_size)
        ],
    }


def trace_cluster_slices(multicast: MulticastPlan, highlight: tuple[int, int]) -> list[dict[str, str]]:
    """Each CTA's share of the highlighted tile, from the multicast kernel's own atom and
    `slice_views` (a shared tile built as the kernel builds it, swizzle included): the real slices."""
    import cutlass
    import cutlass.cute as cute

    from .kernel import MulticastLoadKernel, make_cluster_load_atom

    plan = multicast.load
    kernel = MulticastLoadKernel(multicast)
    slices: list[dict[str, str]] = []

    @cute.jit
    def trace(src: cute.Tensor):
        load_atom, coordinate_view, shared_layout = make_cluster_load_atom(multicast, src)
        tile_ptr = cute.make_ptr(kernel.element_type, 0, cute.AddressSpace.smem, assumed_align=1024)
        shared_tile = cute.make_tensor(
            cute.recast_ptr(tile_ptr, shared_layout.inner, dtype=kernel.element_type), shared_layout.outer
        )
        for rank in cutlass.range_constexpr(multicast.cluster_size):
            global_part, shared_part = kernel.slice_views(
                load_atom, coordinate_view, shared_tile, highlight, rank
            )
            slices.append({"shared": str(shared_part), "global": str(global_part)})

    compile_kernel(trace, fake_source(plan.config))
    return slices


def cluster_section(highlight: tuple[int, int], multicast: MulticastPlan) -> dict[str, Any]:
    """The report's "clusters": the numbers and the traced slices of each CTA."""
    numbers = cluster_numbers(multicast)
    for cta, traced in zip(numbers["ctas"], trace_cluster_slices(multicast, highlight), strict=True):
        cta.update(traced)
    return numbers


def cluster_lines(clusters: dict[str, Any]) -> list[str]:
    """The text's cluster section (`cluster_section`'s): each CTA's slice, then whether multicast
    pays."""
    lines = [
        "",
        f"clusters: {clusters['cluster'][0]}x{clusters['cluster'][1]}, multicast mask "
        f"{clusters['multicast_mask']:#06b}; every CTA's barrier expects "
        f"{clusters['expected_tx_bytes_per_cta']} bytes (its own slice and every peer's land in it)",
    ]
    for cta in clusters["ctas"]:
        first, last = cta["tile_rows"]
        lines.append(f"  CTA {cta['rank']} issues tile rows {first}-{last - 1}: global {cta['global']}")
    ratio = clusters["h200_hot_l2_time_ratio"]
    lines += [
        "  does it pay? Not for loads alone on the H200. The CTAs of a cluster read each tile at about",
        "  the same time, and Nsight Compute counts about the same L2 read requests with multicast and",
        "  without: the identical requests are already served once, so multicast has no L2 traffic to",
        "  save. It adds a cluster barrier at the start and a drain at the exit of every CTA.",
    ]
    if ratio is None:
        shapes = ", ".join(f"{r}x{c}" for r, c in H200_HOT_L2_TIME_RATIO)
        lines += [
            f"  This shape was not measured on the H200 (measured: {shapes}; {HOT_L2_SOURCE}).",
        ]
    else:
        lines += [
            f"  Measured (seed shape, L2 hot, 4 stages), time over the same kernel without multicast: "
            f"{ratio['one_cluster_per_strip']:.2f}x",
            f"  with one cluster per strip, {ratio['persistent_clusters']:.2f}x with persistent clusters "
            f"({HOT_L2_SOURCE}).",
        ]
    lines += [
        "  Where it paid: CTAs that each combine the shared tile with their own rows (the cluster row",
        "  dot, plan.ClusterDotPlan), reading from DRAM, persistent clusters: without multicast the",
        "  same kernel took "
        + " and ".join(f"{s:.2f}x ({r}x{c})" for (r, c), s in H200_SHARED_TILE_SPEEDUP.items())
        + " the time; with the L2 hot, multicast lost there too",
        f"  ({SHARED_TILE_SOURCE}).",
    ]
    return lines
