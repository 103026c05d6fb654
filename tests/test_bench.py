"""The timing experiment's arithmetic and reports, with synthetic samples (no GPU)."""

import json

import pytest

from tmakit import bench
from tmakit.bench import BenchRow
from tmakit.cli import bench_shape

GIB = 2**30


def rows():
    shape = (32768, 16384)
    return [
        BenchRow("tmakit load", "load", shape, "fp16", GIB, [240.0, 244.0, 239.0, 250.0, 241.0], "ok"),
        BenchRow("torch copy_", "copy", shape, "fp16", GIB, [520.0, 522.0, 525.0]),
        BenchRow("torch sum", "sum", shape, "fp16", GIB, [258.0, 256.0, 260.0]),
    ]


def test_bytes_are_the_fewest_that_must_move():
    assert bench.bytes_moved("load", 100) == 100
    assert bench.bytes_moved("sum", 100) == 100
    assert bench.bytes_moved("copy", 100) == 200
    with pytest.raises(KeyError):
        bench.bytes_moved("transpose?", 100)


def test_statistics_and_bandwidth():
    load, copy, _ = rows()
    assert load.median_us == 241.0
    assert load.gbps == pytest.approx(GIB / 241.0 / 1e3)
    assert copy.gbps == pytest.approx(2 * GIB / 522.0 / 1e3)
    assert load.percent_of_peak(4.8e12) == pytest.approx(100 * GIB / 241e-6 / 4.8e12)
    assert load.percent_of_peak(None) is None


def test_peak_by_card_name():
    assert bench.peak_bandwidth("NVIDIA H200") == 4.8e12
    assert bench.peak_bandwidth("NVIDIA H100 80GB HBM3") == 3.35e12
    assert bench.peak_bandwidth("NVIDIA A100-SXM4-80GB") is None


def test_rotation_exceeds_four_l2s_unless_hot():
    l2 = 60 * 2**20
    assert bench.rotation_buffers(30 * 2**20, l2) == 9
    assert bench.rotation_buffers(GIB, l2) == 2  # never the same buffer twice in a row
    assert bench.rotation_buffers(GIB, l2, hot_l2=True) == 1
    assert bench.rotation_buffers(2**20, l2) * 2**20 > 4 * l2


def test_ratios_are_to_the_baseline_of_the_same_shape():
    ratio = bench.ratios(rows(), "torch sum")
    load_key = ("tmakit load", (32768, 16384), "fp16")
    assert ratio[load_key] == pytest.approx(258.0 / 241.0)
    assert ratio[("torch sum", (32768, 16384), "fp16")] == pytest.approx(1.0)


def test_table_and_json_report(tmp_path):
    cells = bench.table_rows(rows(), 4.8e12, ["torch copy_", "torch sum"])
    assert cells[0][0] == "tmakit load" and cells[0][-1] == "ok"
    assert cells[0][3] == "241.00" and cells[0][4] == "239.00-250.00"
    assert cells[0][7] == "-"  # host cost not measured for these synthetic rows
    assert len(cells[0]) == len(bench.TABLE_HEADER) + 2 + 1
    report = bench.report(
        rows(), {"device": "NVIDIA H200", "peak_bandwidth": 4.8e12, "commit": "abc"}, ["torch sum"]
    )
    text = json.dumps(report)
    loaded = json.loads(text)
    assert loaded["context"]["commit"] == "abc" and loaded["context"]["date"]
    assert loaded["rows"][0]["samples_us"] == [240.0, 244.0, 239.0, 250.0, 241.0]
    assert loaded["rows"][0]["min_us"] == 239.0 and loaded["rows"][0]["max_us"] == 250.0
    assert loaded["ratios"]["torch sum"]["tmakit load 32768x16384 fp16"] == pytest.approx(258.0 / 241.0)


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
    values = bench.parse_ncu_csv(text)
    assert values["gpu__time_duration.sum"] == [pytest.approx(10.672)]
    assert values["dram__bytes_read.sum"] == [pytest.approx(30.28e6)]
    with pytest.raises(ValueError, match="unknown Nsight Compute unit"):
        bench.parse_ncu_csv(text.replace('"ns"', '"fortnight-second"'))


