"""The arithmetic of every kernel, once: frozen plans the kernels, the CPU model, `explain` and
the tests read, never recompute. Pure Python (no torch, no DSL).

- `load`: `LoadPlan`, the seed's decomposition (grid, tiles per block, bytes per phase);
- `ring`: `PipelinePlan`, an N-stage ring (stages, parities, the persistent grid's tile order;
  how a cluster's ring frees a stage in its peers, `RELEASES`);
- `mappings`: how consumer threads split a tile (row sums, the transposing copy);
- `copy`: `CopyOptions`, every `tmakit.copy_` option with its default and check, and `CopyPlan`,
  a copy run on a ring (stores in flight, transposing staging tiles, bulk runs);
- `copy_layout`: the layout rules a copy's tensors meet whatever the tile (a rows view's, the
  strided path's);
- `reduce_ops`: the (op, dtype) pairs TMA reduce stores take (`check_reduce`), torch's names for
  the ops and the PTX types (the reduce family's plans are in `tmakit.reduce.plan`);
- `route`: `Route`, the path a two-tensor call takes (TMA, TMA on a view, or torch's op) and why.

The cluster family's plans (`MulticastPlan`, `ClusterDotPlan`) are in `tmakit.cluster.plan`.
"""

from .copy import CopyOptions, CopyPlan
from .copy_class import check_copy_shape, copy_class, copy_destination, stand_in_config
from .load import LoadPlan, ceil_div, check_run_time_extents
from .mappings import RowSumMapping, TransposeMapping
from .reduce_ops import REDUCE_DTYPES, REDUCE_OP_ALIASES, REDUCE_OPS, check_reduce, reduce_op, reduce_pairs
from .ring import DEFAULT_RELEASE, RELEASES, TILE_ORDERS, PipelinePlan, TileWalk

__all__ = [
    "REDUCE_DTYPES",
    "REDUCE_OP_ALIASES",
    "REDUCE_OPS",
    "DEFAULT_RELEASE",
    "RELEASES",
    "TILE_ORDERS",
    "CopyOptions",
    "CopyPlan",
    "LoadPlan",
    "PipelinePlan",
    "RowSumMapping",
    "TileWalk",
    "TransposeMapping",
    "ceil_div",
    "check_run_time_extents",
    "check_copy_shape",
    "check_reduce",
    "copy_class",
    "copy_destination",
    "reduce_op",
    "reduce_pairs",
    "stand_in_config",
]
