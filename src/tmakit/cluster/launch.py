"""The cluster family's kernels compiled once per plan (`runtime.compile.compiles`): the
multicast load (single-tile or a ring per CTA) and the cluster row dot, with the example arguments
each is compiled against. Compiling needs no GPU; the kernel module (the DSL) is imported where a
kernel is built. How many clusters stay resident on the GPU is the core's
(`runtime.launch.max_active_clusters`)."""

from __future__ import annotations

from ..config import DTYPES
from ..plan import DEFAULT_RELEASE
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
