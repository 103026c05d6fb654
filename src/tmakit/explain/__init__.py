"""`tmakit explain`: the seed's three questions answered for any configuration, from the real
CuTe objects, one module per mode:

- `load`: a load or a ring (the seed's three questions), and `plan --json`'s numbers; with a
  cluster, the cluster family's section (each CTA's multicast slice of the tile, and what
  multicast bought on the H200: `measured`, those figures, read from the package's
  data/h200-measured.json);
- `reduce_store`: the reduce store of the tile (`tmakit.reduce_into_`'s instruction);
- `common`: the tile marked and the configuration's numbers, shared by all of them.
"""

from .common import SEED_HIGHLIGHT, highlight_tile
from .load import describe_plan, explain, to_text, trace_views
from .measured import H200_HOT_L2_TIME_RATIO, H200_SHARED_TILE_SPEEDUP

__all__ = [
    "H200_HOT_L2_TIME_RATIO",
    "H200_SHARED_TILE_SPEEDUP",
    "SEED_HIGHLIGHT",
    "describe_plan",
    "explain",
    "highlight_tile",
    "to_text",
    "trace_views",
]
