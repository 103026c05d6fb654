"""The cluster family's public face: `MulticastPlan`, the plan of a cluster's multicast loads, which
`tmakit` exports (its kernels are reached through `tmakit.cluster.launch`)."""

from __future__ import annotations

from .plan import MulticastPlan

__all__ = ["MulticastPlan"]
