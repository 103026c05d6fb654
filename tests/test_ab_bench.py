"""`scripts/ab_bench.py` on the CPU: its case lists name every family, its rules (device: within 1%
or the base's spread; host: no worse), `--only`, the base tree imported apart from this one, every
case's inputs and checks run on CPU tensors through a torch-backed stand-in tree (a correct one
passes every check, one that writes nothing fails every check), and the JSON and exit status of a
whole run from fake timings."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "ab_bench.py"


def load_script():
    spec = importlib.util.spec_from_file_location("ab_bench_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass reads its module's namespace
    spec.loader.exec_module(module)
    return module


ab = load_script()
DEVICE_FAMILIES = {"copy", "transpose", "reduce", "im2col", "rows", "many", "load", "multicast"}


# -- the case lists ---------------------------------------------------------------------------------
def test_the_device_cases_name_every_family_and_allocate_nothing_when_listed():
    listed = list(ab.cases(object()))  # no torch: listing a case touches none
    assert {case.family for case in listed} == DEVICE_FAMILIES == set(ab.FAMILIES)
    names = [case.name for case in listed]
    assert len(set(names)) == len(names)
    for call in ("gather_rows", "index_add_", "scatter_rows_", "copy_many_", "pack", "unpack_", "load_tiles"):
        assert any(name.startswith(call) for name in names), call
    # The cases that were there before keep their names: the committed results are read by them.
    for kept in ("copy 256 MiB fp16", "transposing copy 256 MiB fp16", "reduce add 256 MiB fp32"):
        assert kept in names


def test_the_host_rows_cover_the_public_functions():
    listed = list(ab.host_cases(object()))
    assert {case.family for case in listed} == DEVICE_FAMILIES - {"multicast"}
    names = [case.name for case in listed]
    assert len(set(names)) == len(names)
    for call in ("copy_ ", "copy ", "add_", "im2col", "load_tiles", "gather_rows", "scatter_rows_"):
        assert any(name.startswith(call) for name in names), call
    for call in ("index_add_", "copy_many_", "pack", "unpack_", "GroupedCopy"):
        assert any(name.startswith(call) for name in names), call


def test_the_many_list_is_about_64_mib_of_mixed_sizes_and_dtypes():
    shapes = ab.many_shapes()
    assert len(shapes) == 100
    assert 60 * 2**20 <= ab.list_bytes(shapes) <= 68 * 2**20
    assert {dtype for _, dtype in shapes} == set(ab.MANY_DTYPES)
    sizes = [math.prod(shape) * ab.ELEMENT_BYTES[dtype] for shape, dtype in shapes]
    assert min(sizes) < 64 and max(sizes) >= 2**22
    assert any(size % 16 for size in sizes)  # tails the grouped kernel copies by its lanes


# -- the rules ----------------------------------------------------------------------------------------
def samples(median: float, spread: float = 0.0, count: int = 21) -> list[float]:
    """`count` samples of `median`, spread evenly over `spread` of it around it (IQR = spread/2 of it)."""
    return [median * (1 + spread * (i / (count - 1) - 0.5)) for i in range(count)]


def test_a_device_case_agrees_within_one_percent_or_the_base_spread():
    assert ab.verdict(samples(100), samples(100.9))["agrees"]
    assert ab.verdict(samples(100), samples(99.1))["agrees"]
    assert not ab.verdict(samples(100), samples(102))["agrees"]
    assert not ab.verdict(samples(100), samples(97))["agrees"]  # faster is a difference too
    wide = samples(100, spread=0.1)  # IQR 5% of the median
    assert ab.verdict(wide, samples(104))["agrees"]
    assert not ab.verdict(wide, samples(106))["agrees"]
    row = ab.verdict(wide, samples(104))
    assert row["base_spread"] == pytest.approx(0.05, rel=0.15)
    assert row["final_over_base"] == pytest.approx(1.04)
    assert row["final_spread"] == 0


def test_a_host_row_agrees_when_the_final_tree_is_no_worse():
    assert ab.verdict(samples(10), samples(7), no_worse=True)["agrees"]  # faster: fine
    assert ab.verdict(samples(10), samples(10.09), no_worse=True)["agrees"]
    assert not ab.verdict(samples(10), samples(10.3), no_worse=True)["agrees"]
    assert ab.verdict(samples(10, spread=0.1), samples(10.4), no_worse=True)["agrees"]
    assert not ab.verdict(samples(10, spread=0.1), samples(10.6), no_worse=True)["agrees"]


def test_only_picks_cases_by_name_prefix_or_family():
    listed = list(ab.cases(object()))
    picked = ab.chosen(listed, ["rows", "load"])
    assert {case.family for case in picked} == {"rows", "load"}
    assert len(picked) == 4
    assert [c.name for c in ab.chosen(listed, ["copy 256 MiB fp16,"])] == [
        "copy 256 MiB fp16, rows 128 B apart"
    ]
    assert {c.family for c in ab.chosen(listed, ["transpose"])} == {"transpose"}
    assert {c.family for c in ab.chosen(listed, ["multicast 2x2"])} == {"multicast"}
    assert len(ab.chosen(listed, ["multicast 2x2"])) == 2
    assert ab.chosen(listed, ["nothing"]) == []
    assert ab.chosen(listed, None) == listed


# -- the base tree --------------------------------------------------------------------------------------
@pytest.fixture
def forget_imports():
    """Drop what a test imports under other names (modules and path entries) afterwards."""
    path, modules = list(sys.path), set(sys.modules)
    yield
    for entry in set(sys.path) - set(path):  # the copies `import_as_base` made
        if Path(entry).name.startswith("ab-bench-"):
            shutil.rmtree(entry, ignore_errors=True)
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        if not name.startswith("tmakit.") and name != "tmakit":
            del sys.modules[name]


def test_a_copied_tree_imports_as_its_own_package(tmp_path, forget_imports):
    import tmakit

    shutil.copytree(
        ROOT / "src" / "tmakit", tmp_path / "src" / "tmakit", ignore=shutil.ignore_patterns("__pycache__")
    )
    base = ab.import_as_base(tmp_path / "src")
    assert base.__name__ == "tmakit_base"
    assert Path(base.__file__).parent != Path(tmakit.__file__).parent
    for name in ab.PUBLIC:
        ours, theirs = getattr(base, name), getattr(tmakit, name)
        assert callable(ours), name
        assert ours.__module__.startswith("tmakit_base."), (name, ours.__module__)
        assert ours is not theirs, name
    # A family listed by its absolute name ("tmakit.rows" in a registry) is the copy's too.
    for name in ab.PUBLIC:
        module = sys.modules[getattr(base, name).__module__]
        assert Path(module.__file__).is_relative_to(Path(base.__file__).parent), name


def test_a_public_function_taken_from_the_other_tree_is_refused(tmp_path, forget_imports):
    shutil.copytree(
        ROOT / "src" / "tmakit", tmp_path / "src" / "tmakit", ignore=shutil.ignore_patterns("__pycache__")
    )
    init = tmp_path / "src" / "tmakit" / "__init__.py"
    init.write_text(init.read_text() + "\nfrom tmakit.copies.api import copy_ as copy_  # the other tree's\n")
    with pytest.raises(ImportError, match=r"copy_ \(tmakit\.copies\.api\)"):
        ab.import_as_base(tmp_path / "src", name="tmakit_leaky")


def test_module_names_in_strings_are_renamed_and_labels_kept(tmp_path):
    tree = tmp_path / "tmakit"
    (tree / "rows").mkdir(parents=True)
    (tree / "rows" / "__init__.py").write_text("")
    (tree / "bench.py").write_text("")
    source = "\n".join(
        [
            'PACKAGES = ("tmakit.rows",)',
            'LABEL = "tmakit.copy_"',
            "RUN = ['-m', 'tmakit.bench']",
            'NAME = "tmakit"',
        ]
    )
    (tree / "registry.py").write_text(source)
    renamed = ab.rename_own_modules(tree, "tmakit_base")
    assert renamed == ['"tmakit.rows"', "'tmakit.bench'"]
    assert (tree / "registry.py").read_text() == source.replace("tmakit.rows", "tmakit_base.rows").replace(
        "tmakit.bench", "tmakit_base.bench"
    )


def test_part_finds_an_attribute_in_the_first_module_that_has_it():
    import tmakit

    assert ab.part(tmakit, "check_copy_layout", "nowhere.at_all", "api") is tmakit.api.check_copy_layout
    with pytest.raises(AttributeError, match="defines no no_such_thing in any of api, nowhere"):
        ab.part(tmakit, "no_such_thing", "api", "nowhere")


# -- every case's inputs and checks, on the CPU -----------------------------------------------------------
try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="the cases' inputs are torch tensors")
FACTORIES = ("randn", "randint", "randperm", "full", "empty")


class CpuTorch:
    """torch whose factories drop `device="cuda"`: the cases' tensors on the CPU."""

    def __getattr__(self, name):
        attribute = getattr(torch, name)
        if name in FACTORIES:
            return lambda *args, device=None, **kwargs: attribute(*args, **kwargs)
        return attribute


