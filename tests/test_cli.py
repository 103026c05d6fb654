"""The `tmakit` commands through the real entry point: every flag does something, every argument is
checked before anything prints or looks for a GPU, errors are one line on stderr (exit 2),
findings exit 1."""

import json
import math

import pytest

from entry_point import one_error_line, tmakit
from tmakit import SEED, LoadPlan
from tmakit.demo import _demo_compile_only
from tmakit.runtime.device import find_hopper_gpu

NO_GPU = find_hopper_gpu()[0] is None


def test_plan_prints_the_seed_quietly():
    run = tmakit("plan")
    assert run.returncode == 0 and run.stderr == ""
    for fact in ["total tile loads  924", "32776 bytes requested", "tile (1, 2): element origin (64, 512)"]:
        assert fact in run.stdout, fact


def test_a_configuration_tma_cannot_serve_is_one_line_naming_the_clis_own_fix():
    run = tmakit("plan", "--shape", "1000x777", "--dtype", "bf16")
    assert run.returncode == 2 and run.stdout == ""
    error = one_error_line(run)
    assert "1554 bytes; TMA needs a multiple of 16" in error
    assert "--pad" in error and "padded_empty" not in error  # the CLI user's remedy, not the library's
    padded = tmakit("plan", "--shape", "1000x777", "--dtype", "bf16", "--pad")
    assert padded.returncode == 0 and "strides (784, 1)" in padded.stdout


def test_torch_dtype_names_are_accepted():
    by_torch_name = tmakit("plan", "--dtype", "float16", "--shape", "128x256")
    assert by_torch_name.returncode == 0, by_torch_name.stderr
    assert by_torch_name.stdout == tmakit("plan", "--dtype", "fp16", "--shape", "128x256").stdout
    assert "bfloat16" in one_error_line(tmakit("plan", "--dtype", "float128"))  # the error lists both
    assert "the same-size int64 (name int64" in one_error_line(tmakit("plan", "--dtype", "double"))


@pytest.mark.parametrize("command", ["plan", "demo"])
def test_the_default_highlight_is_never_an_error(command):
    run = tmakit(command, "--shape", "128x256")  # a 2 x 1 tile grid: the seed's tile (1, 2) is not in it
    assert run.returncode == 0, run.stderr
    assert "tile (1, 0): element origin (64, 0)" in run.stdout


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["plan", "--highlight", "99,99"], "highlight (99, 99) is outside the 132 x 7 tile grid"),
        (["explain", "--highlight", "500,1"], "highlight (500, 1) is outside the 132 x 7 tile grid"),
        (["demo", "--highlight", "2,0", "--shape", "128x256"], "outside the 2 x 1 tile grid"),
        (["plan", "--cluster", "3x3"], "cluster 3x3 is 9 CTAs; a portable cluster holds at most 8"),
        (["check", "--cluster", "3x3"], "cluster 3x3 is 9 CTAs; a portable cluster holds at most 8"),
        (["plan", "--tile", "64by256"], "tile '64by256' is not of the form ROWSxCOLS"),
        (["plan", "--shape", "5"], "tensor has 1 dimensions"),
        (["explain", "--stages", "0"], "'0' is not an integer >= 1"),
        (["explain", "--consumer-warps", "4"], "--consumer-warps sets the consumers of a ring"),
        ([], "the following arguments are required: COMMAND"),
        (["plot"], "invalid choice: 'plot'"),
        (["plan", "--nope"], "unknown flag --nope (see 'tmakit plan --help')"),
        (["plan", "--swizzle", "16"], "argument --swizzle: invalid choice: 16"),
        (["check", "--mistake", "typo"], "argument --mistake: invalid choice: 'typo'"),
    ],
)
def test_bad_arguments_are_refused_before_anything_prints(args, error):
    """Usage errors and values a command refuses: exit 2, one line naming what is wrong, nothing
    on stdout."""
    run = tmakit(*args)
    assert run.returncode == 2 and run.stdout == ""
    assert error in one_error_line(run)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["verify", "--tile", "64x999"], "tile columns is 999"),
        (["bench", "--tile", "64x999"], "tile columns is 999"),
        (["verify", "--shape", "1000x777", "--dtype", "bf16"], "--pad"),
        (["verify", "--sweep", "5", "--stages", "4"], "--sweep verifies one-stage loads"),
        (["verify", "--seed", "7"], "--seed picks the configurations of --sweep"),
        (["verify", "--stages", "4", "--timeout", "5"], "--timeout limits each one-stage load's worker"),
        (["bench", "--copy", "stages=8"], "--copy configures --kernel copy, transpose or reduce"),
        (["bench", "--specialised"], "--specialised configures --kernel copy or transpose"),
        (
            ["bench", "--kernel", "reduce", "--specialised"],
            "--specialised configures --kernel copy or transpose",
        ),
        (["bench", "--reduce", "add"], "--reduce configures --kernel reduce"),
        (["bench", "--kernel", "reduce", "--reduce", "max:fp32"], "reduce op 'max' with dtype fp32"),
        (["bench", "--kernel", "reduce", "--reduce", "inc:uint32"], "no torch in-place op to time against"),
        (["bench", "--kernel", "reduce", "--reduce", "add:fp99"], "fp99"),
        (["bench", "--kernel", "reduce", "--copy", "bulk"], "as_rows and bulk"),
        (["bench", "--kernel", "reduce", "--copy", "store_depth=0"], "store depth is 0"),  # planned first
        (["bench", "--kernel", "reduce", "--pipeline", "stages=4"], "times reduce stores only"),
        (["bench", "--kernel", "copy", "--copy", "stagez=8"], "'stagez' is not one of"),
        (["bench", "--pipeline", "consumer_warps=2"], "names no stages"),
        (["bench", "--stages", "4"], "--stages and --persistent-clusters set the ring of --cluster"),
        (["bench", "--persistent-clusters", "auto"], "--stages and --persistent-clusters set the ring"),
        (["bench", "--cluster", "2x2", "--persistent-clusters", "0"], "'0' is not an integer >= 1"),
        (["bench", "--json", "no/such/folder/out.json"], "folder no/such/folder does not exist"),
    ],
)
def test_gpu_commands_check_their_arguments_before_looking_for_a_gpu(args, error):
    run = tmakit(*args)
    assert run.returncode == 2 and run.stdout == ""
    line = one_error_line(run)
    assert error in line and "Hopper" not in line


