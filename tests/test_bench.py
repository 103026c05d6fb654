"""The timing experiment's arithmetic and reports, with synthetic samples (no GPU)."""

import json

import pytest

from tmakit import CopyOptions, LoadConfig, LoadPlan, TmaConfigError
from tmakit.bench import ncu, report, suites
from tmakit.bench.report import BenchRow
from tmakit.families import bench_shape
from tmakit.load.bench import PipelineVariant
from tmakit.reduce import bench as reduce_bench

GIB = 2**30


def rows():
    shape = (32768, 16384)
    return [
        BenchRow("tmakit load", "load", shape, "fp16", GIB, [240.0, 244.0, 239.0, 250.0, 241.0], "ok"),
        BenchRow("torch copy_", "copy", shape, "fp16", GIB, [520.0, 522.0, 525.0]),
        BenchRow("torch sum", "sum", shape, "fp16", GIB, [258.0, 256.0, 260.0]),
    ]


def test_bytes_are_the_fewest_that_must_move():
    assert report.bytes_moved("load", 100) == 100
    assert report.bytes_moved("sum", 100) == 100
    assert report.bytes_moved("copy", 100) == 200
    assert report.bytes_moved("reduce", 100) == 300  # src read, dst read and written
    with pytest.raises(KeyError):
        report.bytes_moved("transpose?", 100)


def test_statistics_and_bandwidth():
    load, copy, _ = rows()
    assert load.median_us == 241.0
    assert load.gbps == pytest.approx(GIB / 241.0 / 1e3)
    assert copy.gbps == pytest.approx(2 * GIB / 522.0 / 1e3)
    assert load.percent_of_peak(4.8e12) == pytest.approx(100 * GIB / 241e-6 / 4.8e12)
    assert load.percent_of_peak(None) is None


def test_peak_by_card_name():
    assert report.peak_bandwidth("NVIDIA H200") == 4.8e12
    assert report.peak_bandwidth("NVIDIA H100 80GB HBM3") == 3.35e12
    assert report.peak_bandwidth("NVIDIA A100-SXM4-80GB") is None


def test_rotation_exceeds_four_l2s_unless_hot():
    l2 = 60 * 2**20
    assert suites.rotation_buffers(30 * 2**20, l2) == 9
    assert suites.rotation_buffers(GIB, l2) == 2  # never the same buffer twice in a row
    assert suites.rotation_buffers(GIB, l2, hot_l2=True) == 1
    assert suites.rotation_buffers(2**20, l2) * 2**20 > 4 * l2


def test_ratios_are_to_the_baseline_of_the_same_shape():
    ratio = report.ratios(rows(), "torch sum")
    load_key = ("tmakit load", (32768, 16384), "fp16")
    assert ratio[load_key] == pytest.approx(258.0 / 241.0)
    assert ratio[("torch sum", (32768, 16384), "fp16")] == pytest.approx(1.0)


def test_a_reduce_row_is_compared_with_torchs_op_of_the_same_op_only():
    shape = (8192, 16384)
    rows = [
        BenchRow(
            "tmakit.reduce_into_ add (default)", "reduce", shape, "bf16", GIB, [700.0], notes={"op": "add"}
        ),
        BenchRow("torch add_", "reduce", shape, "bf16", GIB, [770.0], notes={"op": "add"}),
        BenchRow(
            "tmakit.reduce_into_ min (default)", "reduce", shape, "bf16", GIB, [800.0], notes={"op": "min"}
        ),
        BenchRow("torch minimum (out=dst)", "reduce", shape, "bf16", GIB, [760.0], notes={"op": "min"}),
    ]
    assert rows[0].gbps == pytest.approx(3 * GIB / 700.0 / 1e3)
    to_add = report.ratios(rows, "torch add_")
    assert to_add == {
        ("tmakit.reduce_into_ add (default)", shape, "bf16"): pytest.approx(770.0 / 700.0),
        ("torch add_", shape, "bf16"): pytest.approx(1.0),
    }
    to_min = report.ratios(rows, "torch minimum (out=dst)")
    assert to_min[("tmakit.reduce_into_ min (default)", shape, "bf16")] == pytest.approx(760.0 / 800.0)
    assert len(to_min) == 2


