"""The rows study's cases and the calls it times, on the CPU; the adds beside torch's TMA
scatter_add: the peer's fetch and import (its quack cache stood in for), and a case through the
study's plumbing (the timers faked, the peer stood in for by torch code of its definition)."""

from __future__ import annotations

import importlib.util
import json
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from stand_ins import calling_timer
from tmakit.bench.timing import EAGER
from tmakit.families import family_named
from tmakit.rows import api, bench
from tmakit.rows.bench import PEER_ROW_SIZES, ROW_SIZES, RULE, calls, cases

ROOT = Path(__file__).resolve().parents[1]


def test_the_sweep_runs_strict_then_as_a_user_calls_both_from_16_bytes():
    every = cases()
    names = [case.name for case in every]
    assert len(set(names)) == len(names)
    strict = [c for c in every if c.strict and not c.label]
    rule = [c for c in every if not c.strict]
    assert {c.row_bytes for c in strict} == set(ROW_SIZES)
    assert all(c.label == RULE and c.name.startswith(f"{RULE}: ") for c in rule)
    for op in ("gather", "scatter", "add", "max"):
        assert [c.row_bytes for c in rule if c.op == op] == list(ROW_SIZES)
    assert min(ROW_SIZES) == 16


def test_only_rule_picks_the_rules_cases():
    class Options:
        only = "rule: gather"

    chosen = family_named("rows").plans(Options())
    assert [c.row_bytes for c in chosen] == list(ROW_SIZES)
    assert all(c.op == "gather" and not c.strict for c in chosen)


@pytest.mark.parametrize(
    "op, name",
    [
        ("gather", "gather_rows"),
        ("scatter", "scatter_rows_"),
        ("add", "index_add_"),
        ("max", "index_reduce_"),
    ],
)
def test_each_case_calls_tmakit_strict_or_not_as_it_says(monkeypatch, op, name):
    seen = []
    monkeypatch.setattr(api, name, lambda *args, **kwargs: seen.append(kwargs))
    for strict in (True, False):
        case = next(c for c in cases() if c.op == op and c.strict is strict)
        ours, _ = calls(case)
        ours("table", "index", "compact")
    assert [kwargs["strict"] for kwargs in seen] == [True, False]
    assert all(kwargs["check_index"] is False for kwargs in seen)


# -- beside torch's TMA scatter_add ---------------------------------------------------------------
def test_the_adds_beside_torchs_tma_scatter_add_are_bf16_and_fp32_from_128_bytes_to_2_kib():
    every = cases()
    peer = [c for c in every if c.tma_peer]
    assert every[-len(peer) :] == peer  # after every earlier case, whose names and order stand
    assert [(c.dtype, c.row_bytes) for c in peer] == [
        (dtype, size) for dtype in ("bfloat16", "float32") for size in PEER_ROW_SIZES
    ]
    assert PEER_ROW_SIZES == (128, 256, 512, 1024, 2048)
    assert all(c.op == "add" and c.strict and c.pattern == "random" for c in peer)
    assert peer[0].name == "torch tma scatter_add bf16: add 524288 x 128 B rows of 4194304, random"
    assert not any(c.tma_peer for c in every[: -len(peer)])

    class Options:
        only = "torch tma scatter_add fp32"

    chosen = family_named("rows").plans(Options())
    assert [(c.dtype, c.row_bytes) for c in chosen] == [("float32", size) for size in PEER_ROW_SIZES]
    assert bench.TMA_PEER in family_named("rows").compared_with(Options())


def test_without_the_peer_its_rows_are_skipped_saying_how_to_fetch(tmp_path):
    path = list(sys.path)
    peer = bench.load_torch_scatter_add([tmp_path / ".peers"])
    assert peer.module is None and peer.version is None
    assert peer.note.startswith("skipped: ") and "scripts/fetch_peers.py --peer torch" in peer.note
    assert sys.path == path


@pytest.fixture
def forget_the_peer():
    """Each test imports its own peer package: none stays for the next."""
    yield
    for name in [n for n in sys.modules if n.split(".")[0] == bench.TORCH_PEER_PACKAGE]:
        del sys.modules[name]


def peer_tree(root: Path, kernel: str) -> Path:
    """A `.peers` as the fetch script lays torch's kernel out, its module holding `kernel`."""
    package = root / bench.TORCH_PEER_PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tma_kernel.py").write_text(kernel)
    (package / "VERSION").write_text("2.13.0+cpu\n")
    return root


