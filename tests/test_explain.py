"""`tmakit explain` on the CPU: the seed's facts, and a non-seed configuration against the plan."""

import json
import shlex

import pytest

from entry_point import ROOT, tmakit
from tmakit import SEED, LoadConfig, LoadPlan, TmaConfigError
from tmakit.cli import main
from tmakit.cluster.plan import CLUSTER_SHAPES, MulticastPlan
from tmakit.explain import explain, highlight_tile, to_text
from tmakit.plan import PipelinePlan


def test_seed_facts(capsys):
    assert main(["explain", "--highlight", "1,2"]) == 0
    text = capsys.readouterr().out
    for fact in [
        "132 blocks, 7 tiles per strip, 924 tile loads",
        "(8448,1792):(1792,1)",
        "S<0,4,3> o 0 o (64,256):(256,1)",
        "tensor<(0,0) o (8448,1792):(1@1,1@0)>",
        "its first coordinate is (512, 64)",
        "element origin (64, 512)",
        "((64,256)):((256,1))",
        "shared memory requested: 32776 bytes",
        "each barrier phase expects 32768 bytes",
        "block 0 waits on parity 0, 1, 0, 1, 0, 1, 0",
    ]:
        assert fact in text, fact


def test_swizzled_pipelined_bf16_agrees_with_the_plan(capsys):
    load = LoadPlan(LoadConfig((1000, 776), "bf16", (128, 64), 128))
    pipeline = PipelinePlan(load, stages=4)
    report = explain(pipeline, (2, 3))
    assert report["bytes"]["bytes_per_transfer"] == load.expected_tx_bytes == 16384
    assert report["bytes"]["transfers_per_tile"] == 1
    assert report["bytes"]["shared_memory_requested"] == pipeline.smem_bytes
    assert report["decomposition"]["highlight_element_origin"] == list(load.tile_origin(2, 3)) == [256, 192]
    assert report["views"]["tile_first_coordinate"] == "(192, 256)"  # TMA order: innermost first
    assert "S<3,4,3>" in report["views"]["shared_tile"]
    assert report["phases"]["block_0_parity"][:5] == [[0, 0], [1, 0], [2, 0], [3, 0], [0, 1]]
    assert "s0:p1" in to_text(report)
    assert main(["explain", "--shape", "1000x776", "--dtype", "bf16", "--tile", "128x64", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bytes"]["expected_tx_bytes_per_phase"] == 16384


def test_column_major_explains_the_transposed_shared_tile():
    load = LoadPlan(LoadConfig((512, 384), "fp16", (64, 32), 128, "col"))
    views = explain(PipelinePlan(load, stages=1), (0, 1))["views"]
    assert views["global_view"] == "(512,384):(1,512)"
    assert "(64,32):(1,64)" in views["shared_layout"]
    assert explain(PipelinePlan(LoadPlan(SEED), stages=1))["bytes"]["barrier_bytes"] == 8


def test_cluster_slices_come_from_the_real_partitions(capsys):
    assert main(["explain", "--cluster", "2x2", "--highlight", "1,2"]) == 0
    text = capsys.readouterr().out
    assert "clusters: 2x2, multicast mask 0b1111" in text
    for rank in range(4):  # TMA order (column, row): rank r starts 16 r rows into tile (1, 2)
        assert (
            f"CTA {rank} issues tile rows {16 * rank}-{16 * rank + 15}: global tensor<(512,{64 + 16 * rank})"
            in text
        )
    assert main(["plan", "--cluster", "1x4"]) == 0
    assert (
        "CTA 3: tile rows 48-63 (8192 bytes issued), barrier expects 32768 bytes" in capsys.readouterr().out
    )


def test_a_tile_outside_the_grid_is_refused_before_tracing():
    plan = LoadPlan(SEED)
    with pytest.raises(TmaConfigError, match=r"highlight \(500, 1\) is outside the 132 x 7 tile grid"):
        explain(PipelinePlan(plan, stages=1), (500, 1))
    assert highlight_tile(plan) == (1, 2)  # the seed's tile by default
    assert highlight_tile(LoadPlan(LoadConfig((128, 256)))) == (1, 0)  # moved into a 2 x 1 grid


def test_the_worked_example_in_the_docs_is_what_the_command_prints():
    """docs/explain-example.md shows a command and its output; the two must not drift apart."""
    doc = (ROOT / "docs" / "explain-example.md").read_text()
    command = next(line.strip() for line in doc.splitlines() if line.strip().startswith("tmakit explain "))
    shown = doc.split("```\n")[1]  # the first fenced block
    run = tmakit(*shlex.split(command)[1:])
    assert run.returncode == 0, run.stderr
    assert run.stdout == shown


def test_a_reduce_store_is_explained_from_the_plan_and_a_refused_pair_is_refused(capsys):
    """--reduce: the store writes back the box the load read (same origin, same bytes) with the
    op in the instruction, and the element rule is the model's; a pair TMA refuses is refused
    before anything is traced."""
    from tmakit.model.reduce_ops import ELEMENT_RULES

    load = LoadPlan(LoadConfig((3, 100, 304), "bf16", (32, 64)))
    report = explain(PipelinePlan(load, stages=2), (1, 2), reduce_op="max")
    reduce = report["reduce"]
    assert reduce["instruction"] == "cp.reduce.async.bulk.tensor.3d.global.shared::cta.max.tile.bulk_group"
    assert reduce["box"] == [32, 64] and reduce["bytes_read_from_shared_memory"] == load.expected_tx_bytes
    assert reduce["destination_element_origin"] == report["decomposition"]["highlight_element_origin"]
    assert reduce["element_rule"] == ELEMENT_RULES["max"] and ELEMENT_RULES["max"] in to_text(report)
    assert explain(PipelinePlan(load, stages=1))["reduce"] is None
    with pytest.raises(TmaConfigError, match="reduce op 'add' with dtype int8"):
        explain(PipelinePlan(LoadPlan(LoadConfig((64, 64), "int8", (16, 64))), stages=1), reduce_op="add")
    assert main(["explain", "--dtype", "fp32", "--tile", "32x64", "--reduce", "add"]) == 0
    assert "4. What does a reduce store (add) do with the tile?" in capsys.readouterr().out


def test_explain_cluster_says_whether_multicast_pays_with_the_measured_ratios():
    from tmakit.explain import H200_HOT_L2_TIME_RATIO, H200_SHARED_TILE_SPEEDUP

    load = LoadPlan(SEED)
    for cluster in CLUSTER_SHAPES:
        if cluster not in H200_HOT_L2_TIME_RATIO and 64 % (cluster[0] * cluster[1]) == 0:
            report = explain(PipelinePlan(load, stages=1), multicast=MulticastPlan(load, cluster))
            assert report["clusters"]["h200_hot_l2_time_ratio"] is None
            assert "This shape was not measured on the H200 (measured: 1x2, 2x1, 2x2, 1x4" in to_text(report)
    for cluster, (per_strip, persistent) in H200_HOT_L2_TIME_RATIO.items():
        text = to_text(explain(PipelinePlan(load, stages=1), multicast=MulticastPlan(load, cluster)))
        assert "does it pay? Not for loads alone" in text
        assert f"without multicast: {per_strip:.2f}x" in text
        assert f"{persistent:.2f}x with persistent clusters" in text
        for (rows, cols), speedup in H200_SHARED_TILE_SPEEDUP.items():
            assert f"{speedup:.2f}x ({rows}x{cols})" in text