@pytest.mark.skipif(not NO_GPU, reason="a Hopper GPU is here")
@pytest.mark.parametrize("command", ["verify", "bench"])
def test_gpu_commands_say_why_they_cannot_run_here(command):
    run = tmakit(command)
    assert run.returncode == 2 and run.stdout == ""
    assert one_error_line(run).startswith(f"tmakit: {command} needs a Hopper GPU: ")


def test_check_replays_the_seed_and_catches_each_mistake():
    run = tmakit("check")
    assert run.returncode == 0 and run.stderr == ""
    assert "tile 6: arrive + expect 32768 B, copy 32768 B" in run.stdout
    assert "ok: every wait completes" in run.stdout
    for mistake, reason in [
        ("expect-more", "more bytes expected than delivered"),
        ("expect-less", "early-completion"),
        ("skip-arrival", "missing-arrival"),
        ("same-parity", "wrong-parity"),
    ]:
        found = tmakit("check", "--mistake", mistake)
        assert found.returncode == 1 and found.stderr == "", mistake
        assert reason in found.stdout, mistake


def test_check_replays_rings_and_clusters():
    ring = tmakit("check", "--stages", "4")
    assert ring.returncode == 0, ring.stderr
    assert "4-stage ring of block 0 (7 tiles)" in ring.stdout and "init 'empty[3]'" in ring.stdout
    overwrite = tmakit("check", "--stages", "4", "--mistake", "skip-empty-wait")
    assert overwrite.returncode == 1 and "[stage-overwrite]" in overwrite.stdout
    cluster = tmakit("check", "--cluster", "2x2")
    assert cluster.returncode == 0, cluster.stderr
    assert "2x2 cluster 0 (4 CTAs, 7 tiles each)" in cluster.stdout and "CTA 3:" in cluster.stdout
    assert "copy 8192 B -> stage 0 (multicast to CTAs [0, 1, 2, 3])" in cluster.stdout
    mismatch = tmakit("check", "--cluster", "2x2", "--mistake", "expect-slice")
    assert mismatch.returncode == 1 and "[multicast-mismatch]" in mismatch.stdout
    wrong = tmakit("check", "--stages", "4", "--mistake", "same-parity")
    assert wrong.returncode == 2 and "does not apply to a ring schedule" in one_error_line(wrong)
    assert tmakit("check", "--highlight", "5,5").returncode == 2  # check marks no tile: no such flag