def _raw(t):
    return t.reshape(-1).view(torch.uint8)


def torch_tree(broken: bool = False) -> SimpleNamespace:
    """The public functions done by torch's own ops (as a correct tree must answer), or, `broken`,
    functions that write nothing (new tensors of zeros)."""
    from tmakit.many.plan import pack_offsets

    def im2col(x, kernel, stride=1, padding=0, *, out=None, strict=False):
        n, h, w, c = x.shape  # unfold's columns are (c, r, s); im2col's are (r, s, c)
        cols = torch.nn.functional.unfold(x.permute(0, 3, 1, 2).float(), kernel, padding=padding)
        patches = cols.reshape(n, c, kernel, kernel, h * w).permute(0, 4, 2, 3, 1).reshape(n * h * w, -1)
        result = torch.zeros_like(patches) if broken else patches
        if out is None:
            return result.to(x.dtype)
        out.copy_(result)
        return out

    def pack(tensors, out=None, *, strict=False):
        offsets, total = pack_offsets([t.numel() * t.element_size() for t in tensors])
        flat = torch.zeros(total, dtype=torch.uint8) if out is None else out
        for offset, t in zip(offsets, tensors, strict=True):
            if not broken:
                flat[offset : offset + t.numel() * t.element_size()] = _raw(t)
        return flat, offsets

    def unpack_(flat, tensors, *, strict=False):
        offsets, _ = pack_offsets([t.numel() * t.element_size() for t in tensors])
        for offset, t in zip(offsets, tensors, strict=True):
            if not broken:
                _raw(t).copy_(flat[offset : offset + t.numel() * t.element_size()])

    def copy_many_(dsts, srcs, *, strict=False):
        for d, s in zip(dsts, srcs, strict=True):
            if not broken:
                d.copy_(s)

    def unless_broken(write):
        return (lambda *args, **kwargs: None) if broken else write

    return SimpleNamespace(
        copy_=lambda dst, src, *, strict=False, **options: unless_broken(dst.copy_)(src),
        copy=lambda src, *, strict=False: torch.zeros_like(src) if broken else src.clone(),
        reduce_into_=lambda dst, src, op="add", *, strict=False, reduce_by=None: unless_broken(dst.add_)(src),
        add_=lambda dst, src, *, strict=False: unless_broken(dst.add_)(src),
        im2col=im2col,
        load_tiles=lambda x, tile=(64, 256), swizzle=0: torch.zeros_like(x) if broken else x.clone(),
        gather_rows=lambda src, index, out, *, check_index=True, strict=False: unless_broken(
            lambda: torch.index_select(src, 0, index, out=out)
        )(),
        scatter_rows_=lambda dst, index, src, *, check_index=True, strict=False: unless_broken(
            dst.index_copy_
        )(0, index, src),
        index_add_=lambda dst, index, src, *, alpha=1, check_index=True, strict=False: unless_broken(
            dst.index_add_
        )(0, index, src),
        copy_many_=copy_many_,
        pack=pack,
        unpack_=unpack_,
        GroupedCopy=lambda dsts, srcs: lambda: copy_many_(dsts, srcs),
    )


