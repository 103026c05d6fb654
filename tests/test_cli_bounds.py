"""No flag value makes a `tmakit` command's work or memory grow without bound: a value that would is
refused in one line naming the limit, and one just inside the limit is answered in seconds. Runs
in-process, each call under a time limit; verify and bench are told there is no GPU."""

from __future__ import annotations

import contextlib
import io
import time
from unittest import mock

import pytest

from time_limit import time_limit
from tmakit import cli
from tmakit.cli.args import MAX_LISTED_TILES
from tmakit.cli.bench import MAX_BENCH_CASES, MAX_BENCH_SIZES
from tmakit.cli.check import MAX_FULL_TILES
from tmakit.many.explain import MAX_TABLE_CHUNKS
from tmakit.many.plan import ManyPlan
from tmakit.rows.plan import MAX_INDEX_ENTRIES

SECONDS = 10  # per call, of this process's CPU time: ample for the DSL's first import and trace
WALL_SECONDS = 60  # per call, wall time: a hang's bound (other processes' load only slows this one)


def no_gpu(command: str) -> str:
    raise cli.CommandError(f"{command} needs a Hopper GPU: none in this test")


def run(*argv: str) -> tuple[int, str, str, float]:
    """(exit code, stdout, stderr, seconds) of `tmakit *argv`, in this process, within WALL_SECONDS:
    the seconds are this process's CPU time, which a loaded machine's other processes do not add to."""
    out, err = io.StringIO(), io.StringIO()
    start = time.process_time()
    with (
        time_limit(WALL_SECONDS),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        mock.patch.object(cli.verify, "hopper_gpu", no_gpu),
        mock.patch.object(cli.bench, "hopper_gpu", no_gpu),
    ):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue(), time.process_time() - start


def refused(*argv: str) -> str:
    """The one line `tmakit *argv` refuses with (exit 2, nothing on stdout)."""
    code, out, err, _ = run(*argv)
    lines = err.splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and lines[0].startswith("tmakit: "), (code, err)
    return lines[0]


# -- rows by index: the count is the kernel's 32-bit entry count, and nothing is made per entry ------
# Within the kernel's count for rows of any length (it rounds the count up to stages of <= 2048 rows).
MOST_ROWS = MAX_INDEX_ENTRIES - 4096
KIB_ROWS = ["--shape", "1000x512"]  # fp16 rows of 1 KiB: bulk row copies serve their gathers


@pytest.mark.parametrize("command", ["plan", "explain"])
def test_rows_up_to_the_kernels_count_are_planned_at_once(command):
    code, out, err, _ = run(command, "--kernel", "rows", "--rows", f"gather:{MOST_ROWS}", *KIB_ROWS)
    assert code == 0 and err == "", err
    assert f"gather: {MOST_ROWS} rows" in out


@pytest.mark.parametrize("count", [str(MAX_INDEX_ENTRIES + 1), "10" * 20, "9" * 5000])
@pytest.mark.parametrize("command", ["plan", "explain"])
def test_rows_past_the_kernels_count_are_refused_naming_it(command, count):
    line = refused(command, "--kernel", "rows", "--rows", f"scatter:{count}")
    assert f"at most {MAX_INDEX_ENTRIES}" in line and "--rows" in line and "32-bit" in line


def test_a_rows_count_with_leading_zeros_is_its_value():
    code, out, _, _ = run("plan", "--kernel", "rows", "--rows", "gather:" + "0" * 30 + "16", *KIB_ROWS)
    assert code == 0 and "gather: 16 rows" in out


# -- the lists of block 0's tiles that plan --json, demo --json and explain write -------------------
# 64 x 2^31 bytes in 64 x 16 tiles: one block of 2^27 tiles.
LONG_BLOCK = ["--shape", "64x2147483648", "--tile", "64x16", "--dtype", "uint8"]
# 2^31 - 1 one-column tiles, one block (the rows contiguous): the most a plan takes.
LONGEST_BLOCK = ["--layout", "col", "--shape", "16x2147483647", "--tile", "16x1", "--dtype", "uint8"]


