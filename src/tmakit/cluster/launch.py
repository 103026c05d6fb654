"""The cluster family's kernels compiled once per plan (`runtime.compile.compiles`): the
multicast load (single-tile or a ring per CTA) and the cluster row dot, with the example arguments
each is compiled against. Compiling needs no GPU; the kernel module (the DSL) is imported where a
kernel is built. How many clusters stay resident on the GPU is the core's
(`runtime.launch.max_active_clusters`)."""

from __future__ import annotations

from dataclasses import replace

from ..config import DTYPES, SEED
from ..linter.kernels import LintVariant
from ..plan import DEFAULT_RELEASE, LoadPlan
from ..runtime.compile import compiles, fake_source, fake_tensor, placeholder_stream
from .plan import ClusterDotPlan, MulticastPlan

# What the core reads by name (`registry.exporting`): the demo's cluster kernel.
__all__ = ["compile_multicast_load"]


@compiles
def compile_multicast_load(
    multicast: MulticastPlan,
    store: bool = True,
    release: str = DEFAULT_RELEASE,
) -> tuple:
    """The cluster kernel for sm_90a: multicast, or the baseline; single-tile
    (`kernel.MulticastLoadKernel`), or an N-stage ring per CTA when the plan has stages > 1
    (`kernel.PipelinedMulticastKernel`; `store=False`: the ring's consumers only wait and release,
    for timing). `release`: how its consumers free a stage in the peers (`plan.ring.RELEASES`)."""
    if multicast.stages == 1 and not store:
        raise ValueError("the single-tile multicast kernel always stores (use stages > 1)")
    multicast.load.check_specialised()
    from .kernel import MulticastLoadKernel, PipelinedMulticastKernel

    if multicast.stages == 1:
        kernel = MulticastLoadKernel(multicast)
    else:
        kernel = PipelinedMulticastKernel(multicast, store, release)
    return kernel, *multicast_load_arguments(multicast)


def multicast_load_arguments(multicast: MulticastPlan) -> tuple:
    """The example arguments a cluster kernel is compiled against, (src, copies, stream): the
    input and each CTA's copy of the padded scratch."""
    plan = multicast.load
    copies = fake_tensor(plan.config.element, multicast.copies_shape)
    return fake_source(plan.config), copies, placeholder_stream()


@compiles
def compile_cluster_dot(dot: ClusterDotPlan) -> tuple:
    """The cluster row dot (`kernel.ClusterDotKernel`) for sm_90a, multicast or the baseline,
    called with A (B, M, K), X (M, K), out (B, M) fp32 and a stream."""
    dot.a_load.check_specialised()
    from .kernel import ClusterDotKernel

    a = fake_source(dot.a_load.config)
    x = fake_source(dot.x_load.config)
    out = fake_tensor(DTYPES["fp32"], dot.out_shape)
    return ClusterDotKernel(dot), a, x, out, placeholder_stream()


# The variants `tmakit lint --kernel` compiles (`tmakit.linter.kernels`): a small plan of each kernel.
def _multicast_ring(cluster: tuple[int, int] = (2, 2)) -> MulticastPlan:
    return replace(MulticastPlan(LoadPlan(SEED), cluster, True), stages=3)


LINT_VARIANTS = {
    "multicast": LintVariant(
        "the seed's tile multicast over a 2x1 cluster, each CTA loading its slice",
        lambda: compile_multicast_load.__wrapped__(MulticastPlan(LoadPlan(SEED), (2, 1), True)),
    ),
    "multicast-baseline": LintVariant(
        "the same 2x1 cluster, each CTA loading the whole tile itself",
        lambda: compile_multicast_load.__wrapped__(MulticastPlan(LoadPlan(SEED), (2, 1), False)),
    ),
    "multicast-ring": LintVariant(
        "a 3-stage multicast ring per CTA of a 2x2 cluster",
        lambda: compile_multicast_load.__wrapped__(_multicast_ring()),
    ),
    "multicast-lanes": LintVariant(
        "the 2x2 multicast ring, consumers releasing the peers' stages a lane each, not storing",
        lambda: compile_multicast_load.__wrapped__(_multicast_ring(), store=False, release="lanes"),
    ),
    "cluster-dot": LintVariant(
        "the cluster row dot: an A tile and a multicast X tile a stage, a 1x2 cluster",
        lambda: compile_cluster_dot.__wrapped__(
            ClusterDotPlan((2, 8448, 1792), tile=(64, 128), cluster=(1, 2))
        ),
    ),
    "cluster-dot-3x1": LintVariant(
        "the cluster row dot on a 3x1 cluster (X slices of 8 rows)",
        lambda: compile_cluster_dot.__wrapped__(
            ClusterDotPlan((3, 8448, 1792), tile=(24, 128), cluster=(3, 1))
        ),
    ),
}