@pytest.fixture
def small(monkeypatch):
    """The device cases' sizes cut to what a CPU test moves in a moment."""
    monkeypatch.setattr(ab, "COPY_SHAPE", (64, 128))
    monkeypatch.setattr(ab, "REDUCE_SHAPE", (32, 64))
    monkeypatch.setattr(ab, "IM2COL_INPUT", (2, 6, 5, 16))
    monkeypatch.setattr(ab, "LOAD_SHAPE", (64, 256))
    monkeypatch.setattr(ab, "TABLE_ROWS", 512)
    monkeypatch.setattr(ab, "PICKED_ROWS", 96)
    monkeypatch.setattr(ab, "ROW_BYTES", 256)
    monkeypatch.setattr(ab, "MANY_SHAPES", ((64, 40), (3, 5), (1, 777), (17, 33), (128,)))
    monkeypatch.setattr(ab, "MANY_COUNT", 11)


def cpu_cases():
    """Every case but the multicast ring's (the DSL's own kernels), on CPU tensors."""
    return [c for c in ab.cases(CpuTorch()) if c.family != "multicast"] + list(ab.host_cases(CpuTorch()))


@needs_torch
def test_every_case_checks_out_on_a_correct_tree_and_its_launches_run(small):
    torch.manual_seed(0)
    for case in cpu_cases():
        for _ in range(2):  # both trees: the inputs shared, the outputs each its own
            launch, check = case.make(torch_tree())
            assert check() is True, case.name
            for call in launch if isinstance(launch, list) else [launch]:
                call()