def test_reduce_cases_parse_check_and_default_to_the_dtype_given():
    assert reduce_bench.ReduceCase.parse("add:fp32, bf16", "fp16") == [
        reduce_bench.ReduceCase("add", "fp32"),
        reduce_bench.ReduceCase("add", "bf16"),
    ]
    assert reduce_bench.ReduceCase.parse("max", "fp16") == [reduce_bench.ReduceCase("max", "fp16")]
    assert reduce_bench.ReduceCase.parse("min:float16", "fp32") == [reduce_bench.ReduceCase("min", "fp16")]
    with pytest.raises(TmaConfigError, match="reduce op 'min' with dtype fp32"):
        reduce_bench.ReduceCase.parse("min:fp32", "fp16")
    with pytest.raises(TmaConfigError, match="no torch in-place op"):
        reduce_bench.ReduceCase.parse("dec:uint32", "fp16")
    for text in suites.DEFAULT_REDUCE_CASES:  # the default cases are all timeable
        assert reduce_bench.ReduceCase.parse(text, "fp16")
    reduce_bench.check_reduce_options(CopyOptions(stages=6, store_depth=3))
    with pytest.raises(TmaConfigError, match="as_rows and bulk"):
        reduce_bench.check_reduce_options(CopyOptions(as_rows=True))
    plan = LoadPlan(LoadConfig((8192, 16384), "fp32"))
    reduce_bench.check_reduce_plan(
        reduce_bench.ReduceCase("add", "fp32"), plan, CopyOptions(stages=16, store_depth=12)
    )
    with pytest.raises(TmaConfigError, match="12 stages of 32768 bytes"):  # found on the H200 only, once
        reduce_bench.check_reduce_plan(
            reduce_bench.ReduceCase("add", "fp32"), plan, CopyOptions(tile=(32, 256), stages=12)
        )


def test_table_and_json_report(tmp_path):
    cells = report.table_rows(rows(), 4.8e12, ["torch copy_", "torch sum"])
    assert cells[0][0] == "tmakit load" and cells[0][-1] == "ok"
    assert cells[0][3] == "241.00" and cells[0][4] == "239.00-250.00"
    assert cells[0][7] == "-"  # host cost not measured for these synthetic rows
    assert len(cells[0]) == len(report.TABLE_HEADER) + 2 + 1
    context = {"device": "NVIDIA H200", "peak_bandwidth": 4.8e12, "commit": "abc"}
    written = report.report(rows(), context, ["torch sum"], "load", "a test")
    text = json.dumps(written)
    loaded = json.loads(text)
    assert loaded["context"]["commit"] == "abc" and loaded["context"]["date"]
    assert loaded["rows"][0]["samples_us"] == [240.0, 244.0, 239.0, 250.0, 241.0]
    assert loaded["rows"][0]["min_us"] == 239.0 and loaded["rows"][0]["max_us"] == 250.0
    assert loaded["summary"]["ratios"]["torch sum"]["tmakit load 32768x16384 fp16"] == pytest.approx(
        258.0 / 241.0
    )
    assert list(loaded) == ["study", "what", "context", "rows", "summary"]  # the one schema


def test_bench_sizes_reach_a_gibibyte():
    assert bench_shape(1024, 2) == (32768, 16384)
    assert bench_shape(1, 2) == (128, 4096)


def test_ncu_csv_units_are_normalised():
    text = """==PROF== Connected to process
924/924 tiles correct
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","python3","h","kernel_cutlass_x","1","7","(32, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","Mbyte","30.28"
"0","1","python3","h","kernel_cutlass_x","1","7","(32, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","10,672"
"""
    values = ncu.parse_ncu_csv(text)
    assert values["gpu__time_duration.sum"] == [pytest.approx(10.672)]
    assert values["dram__bytes_read.sum"] == [pytest.approx(30.28e6)]
    with pytest.raises(ValueError, match="unknown Nsight Compute unit"):
        ncu.parse_ncu_csv(text.replace('"ns"', '"fortnight-second"'))


def test_pipeline_variants_parse_by_name():
    parsed = [
        PipelineVariant.parse(text)
        for text in (
            "stages=4",
            "stages=7,consumer_warps=2,persistent",
            "stages=4,consumer_warps=4,consumer=rowsum",
        )
    ]
    assert parsed == [PipelineVariant(4), PipelineVariant(7, 2, True), PipelineVariant(4, 4, False, "rowsum")]
    assert PipelineVariant(7, 2, True).name == "tmakit load 7st x2w, persistent"
    assert PipelineVariant(7, 2, True).describe() == "stages=7,consumer_warps=2,persistent=true"


def test_prefetch_variants_parse():
    parsed = [
        PipelineVariant.parse(text)
        for text in (
            "stages=1,prefetch_tiles=3,prefetch_descriptor",
            "stages=4,consumer_warps=2,persistent,prefetch_tiles=2",
        )
    ]
    assert parsed == [
        PipelineVariant(1, 1, False, "none", 3, True),
        PipelineVariant(4, 2, True, "none", 2, False),
    ]
    assert PipelineVariant(1, 1, False, "none", 3, True).name.endswith("prefetch 3, descriptor prefetch")
    with pytest.raises(TmaConfigError, match="'q' is not one of stages"):
        PipelineVariant.parse("stages=4,q")
    with pytest.raises(TmaConfigError, match="names no stages"):
        PipelineVariant.parse("persistent")