@pytest.mark.parametrize("block", [LONG_BLOCK, LONGEST_BLOCK], ids=["2^27", "2^31-1"])
@pytest.mark.parametrize("extra", [[], ["--stages", "4"], ["--cluster", "2x2"]], ids=str)
def test_plan_of_a_long_block_prints_at_once(block, extra):
    if "--cluster" in extra and block is LONGEST_BLOCK:
        assert "multicast takes row-major 2-D tensors" in refused("plan", *block, *extra)
        return
    code, out, err, _ = run("plan", *block, *extra)
    assert code == 0 and err == "", err
    assert "tiles" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--json", "-", *LONG_BLOCK],
        ["plan", "--json", "-", *LONGEST_BLOCK],
        ["plan", "--json", "-", "--stages", "4", *LONG_BLOCK],
        ["explain", *LONG_BLOCK],
        ["explain", "--stages", "7", "--consumer-warps", "31", *LONG_BLOCK],
        ["explain", "--cluster", "2x2", *LONG_BLOCK],
        ["explain", "--highlight", "0,134217727", *LONG_BLOCK],
        ["explain", "--kernel", "copy", "--copy", "tile=1x16,blocks_per_sm=1", "--shape", "536870912x17",
         "--pad", "--dtype", "uint8"],  # padded rows: TMA's copy (compact ones past the L2: the memcpy's)
        ["demo", "--json", "-", "--layout", "col", "--shape", "16x268435456", "--tile", "16x1", "--dtype",
         "uint8"],
    ],
    ids=lambda argv: " ".join(argv[:4]),
)  # fmt: skip
def test_a_block_too_long_to_list_is_refused_naming_the_limit(argv):
    line = refused(*argv)
    assert f"at most {MAX_LISTED_TILES}" in line and "tiles" in line


def test_a_block_at_the_listing_limit_is_listed_in_seconds():
    cols = MAX_LISTED_TILES * 16  # uint8 tiles of 16 columns: MAX_LISTED_TILES of them in one block
    for argv in (
        ["plan", "--json", "-", "--shape", f"64x{cols}", "--tile", "64x16", "--dtype", "uint8"],
        ["explain", "--stages", "4", "--shape", f"64x{cols}", "--tile", "64x16", "--dtype", "uint8"],
    ):
        code, out, err, seconds = run(*argv)
        assert code == 0 and err == "" and seconds < SECONDS, (argv, err)


# -- check --full replays every tile: a block of at most MAX_FULL_TILES -----------------------------
@pytest.mark.parametrize("extra", [[], ["--stages", "4"], ["--cluster", "1x2"]], ids=str)
def test_check_full_refuses_a_block_past_its_limit_naming_it(extra):
    line = refused("check", "--full", *extra, *LONG_BLOCK)
    assert f"at most {MAX_FULL_TILES} tiles" in line and "--full" in line


@pytest.mark.parametrize("extra", [[], ["--stages", "4"], ["--cluster", "2x2"]], ids=str)
def test_check_full_of_a_block_at_its_limit_is_seconds(extra):
    shape = f"64x{MAX_FULL_TILES * 16}"
    code, out, err, seconds = run("check", "--full", *extra, "--shape", shape, "--tile", "64x16", "--dtype",
                                  "uint8")  # fmt: skip
    assert code == 0 and err == "" and seconds < SECONDS
    assert f"tile {MAX_FULL_TILES - 1}: " in out


# -- bench: each list (sizes, repeated flags, reduce cases) bounded before anything is planned ------
@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--sizes", ",".join(["1"] * (MAX_BENCH_SIZES + 1))], "--sizes"),
        (["--kernel", "copy", *["--copy", "stages=4"] * (MAX_BENCH_CASES + 1)], "--copy"),
        (["--pipeline", "stages=4"] * (MAX_BENCH_CASES + 1), "--pipeline"),
        (["--kernel", "reduce", *["--reduce", "add"] * (MAX_BENCH_CASES + 1)], "--reduce"),
        (["--kernel", "reduce", "--reduce", "add:" + ",".join(["fp32"] * (MAX_BENCH_CASES + 1))], "--reduce"),
    ],
    ids=lambda value: value if isinstance(value, str) else " ".join(value[:2]),
)
def test_bench_refuses_a_list_past_its_limit_before_planning(argv, named):
    line = refused("bench", *argv)
    assert named in line and f"at most {MAX_BENCH_SIZES if named == '--sizes' else MAX_BENCH_CASES}" in line


