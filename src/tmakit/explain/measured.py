"""The H200 measurements `tmakit explain --cluster` quotes, read from the package's
data/h200-measured.json (each figure there names the results file and key it comes from)."""

import json
from importlib import resources

MEASURED = json.loads((resources.files("tmakit") / "data" / "h200-measured.json").read_text())
_HOT_L2 = MEASURED["multicast_hot_l2_time_ratio"]
_SHARED_TILE = MEASURED["shared_tile_speedup"]


def _cluster(name: str) -> tuple[int, int]:
    """A cluster shape as the results files name it ("2x1") as a (rows, columns) pair."""
    rows, columns = name.split("x")
    return int(rows), int(columns)


# Per cluster shape measured: the multicast load ring's time over the same kernel's without
# multicast, (one cluster per strip, persistent clusters); L2 hot, the seed shape, 4 stages.
H200_HOT_L2_TIME_RATIO: dict[tuple[int, int], tuple[float, float]] = {
    _cluster(name): (ratio["one_cluster_per_strip"], ratio["persistent_clusters"])
    for name, ratio in _HOT_L2["ratios"].items()
}
HOT_L2_SOURCE: str = _HOT_L2["source"]
# Per cluster shape: the cluster row dot's time without multicast over its time with it (inputs
# past the L2, persistent clusters).
H200_SHARED_TILE_SPEEDUP: dict[tuple[int, int], float] = {
    _cluster(name): speedup for name, speedup in _SHARED_TILE["speedups"].items()
}
SHARED_TILE_SOURCE: str = _SHARED_TILE["source"]