@needs_torch
def test_every_case_fails_its_check_on_a_tree_that_writes_nothing(small):
    torch.manual_seed(0)
    for case in cpu_cases():
        _, check = case.make(torch_tree(broken=True))
        assert check() is False, case.name


@needs_torch
def test_the_reference_patches_are_unfolds():
    x = torch.randn(2, 7, 5, 8)
    assert torch.equal(ab.patches_3x3(torch, x), torch_tree().im2col(x, 3, padding=1))


@needs_torch
def test_a_case_is_held_to_tma_where_the_function_takes_strict():
    tree = torch_tree()
    assert ab.tma_only(tree.gather_rows).keywords == {"strict": True}
    assert ab.tma_only(tree.reduce_into_, {"reduce_by": "store"}).keywords == {
        "strict": True,
        "reduce_by": "store",
    }
    assert ab.tma_only(tree.load_tiles).keywords == {}


# -- a whole run, timed by fakes -------------------------------------------------------------------------
def fake_run(monkeypatch, tmp_path, argv, slower=None, broken=(), timer=None):
    """`main(argv)` over CPU cases and the torch tree, timers faked (or `timer`): the final tree
    `slower[name]` times the base where named (1.0 else), the base's spread 0.2%; cases named in
    `broken` get a tree that writes nothing as their final tree. Returns (exit status, the JSON,
    the timed cases)."""
    slower = slower or {}
    timed = []

    def fake_timer(launches, *_):
        name = current[0]
        timed.append(name)
        for calls in launches.values():  # each launch runs: they are callable as given
            for call in calls if isinstance(calls, list) else [calls]:
                call()
        ratio = slower.get(name, 1.0)
        return {"base": samples(50.0, 0.004), "final": samples(50.0 * ratio, 0.004)}

    current = [None]

    def tracked(listing):
        def wrapped(_torch):
            for case in listing(CpuTorch()):
                if case.family == "multicast":
                    continue

                def make(pkg, case=case):
                    current[0] = case.name
                    if pkg is trees["final"] and case.name in broken:
                        pkg = torch_tree(broken=True)
                    return case.make(pkg)

                yield ab.Case(case.name, case.family, make)

        return wrapped

    trees = {"base": torch_tree(), "final": torch_tree()}
    monkeypatch.setattr(ab, "cases", tracked(ab.cases))
    monkeypatch.setattr(ab, "host_cases", tracked(ab.host_cases))
    monkeypatch.setattr(ab, "load_trees", lambda _: trees)
    monkeypatch.setattr(ab, "graph_samples", timer or fake_timer)
    monkeypatch.setattr(ab, "host_samples", timer or fake_timer)
    monkeypatch.setattr(ab, "device_context", lambda commit: {"device": "fake H100", "commit": commit})
    (tmp_path / "src" / "tmakit").mkdir(parents=True, exist_ok=True)
    (tmp_path / "src" / "tmakit" / "__init__.py").write_text("")
    out = tmp_path / "ab.json"
    status = ab.main(
        [str(tmp_path / "src"), "--json", str(out), "--commit", "f1", "--base-commit", "b0", *argv]
    )
    return status, json.loads(out.read_text()), timed


@needs_torch
def test_a_run_that_agrees_writes_both_sections_and_exits_0(monkeypatch, tmp_path, small):
    status, study, timed = fake_run(monkeypatch, tmp_path, [])
    assert status == 0
    assert study["study"] == "ab-bench" and study["what"]
    assert study["context"] == {"device": "fake H100", "commit": "f1", "base_commit": "b0"}
    assert {row["family"] for row in study["rows"]} == DEVICE_FAMILIES - {"multicast"}
    assert {row["family"] for row in study["host_rows"]} == DEVICE_FAMILIES - {"multicast"}
    keys = {"case", "family", "base_us", "final_us", "final_over_base", "base_spread", "final_spread"}
    for row in study["rows"] + study["host_rows"]:
        assert keys | {"agrees", "exact"} == set(row), row
        assert row["agrees"] is True and row["exact"] == {"base": True, "final": True}
        assert row["base_us"] == pytest.approx(50.0) and row["final_over_base"] == pytest.approx(1.0)
    summary = study["summary"]
    assert summary["failed"] == [] and summary["samples"] == 100 and summary["agree_within"] == ab.AGREE
    assert summary["device_agree"] == summary["device_cases"] == len(study["rows"])
    assert summary["host_no_worse"] == summary["host_rows"] == len(study["host_rows"])
    assert summary["host_calls"] == ab.HOST_CALLS and summary["host_rounds"] == ab.HOST_ROUNDS
    assert len(timed) == len(study["rows"]) + len(study["host_rows"])