def test_demo_with_a_cluster_compiles_the_multicast_kernel():
    run = tmakit("demo", "--cluster", "2x2", "--shape", "256x512")
    assert run.returncode == 0, run.stderr
    assert "cluster           2x2 = 4 CTAs" in run.stdout
    if NO_GPU:
        assert ".multicast::cluster" in run.stdout
        assert "the TMA load is a multicast::cluster load: each CTA issues its 8192-byte slice" in run.stdout
        assert "CTA 3:" in run.stdout and "-> agree" in run.stdout
    else:
        assert "verify:   CTA 3 of every cluster: " in run.stdout


def test_a_cluster_plan_draws_its_axes_and_counts_its_ctas():
    """1x2 and 2x1 share every slice and mask (only the size matters to them), but not the launch:
    each is drawn as the grid places its CTAs, and the grid line counts CTAs, not a load's blocks."""
    tall, wide = (tmakit("plan", "--cluster", shape, "--shape", "512x1024") for shape in ("1x2", "2x1"))
    assert tall.returncode == wide.returncode == 0
    assert "grid              (8, 2, 1) = 16 CTAs x 32 threads" in tall.stdout
    assert "y=0 [CTA 0]\n" in tall.stdout and "y=1 [CTA 1]" in tall.stdout
    assert "grid              (16, 1, 1) = 16 CTAs x 32 threads" in wide.stdout
    assert "y=0 [CTA 0][CTA 1]" in wide.stdout and "y=1" not in wide.stdout
    assert "blocks x" not in tall.stdout + wide.stdout
    numbers = json.loads(tmakit("plan", "--cluster", "2x2", "--json").stdout)["clusters"]
    assert numbers["launch_grid"] == [264, 2, 1]
    assert [cta["x_y"] for cta in numbers["ctas"]] == [[0, 0], [1, 0], [0, 1], [1, 1]]


def test_demo_writes_json_as_every_command_does(tmp_path):
    run = tmakit("demo", "--shape", "256x512", "--json")
    assert run.returncode == 0 and "expect_tx in PTX" in run.stderr  # the text moves to stderr
    report = json.loads(run.stdout)
    assert report["ok"] is True and report["plan"]["bytes"]["shared_memory_requested"] == 32776
    if NO_GPU:
        assert report["run"]["expect_tx_bytes"] == {"ptx": [32768], "plan": 32768}
        assert report["run"]["ptx_instructions"]["cp.async.bulk.tensor"] >= 1
    else:
        assert report["run"]["correct"] is True and report["run"]["kernel_median_us"] > 0
    refused = tmakit("demo", "--json", str(tmp_path / "missing" / "x.json"))
    assert refused.returncode == 2 and "does not exist" in one_error_line(refused)


def test_demo_names_the_run_it_replays_without_calling_it_the_seeds():
    lines = []
    assert _demo_compile_only(LoadPlan(SEED), lines.append)
    text = "\n".join(lines)
    assert "cp.async.bulk.tensor.2d" in text and "MISSING" not in text
    assert "[32768] bytes; plan expects 32768 -> agree" in text
    assert "Block 0's loads replayed on the CPU model" in text and "seed's run" not in text
    assert "tile 6: arrive + expect 32768 B" in text


def test_json_goes_to_stdout_alone_or_to_a_file_beside_the_text(tmp_path):
    plan = tmakit("plan", "--json", "--cluster", "1x2")
    assert plan.returncode == 0
    numbers = json.loads(plan.stdout)  # nothing but the JSON on stdout
    assert numbers["bytes"]["shared_memory_requested"] == 32776
    assert numbers["decomposition"]["highlight_element_origin"] == [64, 512]
    assert [cta["tile_rows"] for cta in numbers["clusters"]["ctas"]] == [[0, 32], [32, 64]]
    path = tmp_path / "check.json"
    check = tmakit("check", "--mistake", "expect-more", "--json", str(path))
    assert check.returncode == 1 and "1 finding(s)" in check.stdout
    findings = json.loads(path.read_text())["findings"]
    assert [f["kind"] for f in findings] == ["expected-more-than-delivered"] and findings[0]["hang"]
    explain = tmakit("explain", "--json", "-")
    assert json.loads(explain.stdout)["bytes"]["expected_tx_bytes_per_phase"] == 32768


def test_a_sweep_refuses_the_flags_it_would_ignore():
    """--sweep draws its own configurations: a --shape or --tile beside it would be ignored."""
    from entry_point import one_error_line, tmakit

    run = tmakit("verify", "--sweep", "3", "--shape", "64x64", "--tile", "32x64")
    assert run.returncode == 2 and "--shape, --tile do not apply with --sweep" in one_error_line(run)
    same = tmakit("verify", "--sweep", "3", "--dtype", "fp16")  # the default, given: still ignored
    assert same.returncode == 2 and "--dtype does not apply with --sweep" in one_error_line(same)