def test_copy_variant_parses():
    assert PipelineVariant.parse("stages=4,persistent,consumer=copy") == PipelineVariant(4, 1, True, "copy")
    assert PipelineVariant(4, 1, True, "copy").name == "tmakit copy 4st x1w, persistent"


def test_copy_options_parse_by_name():
    texts = (
        "default",
        "stages=4",
        "tile=32x256,stages=6,store_depth=4",
        "stages=3,blocks_per_sm=2",
        "as_rows",
        "tile=16x256,stages=8,as_rows=true",
        "evict_first=true",
        "tile=16x256,evict_first=false",
        "evict_first=false,pdl=true",
        "pdl=false",
    )
    assert [CopyOptions.parse(text) for text in texts] == [
        CopyOptions(),
        CopyOptions(None, 4),
        CopyOptions((32, 256), 6, 4, 1),
        CopyOptions(None, 3, None, 2),
        CopyOptions(as_rows=True),
        CopyOptions((16, 256), 8, as_rows=True),
        CopyOptions(evict_first=True),
        CopyOptions((16, 256), evict_first=False),
        CopyOptions(evict_first=False, pdl=True),
        CopyOptions(pdl=False),
    ]
    assert "pdl" not in CopyOptions.parse("default").changed()  # the API's default
    assert CopyOptions.parse("pdl=false").changed()["pdl"] is False
    assert CopyOptions.parse("as_rows").changed()["as_rows"] is True
    assert CopyOptions.parse("tile=64x128,stages=5").describe() == "tile=64x128,stages=5"
    assert CopyOptions.parse("").describe() == "default"
    assert CopyOptions.parse("as_rows,tile=8x256").describe() == "tile=8x256,as_rows=true"
    assert CopyOptions.parse("evict_first=false").describe() == "evict_first=false"
    split = [CopyOptions.parse("load_hint=evict_first,store_hint=evict_last"),
             CopyOptions.parse("load_hint=default,store_hint=none,tile_order=blocked")]  # fmt: skip
    assert (
        split[0].changed()["load_hint"] == "evict_first" and split[0].changed()["store_hint"] == "evict_last"
    )
    assert split[0].describe() == "load_hint=evict_first,store_hint=evict_last"
    assert (split[1].load_hint, split[1].store_hint, split[1].changed()["tile_order"]) == (
        None,
        "none",
        "blocked",
    )
    assert "tile_order" not in split[0].changed()
    assert CopyOptions.parse("tile_order=columns").changed()["tile_order"] == "columns"
    assert CopyOptions.parse("tile_order=columns").describe() == "tile_order=columns"
    assert CopyOptions.parse(CopyOptions((32, 256), 6, bulk=True).describe()) == CopyOptions(
        (32, 256), 6, bulk=True
    )
    with pytest.raises(TmaConfigError, match="tile='4x' is not ROWSxCOLS"):
        CopyOptions.parse("tile=4x")
    with pytest.raises(TmaConfigError, match="'stage' is not one of tile, stages"):
        CopyOptions.parse("stage=4")
    with pytest.raises(TmaConfigError, match="unknown copy option stage; tmakit.CopyOptions has tile"):
        CopyOptions.of(stage=4)


def test_copy_option_bulk_selects_bulk_copies():
    assert [CopyOptions.parse("bulk"), CopyOptions.parse("bulk,tile=32x256,stages=4")] == [
        CopyOptions(bulk=True),
        CopyOptions((32, 256), 4, bulk=True),
    ]
    assert CopyOptions.parse("bulk").changed()["bulk"] is True
    assert CopyOptions.parse("bulk").describe() == "bulk=true"
    assert "bulk" not in CopyOptions.parse("as_rows").changed()


def test_host_cost_study_has_the_one_schema():
    from tmakit.bench.hostcost import host_cost_study

    study = host_cost_study({"commit": "abc"}, {"copy": {"tmakit_copy_call_us": 5.0}, "plain": {"a_us": 1.5}})
    assert list(study) == ["study", "what", "context", "rows", "summary"]
    assert study["rows"] == [
        {"group": "copy", "key": "tmakit_copy_call_us", "us": 5.0},
        {"group": "plain", "key": "a_us", "us": 1.5},
    ]


def test_a_copy_option_of_zero_is_refused_not_defaulted():
    from tmakit import LoadConfig, LoadPlan

    load = LoadPlan(LoadConfig((1024, 512), "fp16", (16, 256)))
    with pytest.raises(TmaConfigError, match="store depth is 0"):
        CopyOptions(store_depth=0).plan(load, False, 132, True)
    with pytest.raises(TmaConfigError, match="0 stages"):
        CopyOptions(stages=0).plan(load, False, 132, True)
    assert CopyOptions().plan(load, False, 132, True).store_depth == 4  # 8 stages: half of them
