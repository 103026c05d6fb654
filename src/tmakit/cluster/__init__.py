"""Clusters whose CTAs share a tile: multicast loads (every CTA of a cluster needs every tile; each
issues its slice into all) and the cluster row dot (each CTA's own A tile beside the X tile the
cluster shares). The core's commands draw them with `--cluster` (`plan`, `explain`, `check`,
`verify`, `demo`, `bench`), reading this family by name (`tmakit.registry.exporting`).

    plan     MulticastPlan, ClusterDotPlan, the cluster shapes a cluster kernel takes
    kernel   MulticastLoadKernel, PipelinedMulticastKernel, ClusterDotKernel
    launch   compile_multicast_load, compile_cluster_dot
    api      MulticastPlan (what `tmakit` exports)
    bench    the multicast and cluster-dot studies; --cluster's rows in the load-shaped studies
    explain  each CTA's slice of the tile and whether multicast paid: `explain --cluster`'s section
    check    verify_multicast_load, verify_cluster_dot
"""

from ..registry import FamilyRecord

FAMILY = FamilyRecord(
    name="cluster",
    summary="clusters whose CTAs share a tile: multicast loads and the cluster row dot",
    parts=frozenset({"plan", "kernel", "launch", "api", "bench", "explain", "check"}),
)