def test_plan_takes_the_rings_stages_as_explain_and_check_do():
    ring = tmakit("plan", "--stages", "4")
    assert ring.returncode == 0
    assert "grid              132 blocks x 64 threads (2 warps)" in ring.stdout
    assert "pipeline          4 stages x 32768 bytes" in ring.stdout
    numbers = json.loads(tmakit("plan", "--stages", "4", "--json").stdout)
    assert numbers["ring"]["shared_memory_requested"] == 4 * 32768 + 64
    cluster = tmakit("plan", "--stages", "4", "--cluster", "2x2")
    assert (
        "= 528 CTAs x 64 threads" in cluster.stdout and "ring              4 stages per CTA" in cluster.stdout
    )
    too_many = tmakit("plan", "--stages", "99")
    assert too_many.returncode == 2 and "1..7 stages fit this tile" in one_error_line(too_many)


@pytest.mark.parametrize(
    "args, shown",
    [
        (
            ["--kernel", "copy", "--shape", "2048x4096"],  # 16 MiB: within the L2, TMA's
            [
                "route             tma (the tensors as laid out)",
                "copy              row-major source into a row-major",
                "stores",
            ],
        ),
        (
            ["--kernel", "copy", "--shape", "4096x4096"],  # both past the L2: the driver's memcpy, as copy_
            ["route             torch (a row-major copy of one layout past the L2", "no TMA plan"],
        ),
        (
            ["--kernel", "transpose", "--shape", "4096x4096"],
            ["into a col-major destination", "transpose         each"],
        ),
        (
            ["--kernel", "reduce", "--reduce", "amax", "--dtype", "bf16"],
            ["each store .max into the destination"],
        ),
        (
            ["--kernel", "copy", "--copy", "tile=32x256,stages=4"],
            ["tile              32 x 256", "pipeline          4 stages"],
        ),
        (
            ["--kernel", "im2col", "--shape", "2x56x56x64", "--im2col", "kernel=3,padding=1"],
            [
                "route             tma (im2col loads of",
                "chosen            the rule",
                "patch matrix      6272 x 576",
            ],
        ),
        (
            ["--kernel", "im2col", "--shape", "2x224x224x16", "--im2col", "kernel=7,stride=2,padding=3"],
            [
                "overlapping windows copied",
                "chosen            the rule",
                "padded input      2 x 230 x 230 x 16",
                "64 runs x 112",
            ],
        ),
        (
            [
                "--kernel",
                "im2col",
                "--shape",
                "2x224x224x16",
                "--im2col",
                "kernel=7,stride=2,padding=3,by=loads",
            ],
            [
                "route             tma (im2col loads of",
                "chosen            by=loads",
                "box               128 pixels x 16",
            ],
        ),
        (
            [
                "--kernel",
                "im2col",
                "--shape",
                "2x224x224x16",
                "--im2col",
                "kernel=7,stride=2,padding=3,stages=2",
            ],
            [
                "route             tma (im2col loads of 128 pixels x 16 channels, 2 stages)",
                "chosen            tile=/stages= given",
            ],
        ),
        (
            ["--kernel", "im2col", "--shape", "2x56x56x64", "--im2col", "kernel=3,padding=1,tile=64x32"],
            ["im2col loads of 64 pixels x 32 channels", "box               64 pixels x 32 channels"],
        ),
        (
            ["--kernel", "im2col", "--shape", "2x56x56x16", "--im2col", "kernel=3,padding=1,by=windows"],
            ["chosen            by=windows", "run of S*C = 48 elements (96 bytes)"],
        ),
    ],
    ids=[
        "copy",
        "copy-past-the-l2",
        "transpose",
        "reduce",
        "options",
        "im2col",
        "im2col-stem",
        "im2col-by-loads",
        "im2col-stages",
        "im2col-tile",
        "im2col-by-windows",
    ],
)
def test_plan_describes_each_kernel_a_call_plans(args, shown):
    run = tmakit("plan", *args)
    assert run.returncode == 0, run.stderr
    assert all(text in run.stdout for text in shown), run.stdout