def test_bench_at_every_list_limit_is_planned_in_seconds():
    """The product of the lists, the most of each: planned (and refused for want of a GPU) quickly."""
    sizes = ",".join(["1"] * MAX_BENCH_SIZES)
    copies = [arg for _ in range(MAX_BENCH_CASES) for arg in ("--copy", "stages=4")]
    cases = [arg for _ in range(MAX_BENCH_CASES) for arg in ("--reduce", "add:fp32")]
    code, _, err, seconds = run("bench", "--kernel", "reduce", "--sizes", sizes, *copies, *cases)
    assert code == 2 and "needs a Hopper GPU" in err and seconds < SECONDS, (err, seconds)
    pipelines = [arg for _ in range(MAX_BENCH_CASES) for arg in ("--pipeline", "stages=4")]
    code, _, err, seconds = run("bench", "--sizes", sizes, *pipelines, "--prefetch", "2")
    assert code == 2 and "needs a Hopper GPU" in err and seconds < SECONDS, (err, seconds)


# -- --many: a number past Python's digit limit is the CLI's own refusal ----------------------------
@pytest.mark.parametrize("many", ["9" * 5000, "16x" + "9" * 5000])
def test_many_with_a_number_of_thousands_of_digits_names_the_limit(many):
    line = refused("plan", "--kernel", "many", "--many", many)
    assert "at most 1000000 tensors of at most 1099511627776 bytes" in line and "digits" not in line


# -- explain --kernel many tables every chunk of the group: at most MAX_TABLE_CHUNKS ---------------
def test_explaining_a_group_of_too_many_chunks_is_refused_naming_the_limit():
    line = refused("explain", "--kernel", "many", "--many", f"{2**40}x3")  # 3 TiB: ~10^8 chunks
    assert f"at most {MAX_TABLE_CHUNKS} chunks" in line and "tmakit plan --kernel many" in line
    code, out, err, _ = run("plan", "--kernel", "many", "--many", f"{2**40}x3")  # counted, not tabled
    assert code == 0 and err == "" and "chunk(s)" in out


def test_a_group_at_the_chunk_limit_is_explained_in_seconds():
    stage_bytes = ManyPlan().stage_bytes
    size = MAX_TABLE_CHUNKS * stage_bytes  # one tensor of that many full stages
    assert ManyPlan().counts([size])[1] == MAX_TABLE_CHUNKS
    code, out, err, seconds = run("explain", "--kernel", "many", "--many", str(size))
    assert code == 0 and err == "" and seconds < SECONDS


def test_running_out_of_memory_exits_2_with_one_line(monkeypatch, capsys):
    """A GPU that runs out of memory mid-command (torch's OutOfMemoryError, a RuntimeError) or a
    host MemoryError: exit 2 and one line, never a traceback."""
    from tmakit import cli
    from tmakit.cli import plan as plan_command

    class OutOfMemoryError(RuntimeError):
        pass

    for error in (OutOfMemoryError("CUDA out of memory. Tried to allocate 1024.00 GiB\nmore"), MemoryError()):

        def run(args, error=error):
            raise error

        monkeypatch.setattr(plan_command, "run", run)
        assert cli.main(["plan"]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tmakit: out of memory")


def test_demo_refuses_a_shape_past_its_kernel_before_printing(capsys):
    """The demo's kernel is compiled for its exact shape (at most 2^32 elements): past that it exits
    2 with one line and prints no plan first."""
    from tmakit import cli

    assert cli.main(["demo", "--shape", "70000x70000"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "2^32" in captured.err