def test_the_peer_imports_with_quacks_cache_stood_in_for_the_import_alone(tmp_path, forget_the_peer):
    kernel = (
        "from torch._vendor.quack.cache import jit_cache\n"
        "compiles = []\n"
        "@jit_cache\n"
        "def _compile(dtype, n, contig):\n"
        "    compiles.append((dtype, n, contig))\n"
        "    return 'compiled'\n"
        "def tma_scatter_add_into(out, index, src):\n"
        "    return _compile(src.dtype, src.shape[1], True)\n"
    )
    root = peer_tree(tmp_path / ".peers", kernel)
    before = {name: sys.modules.get(name) for name in ("torch._vendor.quack", "torch._vendor.quack.cache")}
    peer = bench.load_torch_scatter_add([root])
    assert peer.module is not None and peer.version == "2.13.0+cpu", peer.note
    assert peer.note.startswith("torch 2.13.0+cpu's TMA scatter_add kernel") and str(root) in peer.note
    assert {name: sys.modules.get(name) for name in before} == before  # the stand-ins are gone
    src = SimpleNamespace(dtype="bf16", shape=(4, 64))
    peer.module.tma_scatter_add_into(None, None, src)
    peer.module.tma_scatter_add_into(None, None, src)
    assert peer.module.compiles == [("bf16", 64, True)]  # compiled once, as quack's cache keeps it


