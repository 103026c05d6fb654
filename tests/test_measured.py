"""The H200 figures `tmakit explain --cluster` quotes, shipped as the package's
data/h200-measured.json: each equals, to the two places explain prints, the figure recomputed from
the committed results file and key it names. A new run of a study must update both."""

import json
import statistics

from entry_point import ROOT
from tmakit.cluster.plan import CLUSTER_SHAPES
from tmakit.explain import H200_HOT_L2_TIME_RATIO, H200_SHARED_TILE_SPEEDUP
from tmakit.explain.measured import MEASURED


def results(source: str) -> dict:
    return json.loads((ROOT / source).read_text())


def test_the_hot_l2_time_ratios_are_the_multicast_hot_l2_results():
    """parts['l2-hot'].parts[CLUSTER].rows: the median multicast ring's time over its no-multicast
    twin's, one cluster per strip and persistent clusters."""
    figures = MEASURED["multicast_hot_l2_time_ratio"]
    parts = results(figures["source"])["parts"]["l2-hot"]["parts"]
    assert set(H200_HOT_L2_TIME_RATIO) <= set(CLUSTER_SHAPES)  # explain says which shapes were measured
    assert sorted(parts) == sorted(figures["ratios"])  # every part of the study is quoted
    for cluster, quoted in figures["ratios"].items():
        median = {row["kernel"]: statistics.median(row["samples_us"]) for row in parts[cluster]["rows"]}
        multicast = sorted(name for name in median if name.startswith(f"tmakit multicast {cluster}"))
        assert len(multicast) == 2  # one cluster per strip, then persistent clusters
        twin = {name: name.replace("tmakit multicast", "tmakit no-multicast") for name in multicast}
        measured = [median[name] / median[twin[name]] for name in multicast]
        assert [round(ratio, 2) for ratio in measured] == [
            quoted["one_cluster_per_strip"],
            quoted["persistent_clusters"],
        ], (cluster, measured)


def test_the_shared_tile_speedups_are_the_cluster_dot_results():
    """summary.parts['cold-CLUSTER'].multicast_speedup: the persistent-clusters entry."""
    figures = MEASURED["shared_tile_speedup"]
    parts = results(figures["source"])["summary"]["parts"]
    for cluster, quoted in figures["speedups"].items():
        ratios = parts[f"cold-{cluster}"]["multicast_speedup"]
        (persistent,) = [ratio for name, ratio in ratios.items() if "persistent" in name]
        assert round(persistent, 2) == quoted, (cluster, persistent)


def test_explain_reads_the_packaged_figures_by_cluster_shape():
    """What explain prints is the file's figures, in the file's order (its "measured:" list)."""
    ratios = MEASURED["multicast_hot_l2_time_ratio"]["ratios"]
    assert [f"{r}x{c}" for r, c in H200_HOT_L2_TIME_RATIO] == list(ratios)
    assert list(H200_HOT_L2_TIME_RATIO.values()) == [
        (quoted["one_cluster_per_strip"], quoted["persistent_clusters"]) for quoted in ratios.values()
    ]
    speedups = MEASURED["shared_tile_speedup"]["speedups"]
    assert {f"{r}x{c}": s for (r, c), s in H200_SHARED_TILE_SPEEDUP.items()} == speedups