@pytest.mark.parametrize(
    "args, refusal",
    [
        (["--kernel", "reduce"], "--kernel reduce needs --reduce OP (add, min, max"),
        (["--kernel", "im2col"], "--kernel im2col needs --im2col kernel=K[,stride=S]"),
        (["--kernel", "copy", "--reduce", "add"], "--reduce does not apply to --kernel copy"),
        (["--kernel", "copy", "--stages", "4"], "--stages does not apply"),
        (["--copy", "stages=4"], "--copy does not apply without --kernel"),
        (
            ["--kernel", "im2col", "--shape", "2x8x8x64", "--im2col", "kernel=3", "--tile", "8x8"],
            "--tile does not",
        ),
        (["--kernel", "im2col", "--shape", "2x8x8x64", "--im2col", "kernel=3,by=fast"], "give one of loads"),
        (
            ["--kernel", "im2col", "--shape", "2x8x8x16", "--im2col", "kernel=3,by=windows,tile=16x16"],
            "tile= and stages= are the loads' box",
        ),
        (
            ["--kernel", "im2col", "--shape", "2x8x8x64", "--im2col", "kernel=3,by=windows"],
            "im2col_by='windows' cannot serve this call",
        ),
    ],
)
def test_plan_refuses_what_a_kernel_does_not_take(args, refusal):
    run = tmakit("plan", *args)
    assert run.returncode == 2 and refusal in one_error_line(run)


def test_plan_and_explain_of_a_reduce_print_its_route_on_the_gpu():
    """`--kernel reduce` reads --gpu: the route `reduce_into_` takes there first, then its plan,
    or no plan where torch's op serves the call (an add past 40% of the L2, a pair no TMA reduce
    store takes)."""
    stem = ["--kernel", "reduce", "--reduce", "add", "--dtype", "fp32"]
    within = tmakit("plan", *stem, "--shape", "1024x1024", "--gpu", "h100")
    assert within.returncode == 0, within.stderr
    assert within.stdout.startswith(
        "route             tma (the tensors as laid out)\non                an NVIDIA H100"
    )
    assert "reduce            each store .add into the destination" in within.stdout
    beyond = tmakit("plan", *stem, "--shape", "4096x4096").stdout  # 3 x 64 MiB moved
    assert beyond.startswith("route             torch (an add beyond L2: torch's in-place op measured faster")
    assert "no TMA plan       torch's op serves the call" in beyond and "tile" not in beyond
    refused = json.loads(tmakit("explain", *stem[:3], "max", "--dtype", "fp32", "--json").stdout)["kernel"]
    assert refused["route"]["path"] == "torch" and refused["gpu"] == "h200"
    assert "reduce op 'max' with dtype fp32" in refused["route"]["reason"]
    viewed = tmakit("explain", *stem[:4], "--shape", "1024x3", "--dtype", "fp16").stdout
    assert viewed.startswith("route             tma-view (a compact run as 12 x 256 rows)")
    assert "on its view 12 x 256" in viewed and "1. Why a coordinate tensor?" in viewed
    plain = tmakit("explain", "--reduce", "add", "--gpu", "h100")  # the plain load's walkthrough
    assert plain.returncode != 0 and "--gpu" in plain.stderr


def test_explain_takes_the_kernel_plan_takes():
    transpose = tmakit("explain", "--kernel", "transpose", "--shape", "4096x4096")
    assert transpose.returncode == 0, transpose.stderr
    assert transpose.stdout.startswith("route             tma (the tensors as laid out)")
    assert "\ntranspose         row-major source into a col-major destination" in transpose.stdout
    assert "1. Why a coordinate tensor?" in transpose.stdout and "4 consumer warp(s)" in transpose.stdout
    reduce = json.loads(
        tmakit("explain", "--kernel", "reduce", "--reduce", "amax", "--dtype", "bf16", "--json").stdout
    )
    assert (
        reduce["kernel"]["kind"] == "reduce"
        and "reduce            each store .max into the destination" in reduce["kernel"]["summary"]
    )
    im2col = tmakit(
        "explain", "--kernel", "im2col", "--shape", "2x56x56x64", "--im2col", "kernel=3,padding=1"
    )
    assert im2col.returncode == 0 and im2col.stdout.startswith("im2col: 2x56x56x64 (NHWC)")
    stem = [
        "explain",
        "--kernel",
        "im2col",
        "--shape",
        "2x224x224x16",
        "--im2col",
        "kernel=7,stride=2,padding=3",
    ]
    windows = tmakit(*stem)
    assert windows.returncode == 0 and windows.stdout.startswith("route: the zero-padded input's overlapping")
    assert "64 of its 7168 elements are the padding's zeros" in windows.stdout
    refused = tmakit(*stem, "--highlight", "0,0")
    assert refused.returncode == 2 and "add by=loads" in one_error_line(refused)
    loads = tmakit(*stem[:-1], "kernel=7,stride=2,padding=3,by=loads", "--highlight", "0,0")
    assert loads.returncode == 0 and loads.stdout.startswith("im2col: 2x224x224x16 (NHWC)")
    assert "--copy does not apply" in one_error_line(tmakit("explain", "--copy", "stages=4"))


