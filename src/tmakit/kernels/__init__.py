"""CuTe DSL device code (importing this package imports the DSL).

The building blocks for your own kernel, one import path:

    from tmakit.kernels import TileRing, tma_load_views, shared_tile_layout, matrix_first_view

- `tma`: the shared device helpers, named after the seed's responsibilities (the layout describes
  storage, the coordinate tensor picks the transfer origin, partitioning prepares the views, the
  barrier says when the destination is ready);
- `tile_ring`: `TileRing`, the N-stage ring's protocol (full/empty barriers, parities, hang guard);
- `ring`: `TmaRingKernel`, the ring kernel written once (set-up, one producer loop, one consumer
  loop) that every ring family subclasses;
- `one_stage`: `OneStageKernel`, the seed's one-tile schedule written once;
- `copy`: TMA-store copies, transposing copies, bulk copies.
A family's kernel is in its package: the seed's tile load and the pipelined load in
`tmakit.load.kernel`, the multicast loads and the cluster row dot in `tmakit.cluster.kernel`
(`make_cluster_load_atom`), `tmakit.patches.kernel` (`make_im2col_load_atom` feeds a TileRing
with im2col loads), and so on.
"""

from ..plan.ring import GUARD_WORDS
from .tile_ring import TileRing
from .tma import (
    allocate_tile_and_barrier,
    init_load_barrier,
    issue_tile_load,
    matrix_first_view,
    padded_matrix_view,
    shared_tile_layout,
    tile_coordinate,
    tma_load_views,
)

__all__ = [
    "GUARD_WORDS",
    "TileRing",
    "allocate_tile_and_barrier",
    "init_load_barrier",
    "issue_tile_load",
    "matrix_first_view",
    "padded_matrix_view",
    "shared_tile_layout",
    "tile_coordinate",
    "tma_load_views",
]