@needs_torch
def test_a_slower_final_tree_fails_the_run(monkeypatch, tmp_path, small):
    slower = {"gather_rows 16K of 128K rows x 8 KiB bf16": 1.05, "pack 8 small tensors into out": 1.05}
    faster = {"copy_ 256x512 fp32": 0.9}  # host: faster is no worse
    status, study, _ = fake_run(monkeypatch, tmp_path, [], {**slower, **faster})
    assert status == 1
    assert study["summary"]["failed"] == list(slower)
    rows = {row["case"]: row for row in study["rows"] + study["host_rows"]}
    assert rows["copy_ 256x512 fp32"]["agrees"] and rows["copy_ 256x512 fp32"]["final_over_base"] < 1


@needs_torch
def test_a_device_case_faster_by_more_than_the_bound_differs(monkeypatch, tmp_path, small):
    status, study, _ = fake_run(
        monkeypatch, tmp_path, ["--device-only"], {"load_tiles 4096x8192 fp16 (64 MiB)": 0.95}
    )
    assert status == 1 and study["summary"]["failed"] == ["load_tiles 4096x8192 fp16 (64 MiB)"]
    assert study["host_rows"] == []


@needs_torch
def test_a_wrong_result_or_a_case_that_raises_fails_the_run_and_the_rest_still_runs(
    monkeypatch, tmp_path, small
):
    wrong = "scatter_rows_ 16K rows x 8 KiB bf16, a permutation"
    status, study, _ = fake_run(monkeypatch, tmp_path, ["--only", "rows"], broken={wrong})
    assert status == 1 and study["summary"]["failed"] == [wrong]
    row = next(r for r in study["rows"] if r["case"] == wrong)
    assert row["exact"] == {"base": True, "final": False}

    def raising(*_):
        raise RuntimeError("the timer broke")

    status, study, _ = fake_run(monkeypatch, tmp_path, ["--only", "load"], timer=raising)
    assert status == 1
    assert [r["case"] for r in study["rows"] + study["host_rows"]] == [
        "load_tiles 4096x8192 fp16 (64 MiB)",
        "load_tiles 64x256 fp16",
    ]
    for row in study["rows"] + study["host_rows"]:
        assert row["error"] == "RuntimeError: the timer broke" and row["agrees"] is False
        assert row["exact"] == {"base": True, "final": True}  # made and checked before the timer


@needs_torch
def test_only_and_the_section_switches_select_what_runs(monkeypatch, tmp_path, small):
    _, study, timed = fake_run(monkeypatch, tmp_path, ["--only", "many,load_tiles", "--host-only"])
    assert study["rows"] == []
    assert {row["family"] for row in study["host_rows"]} == {"many", "load"}
    assert timed == [row["case"] for row in study["host_rows"]]
    assert study["summary"]["only"] == ["many", "load_tiles"]
    _, study, _ = fake_run(monkeypatch, tmp_path, ["--only", "index_add_", "--device-only"])
    assert [row["case"] for row in study["rows"]] == ["index_add_ 16K rows x 8 KiB fp32 into 128K"]
    assert study["host_rows"] == []


@needs_torch
def test_an_only_that_matches_nothing_is_a_usage_error(monkeypatch, tmp_path, small):
    with pytest.raises(SystemExit) as stopped:
        fake_run(monkeypatch, tmp_path, ["--only", "nothing-by-this-name"])
    assert stopped.value.code == 2


def test_the_script_answers_help_and_refuses_a_folder_without_tmakit(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for option in ("--only", "--host-only", "--device-only", "--json", "--base-commit"):
        assert option in done.stdout
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "holds no tmakit package" in done.stderr


def test_device_run_knows_the_ab_step():
    script = (ROOT / "scripts" / "device_run.sh").read_text()
    assert "abbench)" in script and "scripts/ab_bench.py" in script
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / "device_run.sh")]).returncode == 0