def test_a_peer_without_its_host_function_is_skipped(tmp_path, forget_the_peer):
    peer = bench.load_torch_scatter_add([peer_tree(tmp_path / ".peers", "x = 1\n")])
    assert (
        peer.module is None
        and peer.note == "skipped: torch_native_scatter_add.tma_kernel has no tma_scatter_add_into"
    )


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the DSL's, on names torch's kernel uses
def test_torchs_own_kernel_fetched_from_the_installed_torch_compiles(tmp_path, forget_the_peer):
    """The fetch from this interpreter's torch (where it is the release) and the study's import of
    the kernel, which then compiles for sm_90a without a GPU (the DSL's fake tensors)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("cutlass")
    fetch = load_fetch_script()
    site = fetch.interpreter_site()
    version = fetch.installed_torch_version(site) if site else None
    if version is None or fetch.public_version(version) != fetch.TORCH_VERSION:
        pytest.skip(f"this torch is {version}, not {fetch.TORCH_VERSION}: its kernel is not here")
    assert fetch.main(["--peer", "torch", "--dest", str(tmp_path / ".peers")]) == 0
    peer = bench.load_torch_scatter_add([tmp_path / ".peers"])
    assert peer.module is not None, peer.note
    compiled = peer.module._compile_tma_scatter(torch.bfloat16, 64, True)
    assert compiled is peer.module._compile_tma_scatter(torch.bfloat16, 64, True)


# -- the fetch of torch's kernel ------------------------------------------------------------------
def load_fetch_script():
    spec = importlib.util.spec_from_file_location(
        "fetch_peers_under_test", ROOT / "scripts" / "fetch_peers.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torch_kernel_files(fetch) -> dict[str, str]:
    return {name: f"# {name}\n" for name in fetch.TORCH_KERNELS}


def unpacked(dest: Path) -> dict[str, str]:
    return {p.relative_to(dest).as_posix(): p.read_text() for p in dest.rglob("*") if p.is_file()}


def test_the_fetch_unpacks_torchs_kernel_from_a_wheel_into_a_package_of_its_own(tmp_path):
    fetch = load_fetch_script()
    files = {
        **torch_kernel_files(fetch),
        "torch/__init__.py": "# the whole of torch\n",
        "torch/_native/ops/scatter_add/cutedsl_impl.py": "# its registration: not wanted\n",
        "torch-2.13.0+cpu.dist-info/licenses/third_party/LICENSE": "a third party's\n",
        "torch-2.13.0+cpu.dist-info/licenses/LICENSE": "From PyTorch\n",
    }
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    dest = tmp_path / ".peers"
    assert fetch.main(["--peer", "torch", "--torch-wheel", str(wheel), "--dest", str(dest)]) == 0
    package = bench.TORCH_PEER_PACKAGE
    assert fetch.TORCH_PACKAGE == package and fetch.TORCH_VERSION == bench.TORCH_PEER_VERSION
    assert unpacked(dest) == {
        f"{package}/tma_kernel.py": "# torch/_native/ops/scatter_add/tma_kernel.py\n",
        f"{package}/_ptx.py": "# torch/_native/ops/scatter_add/_ptx.py\n",
        f"{package}/__init__.py": fetch.TORCH_STAND_IN,
        f"{package}/LICENSE": "From PyTorch\n",
        f"{package}/VERSION": "2.13.0+cpu\n",
    }
    other = tmp_path / "torch-2.12.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("x.py", "")
    with pytest.raises(SystemExit, match="is not release 2.13.0"):
        fetch.main(["--peer", "torch", "--torch-wheel", str(other), "--dest", str(dest)])


def installed_torch(site: Path, fetch, version: str) -> Path:
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "version.py").write_text(f"__version__ = '{version}'\ndebug = False\n")
    for name, text in torch_kernel_files(fetch).items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    (site / f"torch-{version}.dist-info").mkdir()
    (site / f"torch-{version}.dist-info" / "LICENSE").write_text("From PyTorch\n")
    return site


def test_the_fetch_takes_torchs_kernel_from_an_installed_torch_of_the_release(tmp_path):
    fetch = load_fetch_script()
    site = installed_torch(tmp_path / "site", fetch, "2.13.0")
    dest = tmp_path / ".peers"
    assert fetch.main(["--peer", "torch", "--torch-site", str(site), "--dest", str(dest)]) == 0
    found = unpacked(dest)
    assert found[f"{bench.TORCH_PEER_PACKAGE}/VERSION"] == "2.13.0\n"
    assert found[f"{bench.TORCH_PEER_PACKAGE}/LICENSE"] == "From PyTorch\n"
    old = installed_torch(tmp_path / "old", fetch, "2.11.0+cu128")
    with pytest.raises(SystemExit, match="holds torch 2.11.0\\+cu128, not release 2.13.0"):
        fetch.main(["--peer", "torch", "--torch-site", str(old), "--dest", str(dest)])


# -- a case beside the peer, through the study's plumbing on the CPU ------------------------------
def stand_in_peer():
    """torch's kernel's host function, in torch code of its definition: row i of src added into
    row index[i] of out."""
    return SimpleNamespace(tma_scatter_add_into=lambda out, index, src: out.index_add_(0, index, src))


@pytest.fixture
def rows_on_the_cpu(monkeypatch):
    """The study's code on CPU tensors: torch's ops serve tmakit's strict calls, each timer calls
    every launch once and reports 1 us, a graph's capture is its call."""
    torch = pytest.importorskip("torch")
    from tmakit.rows import call

    def captured(launch):
        launch()  # the call before the capture
        return SimpleNamespace(replay=launch), None

    monkeypatch.setattr(bench, "DEVICE", "cpu")
    monkeypatch.setattr(call, "refuse_strict", lambda *args: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(bench, "interleaved_graph_samples_us", calling_timer)
    monkeypatch.setattr(bench, "eager_samples_us", calling_timer)
    monkeypatch.setattr(bench, "captured", captured)
    return torch


def run_peer_case(monkeypatch, module, note="stand-in", dtype="bfloat16"):
    monkeypatch.setattr(bench, "torch_scatter_add", lambda: bench.Peer(module, "2.13.0", note))
    case = bench.RowsCase("add", 64, 50, 40, "random", dtype, f"{bench.TMA_PEER} bf16", True, True)
    rows = bench.bench_rows(case, l2_bytes=1024, samples=3)
    document = family_named("rows").study([(case, rows)], {"device": "cpu"})
    return rows, json.loads(json.dumps(document))


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_a_case_beside_the_peer_times_it_verified_eagerly_and_replayed(rows_on_the_cpu, monkeypatch, dtype):
    rows, document = run_peer_case(monkeypatch, stand_in_peer(), dtype=dtype)
    assert document["context"]["torch_tma_scatter_add"] == {"version": "2.13.0", "note": "stand-in"}
    (row,) = document["rows"]
    assert row["verified"].startswith("ok")
    assert row["tma_scatter_add_verified"] == (
        "ok: within the summation-order bound (float64 sum); the same replayed from a CUDA graph"
    )
    assert row["tma_scatter_add"] == "stand-in" and row["device_vs_tma_scatter_add"] == 1.0
    assert row["eager_vs_tma_scatter_add"] == 1.0 and row["tma_scatter_add_graph_us"] == 2.0
    assert row["tma_scatter_add_tb_per_s"] == row["tmakit_tb_per_s"]
    kernels = {r.kernel for r in rows}
    assert {bench.TMA_PEER, f"{bench.TMA_PEER} {EAGER}", "tmakit", "torch index_add_"} <= kernels


def test_a_case_without_the_peer_notes_it_and_times_the_rest(rows_on_the_cpu, monkeypatch):
    rows, document = run_peer_case(monkeypatch, None, "skipped: no torch_native_scatter_add here")
    (row,) = document["rows"]
    assert row["tma_scatter_add"] == "skipped: no torch_native_scatter_add here"
    assert row["tma_scatter_add_graph_us"] is None and row["device_vs_tma_scatter_add"] is None
    assert row["verified"].startswith("ok") and bench.TMA_PEER not in {r.kernel for r in rows}


def test_a_peer_that_cannot_be_captured_is_noted_and_not_timed(rows_on_the_cpu, monkeypatch):
    def refusing(launch):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(bench, "captured", refusing)
    rows, document = run_peer_case(monkeypatch, stand_in_peer())
    (row,) = document["rows"]
    assert row["tma_scatter_add"].startswith("failed: RuntimeError(")
    assert "capturing it in a CUDA graph" in row["tma_scatter_add"]
    assert "operation not permitted when stream is capturing" in row["tma_scatter_add"]
    assert row["tma_scatter_add_verified"] is None and bench.TMA_PEER not in {r.kernel for r in rows}


def test_a_peer_whose_sum_is_wrong_is_a_mismatch(rows_on_the_cpu, monkeypatch):
    doubling = SimpleNamespace(tma_scatter_add_into=lambda out, index, src: out.index_add_(0, index, 2 * src))
    _, document = run_peer_case(monkeypatch, doubling)
    assert document["rows"][0]["tma_scatter_add_verified"].startswith("MISMATCH first at row ")