def test_pipeline_variants_parse():
    assert bench.parse_variants("4,7x2p,4x4r") == [
        bench.PipelineVariant(4),
        bench.PipelineVariant(7, 2, True),
        bench.PipelineVariant(4, 4, False, "rowsum"),
    ]
    assert bench.PipelineVariant(7, 2, True).name == "tmakit load 7st x2w, persistent"


def test_prefetch_variants_parse():
    assert bench.parse_variants("1f3t,4x2pf2") == [
        bench.PipelineVariant(1, 1, False, "none", 3, True),
        bench.PipelineVariant(4, 2, True, "none", 2, False),
    ]
    assert bench.PipelineVariant(1, 1, False, "none", 3, True).name.endswith(
        "prefetch 3, descriptor prefetch"
    )
    with pytest.raises(ValueError, match="is not STAGES"):
        bench.parse_variants("4q")


def test_copy_variant_parses():
    assert bench.parse_variants("4pc") == [bench.PipelineVariant(4, 1, True, "copy")]
    assert bench.PipelineVariant(4, 1, True, "copy").name == "tmakit copy 4st x1w, persistent"


def test_copy_options_parse_tile_stages_store_depth_and_blocks_per_sm():
    from tmakit.bench import CopyOption, parse_copy_options

    assert parse_copy_options("auto,s4,32x256s6d4,s3b2,r,r16x256s8,e,16x256n,np1,p0") == [
        CopyOption(),
        CopyOption(None, 4),
        CopyOption((32, 256), 6, 4, 1),
        CopyOption(None, 3, None, 2),
        CopyOption(as_rows=True),
        CopyOption((16, 256), 8, as_rows=True),
        CopyOption(evict_first=True),
        CopyOption((16, 256), evict_first=False),
        CopyOption(evict_first=False, pdl=True),
        CopyOption(pdl=False),
    ]
    assert "pdl" not in parse_copy_options("auto")[0].knobs  # the API's default
    assert parse_copy_options("p0")[0].knobs["pdl"] is False
    assert parse_copy_options("r")[0].knobs["as_rows"] is True
    assert parse_copy_options("64x128s5")[0].name == "64x128, 5st"
    assert parse_copy_options("auto")[0].name == "default tile, default stages"
    assert parse_copy_options("r8x256")[0].name == "8x256, default stages, rows view"
    assert parse_copy_options("n")[0].name == "default tile, default stages, no evict hint"
    split = parse_copy_options("hfl,h-0c")
    assert split[0].knobs["load_hint"] == "evict_first" and split[0].knobs["store_hint"] == "evict_last"
    assert split[0].name == "default tile, default stages, loads evict first, stores evict last"
    assert (split[1].hints, split[1].knobs["tile_order"]) == ((None, "none"), "blocked")
    assert "tile_order" not in split[0].knobs
    assert parse_copy_options("v")[0].knobs["tile_order"] == "columns"
    assert parse_copy_options("v")[0].name == "default tile, default stages, columns order"
    with pytest.raises(ValueError, match="is not"):
        parse_copy_options("4x")


def test_copy_option_k_selects_bulk_copies():
    from tmakit.bench import CopyOption, parse_copy_options

    assert parse_copy_options("k,k32x256s4") == [
        CopyOption(as_rows=True, bulk=True),
        CopyOption((32, 256), 4, as_rows=True, bulk=True),
    ]
    assert parse_copy_options("k")[0].knobs["bulk"] is True
    assert parse_copy_options("k")[0].name == "default tile, default stages, bulk copies"
    assert "bulk" not in parse_copy_options("r")[0].knobs