@pytest.mark.parametrize(
    "args, refusal",
    [
        (["--kernel", "copy", "--swizzle", "32", "--tile", "16x16"], "--swizzle does not apply"),
        (["--kernel", "copy", "--tile", "32x32", "--copy", "tile=64x64"], "give the tile once"),
        (["--kernel", "reduce", "--reduce", "add", "--copy", "as_rows=true"], "but as_rows and bulk"),
    ],
)
def test_a_kernel_plan_refuses_what_tmakits_call_would_not_do(args, refusal):
    for command in ("plan", "explain"):
        run = tmakit(command, *args)
        assert run.returncode == 2 and refusal in one_error_line(run), (command, run.stderr)


def test_a_kernel_plan_is_the_plan_copy_makes():
    """plan --kernel picks the tile, stages and rows view tmakit.copy_ picks on an H200."""
    from tmakit.limits import DEFAULT_SM_COUNT
    from tmakit.plan import CopyOptions, copy_class

    for shape, layout, kernel in (
        ((8448, 1792), "row", "copy"),
        ((4096, 4096), "row", "transpose"),
        ((4, 256, 512), "col", "copy"),
    ):
        text = tmakit(
            "plan", "--kernel", kernel, "--shape", "x".join(map(str, shape)), "--layout", layout
        ).stdout
        nbytes = 2 * math.prod(shape)
        options = CopyOptions()
        tile = options.default_tile("fp16", kernel == "transpose", None, DEFAULT_SM_COUNT, nbytes)
        copy = copy_class(
            options,
            "fp16",
            len(shape),
            layout,
            kernel == "transpose",
            tile,
            DEFAULT_SM_COUNT,
            2 * nbytes <= 60 << 20,
        )
        assert f"tile              {tile[0]} x {tile[1]}" in text, text
        assert f"pipeline          {copy.ring.stages} stages" in text, text
    rows = tmakit("plan", "--kernel", "copy", "--copy", "bulk=true").stdout
    assert "as 59136 rows of 256 (bulk=true)" in rows and "bulk copies       runs of" in rows
    beyond = tmakit("plan", "--kernel", "copy", "--shape", "8192x8192", "--gpu", "h100").stdout  # 128 MiB
    assert "route             torch (a row-major copy of one layout past the L2" in beyond, beyond
    transposed = tmakit("plan", "--kernel", "transpose", "--shape", "8192x8192").stdout  # TMA's past the L2
    assert "route             tma" in transposed and "into a col-major destination" in transposed
    strided = tmakit("plan", "--kernel", "copy", "--shape", "8192x8192", "--tile", "16x256").stdout
    assert "no TMA plan" in strided  # a tile given is checked, and the driver's memcpy still copies
    rows_past = tmakit("plan", "--kernel", "copy", "--shape", "8192x8192", "--copy", "as_rows=true").stdout
    assert "route             torch" in rows_past  # the rule reads no option: copy_ takes the memcpy too


def test_lint_checks_the_seeds_kernel_and_names_every_check():
    run = tmakit("lint")
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert run.stdout.startswith("load: the seed's tile load") and "no findings in 1 kernel" in run.stdout
    for check in ("expect-tx", "init-fence", "store-groups", "multicast-mask", "reduce-type", "wait-parity"):
        assert check in run.stdout, check


def test_lint_of_a_cluster_kernel_writes_its_json_and_refuses_an_unknown_kernel():
    run = tmakit("lint", "--kernel", "multicast-ring", "--json", "-")
    assert run.returncode == 0 and run.stderr == "", run.stderr
    (report,) = json.loads(run.stdout)["kernels"].values()
    assert report["ok"] and report["checks"]["multicast-mask"]["proven"] == 1
    assert report["checks"]["expect-tx"]["proven_share"] == 1.0
    assert "tmakit: argument --kernel: invalid choice: 'nope'" in one_error_line(
        tmakit("lint", "--kernel", "nope")
    )
