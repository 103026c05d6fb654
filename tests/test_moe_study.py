"""The MoE study on the CPU: its cases and bytes, its registration and command line, the peers'
loading (TransformerEngine's kernels from `.peers`, skipped with a note where absent), the fetch
script's unpacking, its torch expressions against tmakit's own, its checks, and a whole case run
through its plumbing on CPU tensors (the timers faked, TransformerEngine's kernels stood in for by
torch code of their definitions, the kernels' torch expressions in place of the kernels)."""

from __future__ import annotations

import importlib.util
import json
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from entry_point import one_error_line, tmakit
from stand_ins import calling_timer
from tmakit import registry
from tmakit.bench.timing import EAGER
from tmakit.families import families, family_named
from tmakit.moe import bench, peers

ROOT = Path(__file__).resolve().parents[1]


def load_fetch_script():
    spec = importlib.util.spec_from_file_location(
        "fetch_peers_under_test", ROOT / "scripts" / "fetch_peers.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the cases ------------------------------------------------------------------------------------
def test_each_layer_is_a_dispatch_a_combine_and_both_forward_and_backward_of_bf16_rows():
    every = bench.cases()
    names = [case.name for case in every]
    assert len(set(names)) == len(names) == 16
    ops = ["dispatch"] * 4 + ["combine"] * 4 + ["layer"] * 4 + ["fp8-dispatch"] * 4
    assert [case.op for case in every] == ops
    shapes = {(c.tokens, c.topk, c.experts, c.hidden) for c in every}
    assert shapes == {(4096, 8, 256, 7168), (16384, 8, 256, 7168), (8192, 2, 8, 4096), (16384, 6, 64, 2048)}
    assert all(case.dtype == "bfloat16" for case in every)
    assert names[0] == "dispatch deepseek-v3: 4096 tokens, top-8 of 256 experts, hidden 7168 bf16"


def test_an_fp8_dispatch_reads_bf16_rows_once_and_writes_e4m3_rows_and_fp32_scales():
    case = bench.MoeCase("fp8-dispatch", "deepseek-v3", 4096, 8, 256, 7168)
    assert case.bytes_moved == 4096 * 7168 * 2 + 4096 * 8 * (7168 + 56 * 4)
    assert case.name.startswith("fp8-dispatch deepseek-v3")


@pytest.mark.parametrize("op", ["dispatch", "combine"])
def test_the_bytes_are_the_input_read_once_and_the_output_written_once(op):
    case = bench.MoeCase(op, "deepseek-v3", 4096, 8, 256, 7168)
    # dispatch: T rows in, T*k out; combine: T*k rows in, T out: (T + T*k) * H * 2 either way
    assert case.bytes_moved == (4096 + 4096 * 8) * 7168 * 2
    assert case.rows == 4096 * 8 and case.row_bytes == 7168 * 2
    mixtral = bench.MoeCase(op, "mixtral", 8192, 2, 8, 4096)
    assert mixtral.bytes_moved == (8192 * 2 + 8192) * 4096 * 2


def test_only_picks_cases_by_the_start_of_their_names():
    chosen = family_named("moe").plans(SimpleNamespace(only="combine mixtral,dispatch deepseek-v3"))
    assert [(c.op, c.label, c.tokens) for c in chosen] == [
        ("dispatch", "deepseek-v3", 4096),
        ("dispatch", "deepseek-v3", 16384),
        ("combine", "mixtral", 8192),
    ]
    assert len(family_named("moe").plans(SimpleNamespace(only="dispatch"))) == 4


# -- registered, and on the command line ----------------------------------------------------------
def test_the_family_has_a_bench_part_with_the_moe_study():
    assert "bench" in registry.records()["tmakit.moe"].parts
    assert bench in registry.parts("bench")
    family = families()["moe"]
    assert family.reads == frozenset({"only"}) and family.study is not None
    assert bench.TORCH_GATHER in family.compared_with(SimpleNamespace())


def test_bench_help_lists_the_moe_study():
    run = tmakit("bench", "--kernel", "moe", "--help")
    assert run.returncode == 0 and run.stderr == ""
    assert "moe: mixture-of-experts dispatch and combine" in " ".join(run.stdout.split())


def test_a_prefix_that_chooses_no_case_is_refused_before_looking_for_a_gpu():
    run = tmakit("bench", "--kernel", "moe", "--only", "unpermute")
    assert run.returncode == 2 and run.stdout == ""
    assert "--only chooses none of the study's parts" in one_error_line(run)


def test_device_run_has_the_moe_step_writing_the_studys_file():
    script = (ROOT / "scripts" / "device_run.sh").read_text()
    step = next(line for line in script.splitlines() if line.strip().startswith("moebench)"))
    assert "--kernel moe" in step and '"$OUT/moe.json"' in step
    assert "#   moebench " in script  # the header lists it


# -- the peers ------------------------------------------------------------------------------------
def test_without_peers_the_transformer_engine_rows_are_skipped_saying_how_to_fetch(tmp_path):
    path = list(sys.path)
    peer = peers.load_transformer_engine([tmp_path / ".peers"])
    assert peer.module is None and peer.version is None
    assert peer.note.startswith("skipped: ") and "scripts/fetch_peers.py" in peer.note
    assert peers.TE_VERSION in peer.note and sys.path == path


def test_peers_named_by_the_environment_are_the_only_ones_looked_at(monkeypatch, tmp_path):
    monkeypatch.setenv(peers.PEERS_VARIABLE, str(tmp_path))
    assert peers.peer_folders() == [tmp_path]
    monkeypatch.delenv(peers.PEERS_VARIABLE)
    assert all(folder.name == peers.PEERS for folder in peers.peer_folders())


def peers_tree(root: Path, kernels: str) -> Path:
    """A `.peers` as the fetch script lays it out, its torch wrappers' module holding `kernels`."""
    for package in load_fetch_script().PACKAGES:
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text("")
    (root / "transformer_engine" / "pytorch" / "triton" / "permutation.py").write_text(kernels)
    (root / "transformer_engine" / "VERSION").write_text("2.20.2\n")
    return root


@pytest.fixture
def forget_transformer_engine():
    """Each test imports its own stand-in package: none stays for the next."""
    yield
    for name in [n for n in sys.modules if n == "transformer_engine" or n.startswith("transformer_engine.")]:
        del sys.modules[name]


def test_a_peer_that_does_not_import_is_skipped_with_its_error(tmp_path, forget_transformer_engine):
    path = list(sys.path)
    root = peers_tree(tmp_path / ".peers", "import triton_that_is_not_installed\n")
    peer = peers.load_transformer_engine([root])
    assert peer.module is None and peer.version == "2.20.2"
    assert "skipped: importing" in peer.note and "triton_that_is_not_installed" in peer.note
    assert sys.path == path  # .peers was on the path for the import alone


def test_the_peer_is_imported_from_peers_for_the_import_alone(tmp_path, forget_transformer_engine):
    path = list(sys.path)
    root = peers_tree(tmp_path / ".peers", "def make_row_id_map(*args):\n    return 'stand-in'\n")
    peer = peers.load_transformer_engine([tmp_path / "absent", root])
    assert peer.module is not None and peer.module.make_row_id_map() == "stand-in"
    assert peer.version == "2.20.2" and str(root) in peer.note
    assert sys.path == path


def fake_wheel(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


def test_the_fetch_unpacks_the_kernels_their_license_and_empty_packages(tmp_path):
    fetch = load_fetch_script()
    files = {name: f"# {name}\n" for name in fetch.KERNELS}
    files["transformer_engine-2.20.2.dist-info/LICENSE"] = "Apache License\n"
    files["transformer_engine/__init__.py"] = "import transformer_engine_torch  # the whole of it\n"
    files["transformer_engine/pytorch/module/linear.py"] = "# not wanted\n"
    wheel = fake_wheel(tmp_path / "transformer_engine-2.20.2-py3-none-any.whl", files)
    dest = tmp_path / ".peers"
    (dest / "transformer_engine" / "stale.py").parent.mkdir(parents=True)
    (dest / "transformer_engine" / "stale.py").write_text("# from an earlier fetch\n")
    assert fetch.main(["--peer", "transformer_engine", "--wheel", str(wheel), "--dest", str(dest)]) == 0
    found = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert found == sorted(
        [*fetch.KERNELS, *(f"{p}/__init__.py" for p in fetch.PACKAGES)]
        + ["transformer_engine/LICENSE", "transformer_engine/VERSION"]
    )
    assert (dest / "transformer_engine" / "VERSION").read_text() == "2.20.2\n"
    assert (dest / "transformer_engine" / "__init__.py").read_text() == fetch.STAND_IN
    assert (dest / fetch.KERNELS[0]).read_text() == f"# {fetch.KERNELS[0]}\n"
    assert fetch.VERSION == peers.TE_VERSION


def test_the_fetch_refuses_a_wheel_of_another_release_or_without_the_kernels(tmp_path):
    fetch = load_fetch_script()
    other = fake_wheel(tmp_path / "transformer_engine-2.19.0-py3-none-any.whl", {})
    te_only = ["--peer", "transformer_engine", "--dest", str(tmp_path / ".peers")]
    with pytest.raises(SystemExit, match="is not release 2.20.2"):
        fetch.main([*te_only, "--wheel", str(other)])
    empty = fake_wheel(tmp_path / "transformer_engine-2.20.2-py3-none-any.whl", {"x.py": ""})
    with pytest.raises(SystemExit, match="holds no transformer_engine/pytorch/triton/permutation.py"):
        fetch.main([*te_only, "--wheel", str(empty)])


# -- the torch expressions and TransformerEngine's row order --------------------------------------
def small_routing(torch, tokens=37, topk=3, experts=5, hidden=24):
    generator = torch.Generator().manual_seed(bench.SEED)
    ids, probs = peers.make_routing(tokens, topk, experts, generator, "cpu")
    return ids, probs, torch.randn(tokens * topk, hidden, generator=generator).to(torch.bfloat16)


def test_the_routing_is_a_top_k_of_softmax_scores():
    torch = pytest.importorskip("torch")
    ids, probs, _ = small_routing(torch)
    assert ids.shape == probs.shape == (37, 3) and ids.dtype == torch.int64 and probs.dtype == torch.float32
    assert bool((probs[:, :-1] >= probs[:, 1:]).all()) and bool((probs.sum(dim=1) <= 1 + 1e-6).all())
    assert all(len(set(row)) == 3 for row in ids.tolist())  # a token's experts are distinct


def test_torchs_gather_is_tmakits_dispatch_and_its_index_add_its_combine():
    torch = pytest.importorskip("torch")
    from tmakit.moe import call

    ids, probs, y = small_routing(torch)
    x = y[:37]
    row_map = call.route_ids(ids, 5, 1).row_map
    assert torch.equal(
        peers.torch_dispatch(x, peers.source_index(ids)), call._permute_by_torch(x, row_map, 111)
    )
    assert torch.equal(peers.torch_sorted_dispatch(x, ids), peers.torch_dispatch(x, peers.source_index(ids)))
    ours = call._combine_by_torch(y, row_map, probs)
    theirs = peers.torch_combine(y, *peers.combine_indices(row_map, probs), 37)
    total, bound = bench.combine_reference(y, row_map, probs)
    assert bench.combine_verdict(theirs, total, bound).startswith("ok")
    assert bench.combine_verdict(ours, total, bound).startswith("ok")


def test_the_torch_expressions_compile_whole_without_a_graph_break():
    """torch.compile traces each expression the study compiles as one graph (aot_eager: the
    trace and its functionalization, no compiler needed), with its result unchanged."""
    torch = pytest.importorskip("torch")
    from tmakit.moe import call

    ids, probs, y = small_routing(torch)
    x = y[:37]
    indices = peers.combine_indices(call.route_ids(ids, 5, 1).row_map, probs)
    torch._dynamo.reset()
    compiled = lambda function: torch.compile(function, dynamic=False, backend="aot_eager", fullgraph=True)  # noqa: E731
    expected = peers.torch_dispatch(x, peers.source_index(ids))
    assert torch.equal(compiled(peers.torch_dispatch)(x, peers.source_index(ids)), expected)
    assert torch.equal(compiled(peers.torch_sorted_dispatch)(x, ids), expected)
    total = compiled(peers.torch_combine)(y, *indices, 37)
    assert torch.equal(total, peers.torch_combine(y, *indices, 37))
    torch._dynamo.reset()


def te_row_id_map(torch, mask, token_major=False):
    """TransformerEngine's row map of a (T, E) mask, from its definition (make_row_id_map's
    docstring): each token's destination rows, highest first, then their experts, then their
    count. Its rows are expert-major; `token_major` numbers them token by token instead, to stand
    for a peer whose order is not tmakit's."""
    tokens, experts = mask.shape
    if token_major:
        rows = torch.where(mask, mask.flatten().cumsum(0).view(tokens, experts) - 1, -1)
    else:
        rows = torch.where(mask, mask.t().flatten().cumsum(0).view(experts, tokens).t() - 1, -1)
    ordered, experts_of = torch.sort(rows, dim=1, descending=True, stable=True)
    return torch.cat([ordered, experts_of, mask.sum(dim=1, keepdim=True)], dim=1).int()


def test_transformer_engines_documented_row_map_is_tmakits_order():
    torch = pytest.importorskip("torch")
    from tmakit.moe import call

    mask = torch.tensor([[1, 1, 0], [1, 0, 1], [0, 0, 1], [1, 1, 0], [0, 0, 0]], dtype=torch.bool)
    te_map = te_row_id_map(torch, mask)
    documented = [[3, 0], [5, 1], [6], [4, 2], []]  # make_row_id_map's docstring, after its pass 3
    assert [te_map[t, : len(rows)].tolist() for t, rows in enumerate(documented)] == documented
    assert te_map[:, 6].tolist() == [2, 2, 1, 2, 0]
    ids = torch.tensor([[0, 1], [0, 2], [2, -1], [0, 1], [-1, -1]])
    row_map = call.route_ids(ids, 3, 1).row_map
    order = peers.te_row_order(te_map, ids, row_map, 3)
    assert order[:7].tolist() == list(range(7))


def test_a_peer_in_another_row_order_is_compared_after_mapping_its_rows():
    torch = pytest.importorskip("torch")
    from tmakit.moe import call

    ids, _, y = small_routing(torch)
    x = y[:37]
    row_map = call.route_ids(ids, 5, 1).row_map
    expected = peers.torch_dispatch(x, peers.source_index(ids))
    for token_major, says in [(False, "in tmakit's order"), (True, "after mapping")]:
        te_map = te_row_id_map(torch, peers.routing_mask(ids, 5), token_major)
        order = peers.te_row_order(te_map, ids, row_map, 5)
        theirs = te_permute(torch, x, te_map, 111)
        verdict = bench.dispatch_verdict(theirs, expected, order)
        assert verdict.startswith("ok") and says in verdict, verdict
        theirs[7] += 1
        assert bench.dispatch_verdict(theirs, expected, order) == "MISMATCH first at row 7"


def test_a_wrong_row_or_sum_is_named():
    torch = pytest.importorskip("torch")
    from tmakit.moe import call

    ids, probs, y = small_routing(torch)
    row_map = call.route_ids(ids, 5, 1).row_map
    expected = peers.torch_dispatch(y[:37], peers.source_index(ids))
    assert bench.dispatch_verdict(expected.clone(), expected) == "ok: bit-exact against torch"
    assert bench.dispatch_verdict(expected[:-1], expected) == "MISMATCH first at row 0"
    total, bound = bench.combine_reference(y, row_map, probs)
    out = call._combine_by_torch(y, row_map, probs)
    out[11, 3] += 0.5
    assert bench.combine_verdict(out, total, bound).startswith("MISMATCH first at token 11")


def test_a_dispatch_whose_row_map_is_wrong_is_a_mismatch(monkeypatch):
    torch = pytest.importorskip("torch")
    ids, _, y = small_routing(torch)
    first = {"x": y[:37], "ids": ids}
    right = bench.call.route_ids(ids, 5, 1).row_map
    monkeypatch.setattr(bench.api, "moe_dispatch", lambda *args, **kwargs: SimpleNamespace(row_map=right))
    assert bench.row_map_verdict(first, 5, "ok: rows").startswith("ok: rows; its row map the inverse")
    wrong = right.flip(0)
    monkeypatch.setattr(bench.api, "moe_dispatch", lambda *args, **kwargs: SimpleNamespace(row_map=wrong))
    assert bench.row_map_verdict(first, 5, "ok: rows").startswith("MISMATCH: ")


# -- a whole case through the study's plumbing, on the CPU ----------------------------------------
def te_permute(torch, inp, row_id_map, rows):
    """TransformerEngine's permute, from its definition: token t's row to each destination row."""
    experts = (row_id_map.shape[1] - 1) // 2
    out = torch.empty((rows, inp.shape[1]), dtype=inp.dtype)
    for token in range(inp.shape[0]):
        for slot in range(int(row_id_map[token, 2 * experts])):
            out[int(row_id_map[token, slot])] = inp[token]
    return out


def te_slots(row_id_map, experts):
    """Each (token, row, expert) a TransformerEngine row map routes."""
    for token in range(row_id_map.shape[0]):
        for slot in range(int(row_id_map[token, 2 * experts])):
            yield token, int(row_id_map[token, slot]), int(row_id_map[token, experts + slot])


def stand_in_transformer_engine(torch, token_major):
    """TransformerEngine's four wrappers, as the study calls them, in torch code of their
    definitions (its unpermute sums in fp32, without merging probs with weight 1; its rows highest
    first; its unpermute's backward with merging probs zeroes the probs' gradient off the routed
    experts)."""

    def unpermute(inp, row_id_map, merging, permuted_probs, pad_offsets, tokens, experts, hidden):
        total = torch.zeros((tokens, hidden), dtype=torch.float32)
        for token, row, expert in te_slots(row_id_map, experts):
            total[token] += inp[row].float() * (1.0 if merging is None else merging[token, expert])
        return total.to(inp.dtype), None

    def unpermute_backward(grad, row_id_map, fwd_input, merging, pad, tokens, experts, rows, hidden):
        act_grad = torch.empty((rows, hidden), dtype=grad.dtype)
        probs_grad = torch.zeros((tokens, experts), dtype=merging.dtype)
        for token, row, expert in te_slots(row_id_map, experts):
            act_grad[row] = (grad[token].float() * merging[token, expert]).to(grad.dtype)
            probs_grad[token, expert] = (fwd_input[row].float() * grad[token].float()).sum()
        return act_grad, probs_grad

    return SimpleNamespace(
        make_row_id_map=lambda mask, tokens, experts: te_row_id_map(torch, mask, token_major),
        permute_with_mask_map=lambda inp, row_id_map, probs, scale, pad, t, e, rows, h, s: (
            te_permute(torch, inp, row_id_map, rows),  # TE's order: the rows, the scales, the probs
            None if scale is None else te_permute(torch, scale, row_id_map, rows),
            None if probs is None else te_permute(torch, probs, row_id_map, rows),
        ),
        unpermute_with_mask_map=unpermute,
        unpermute_with_mask_map_bwd_with_merging_probs=unpermute_backward,
    )


@pytest.fixture
def on_the_cpu(monkeypatch):
    """The study's code on CPU tensors: the kernels' torch expressions serve its strict calls,
    torch.compile is the expression itself, each timer calls every launch once and reports 1 us."""
    torch = pytest.importorskip("torch")
    from tmakit.moe import call

    monkeypatch.setattr(bench, "DEVICE", "cpu")
    monkeypatch.setattr(call, "refuse_strict", lambda *args: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch, "compile", lambda function, **options: function)
    monkeypatch.setattr(bench, "interleaved_graph_samples_us", calling_timer)
    monkeypatch.setattr(bench, "eager_samples_us", calling_timer)
    monkeypatch.setattr(bench, "replayed", lambda launch: (None, launch()))  # no graph: the call
    return torch


def run_case(monkeypatch, case, te):
    note = "stand-in" if te is not None else "skipped: no transformer_engine here"
    monkeypatch.setattr(peers, "transformer_engine", lambda: peers.Peer(te, "2.20.2", note))
    rows = bench.bench_moe(case, l2_bytes=1024, samples=3)
    document = family_named("moe").study([(case, rows)], {"device": "cpu"})
    return rows, json.loads(json.dumps(document))  # what --json writes


@pytest.mark.parametrize("token_major", [False, True])
def test_a_dispatch_case_times_every_row_each_verified(on_the_cpu, monkeypatch, token_major):
    case = bench.MoeCase("dispatch", "tiny", 24, 2, 4, 32)
    rows, document = run_case(monkeypatch, case, stand_in_transformer_engine(on_the_cpu, token_major))
    assert document["study"] == "moe" and document["context"]["transformer_engine"]["version"] == "2.20.2"
    (row,) = document["rows"]
    names = [entry["name"] for entry in row["timed"]]
    assert names == [
        bench.TMAKIT_PERMUTE,
        bench.TMAKIT_DISPATCH,
        bench.TORCH_GATHER,
        bench.TORCH_SORTED_GATHER,
        "inductor index_select",
        "inductor argsort + index_select",
        bench.TE_PERMUTE,
        bench.TE_DISPATCH,
    ]
    assert all(entry["verified"].startswith("ok") for entry in row["timed"]), row["timed"]
    te = next(entry for entry in row["timed"] if entry["name"] == bench.TE_PERMUTE)
    assert ("after mapping" in te["verified"]) is token_major
    assert "inverse of torch's stable argsort" in row["timed"][1]["verified"]
    scopes = {entry["name"]: (entry["scope"], entry.get("compared_with")) for entry in row["timed"]}
    assert scopes[bench.TORCH_GATHER] == (bench.GIVEN, bench.TMAKIT_PERMUTE)
    assert scopes[bench.TE_DISPATCH] == (bench.BUILT, bench.TMAKIT_DISPATCH)
    assert scopes[bench.TMAKIT_DISPATCH] == (bench.BUILT, None)
    assert te["tmakit_speedup_graph"] == 1.0 and te["tmakit_speedup_eager"] == 1.0
    moved = (24 + 48) * 32 * 2
    assert row["bytes_moved"] == moved and row["copy_tb_per_s"] == pytest.approx(moved / 2.0 / 1e6)
    assert te["of_copy_rate"] == 1.0 and row["not_timed"] == {} and row["rotated_buffers"] == 2
    assert {r.kernel for r in rows} >= {bench.COPY, f"{bench.TMAKIT_PERMUTE} {EAGER}"}
    assert f"{bench.COPY} {EAGER}" not in {r.kernel for r in rows}  # the copy: its rate, in graphs


@pytest.mark.parametrize("token_major", [False, True])
def test_a_combine_case_times_every_row_each_within_rounding(on_the_cpu, monkeypatch, token_major):
    case = bench.MoeCase("combine", "tiny", 24, 3, 5, 32)
    _, document = run_case(monkeypatch, case, stand_in_transformer_engine(on_the_cpu, token_major))
    (row,) = document["rows"]
    assert [e["name"] for e in row["timed"]] == [
        bench.TMAKIT_COMBINE,
        bench.TORCH_COMBINE,
        "inductor index_add_",
        bench.TE_COMBINE,
    ]
    assert all(e["verified"].startswith("ok: within fp32") for e in row["timed"]), row["timed"]
    assert row["bytes_moved"] == (24 * 3 + 24) * 32 * 2


@pytest.mark.parametrize("token_major", [False, True])
def test_an_fp8_dispatch_case_times_the_fused_kernel_against_quantize_then_permute(
    on_the_cpu, monkeypatch, token_major
):
    case = bench.MoeCase("fp8-dispatch", "tiny", 24, 2, 4, 256)
    _, document = run_case(monkeypatch, case, stand_in_transformer_engine(on_the_cpu, token_major))
    (row,) = document["rows"]
    assert [e["name"] for e in row["timed"]] == [
        bench.TMAKIT_FP8,
        bench.QUANTIZE_THEN_PERMUTE,
        bench.TE_QUANTIZE_THEN_PERMUTE,
    ]
    assert all("reference quantizer" in e["verified"] for e in row["timed"]), row["timed"]
    assert all(e.get("compared_with") in (None, bench.TMAKIT_FP8) for e in row["timed"])
    assert row["path"].startswith("torch")  # CPU tensors: the kernel's torch expressions


def test_a_wrong_fp8_byte_or_scale_is_named():
    torch = pytest.importorskip("torch")
    from tmakit.moe import call

    x = torch.randn(6, 256).bfloat16()
    ids = torch.tensor([[0, 1], [1, 2], [0, 2], [2, 1], [1, 0], [0, 1]])
    source = torch.argsort(ids.reshape(-1), stable=True) // 2
    row_map = call.route_ids(ids, 3, 1).row_map
    reference = bench.quantized_reference(x, source)
    out, scales = call.permute_fp8(x, row_map, 12, None, "fp32", False)
    assert bench.quantized_verdict((out, scales), reference).startswith("ok")
    spoiled = out.view(torch.uint8).clone()
    spoiled[7, 200] ^= 1
    assert bench.quantized_verdict((spoiled, scales), reference) == "MISMATCH first at row 7"
    wrong = scales.clone()
    wrong[1, 3] *= 2
    assert bench.quantized_verdict((out, wrong), reference) == "MISMATCH: scales first wrong at row 3"


def test_without_transformer_engine_its_rows_are_noted_not_timed(on_the_cpu, monkeypatch):
    case = bench.MoeCase("dispatch", "tiny", 16, 2, 4, 32)
    _, document = run_case(monkeypatch, case, None)
    (row,) = document["rows"]
    assert not any(e["name"].startswith("TE ") for e in row["timed"])
    assert row["not_timed"] == {
        bench.TE_PERMUTE: "skipped: no transformer_engine here",
        bench.TE_DISPATCH: "skipped: no transformer_engine here",
    }


def test_a_peer_that_fails_is_noted_with_its_error_and_not_timed(on_the_cpu, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("inductor could not compile this")

    failing = {peers.torch_sorted_dispatch}
    monkeypatch.setattr(
        on_the_cpu, "compile", lambda function, **options: broken if function in failing else function
    )
    case = bench.MoeCase("dispatch", "tiny", 16, 2, 4, 32)
    rows, document = run_case(monkeypatch, case, None)
    (row,) = document["rows"]
    assert "inductor could not compile this" in row["not_timed"]["inductor argsort + index_select"]
    timed = {r.kernel for r in rows}
    assert "inductor argsort + index_select" not in timed and "inductor index_select" in timed


# -- the layer: dispatch, identity expert and combine, forward and backward -----------------------
def layer_case(tokens=24, topk=3, experts=5, hidden=32):
    return bench.MoeCase("layer", "tiny", tokens, topk, experts, hidden)


def test_the_layer_cases_count_the_four_passes_bytes_and_only_picks_them():
    case = bench.MoeCase("layer", "deepseek-v3", 4096, 8, 256, 7168)
    assert case.name == "layer deepseek-v3: 4096 tokens, top-8 of 256 experts, hidden 7168 bf16"
    # forward: dispatch T -> T*k, combine T*k -> T; backward: the combine's gradient (T read, y's
    # T*k read, y's gradient T*k written), the dispatch's (T*k read, T written)
    assert case.bytes_moved == (4 * 4096 + 5 * 4096 * 8) * 7168 * 2
    chosen = family_named("moe").plans(SimpleNamespace(only="layer"))
    assert [c.op for c in chosen] == ["layer"] * 4
    assert {(c.tokens, c.hidden) for c in chosen} == {(s[1], s[4]) for s in bench.SHAPES}
    assert bench.TORCH_LAYER in family_named("moe").compared_with(SimpleNamespace())


def small_layer(torch, case):
    generator = torch.Generator().manual_seed(bench.SEED)
    return bench.layer_operands(case, generator, "cpu")


def torch_gradients(s):
    """torch's layer on a set of operands: (out, x's gradient, probs' gradient)."""
    out = peers.torch_layer(s["x"], s["ids"], s["probs"])
    return peers.with_gradients(out, (s["x"], s["probs"]), s["grad"])


def test_torchs_layer_and_its_autograd_are_the_float64_reference():
    torch = pytest.importorskip("torch")
    s = small_layer(torch, layer_case())
    assert s["x"].requires_grad and s["probs"].requires_grad and s["merging"].requires_grad
    assert not s["grad"].requires_grad and s["x"].dtype == torch.bfloat16
    got = torch_gradients(s)
    reference = bench.layer_reference(s["x"], s["probs"], s["grad"])
    verdict = bench.layer_verdict(got, reference)
    assert verdict.startswith("ok: ") and "4 bf16 roundings" in verdict, verdict
    (total, grad_x, grad_probs), _ = reference
    # the identity expert: out = x * sum_j p, x's gradient grad * sum_j p, p's grad . x
    p, x, g = s["probs"].detach().double(), s["x"].detach().double(), s["grad"].double()
    assert torch.allclose(total, x * p.sum(1, keepdim=True))
    assert torch.allclose(grad_x, g * p.sum(1, keepdim=True))
    assert torch.allclose(grad_probs, (g * x).sum(1, keepdim=True).expand(-1, 3))


def test_a_wrong_or_unwritten_layer_output_or_gradient_is_named():
    torch = pytest.importorskip("torch")
    s = small_layer(torch, layer_case())
    reference = bench.layer_reference(s["x"], s["probs"], s["grad"])
    right = [t.detach().clone() for t in torch_gradients(s)]
    for index, token, expected in [
        (0, 5, "output: MISMATCH first at token 5"),
        (1, 7, "MISMATCH: x's gradient first at token 7"),
        (2, 9, "MISMATCH: probs' gradient first at token 9"),
    ]:
        wrong = [t.clone() for t in right]
        wrong[index][token, 1] += 0.25
        assert bench.layer_verdict(wrong, reference).startswith(expected)
        wrong[index][token, 1] = float("nan")  # poisoned and never written
        assert bench.layer_verdict(wrong, reference).startswith(expected)
    short = [right[0], right[1], right[2][:, :2]]
    assert bench.layer_verdict(short, reference).startswith("MISMATCH: probs' gradient is (24, 2)")


def test_transformer_engines_probs_gradient_is_read_at_each_slots_expert():
    torch = pytest.importorskip("torch")
    s = small_layer(torch, layer_case())
    reference = bench.layer_reference(s["x"], s["probs"], s["grad"])
    out, grad_x, grad_probs = torch_gradients(s)
    spread = torch.zeros(24, 5).scatter_(1, s["ids"], grad_probs)
    assert bench.layer_verdict((out, grad_x, spread), reference, s["ids"]).startswith("ok")
    off = spread.clone()
    off[0, int(torch.ones(5).scatter_(0, s["ids"][0], 0).nonzero()[0, 0])] = 1.0
    assert "not zero off the routed experts" in bench.layer_verdict((out, grad_x, off), reference, s["ids"])


@pytest.mark.parametrize("token_major", [False, True])
def test_a_layer_case_times_forward_and_backward_each_verified_twice(on_the_cpu, monkeypatch, token_major):
    case = layer_case()
    rows, document = run_case(monkeypatch, case, stand_in_transformer_engine(on_the_cpu, token_major))
    (row,) = document["rows"]
    assert row["op"] == "layer" and row["case"].startswith("layer tiny: ")
    names = [entry["name"] for entry in row["timed"]]
    assert names == [
        bench.TMAKIT_LAYER,
        bench.TORCH_LAYER,
        "inductor index_select + index_add_ fwd+bwd",
        bench.TE_LAYER,
    ]
    for entry in row["timed"]:
        assert entry["verified"].startswith("ok: "), entry
        assert "replayed from a CUDA graph" in entry["verified"]
        assert entry["scope"] == bench.BUILT and entry["of_copy_rate"] is None
    assert all(e["compared_with"] == bench.TMAKIT_LAYER for e in row["timed"][1:])
    assert row["timed"][3]["tmakit_speedup_graph"] == 1.0 and row["timed"][3]["tmakit_speedup_eager"] == 1.0
    assert row["copy_graph_us"] is None and row["copy_tb_per_s"] is None and row["not_timed"] == {}
    assert bench.COPY not in {r.kernel for r in rows}
    moved = (4 * 24 + 5 * 72) * 32 * 2
    assert row["bytes_moved"] == moved and row["timed"][0]["tb_per_s"] == pytest.approx(moved / 2.0 / 1e6)
    assert row["path"].startswith("dispatch: ") and "; combine: " in row["path"]


def test_a_layer_without_transformer_engine_notes_its_row(on_the_cpu, monkeypatch):
    _, document = run_case(monkeypatch, layer_case(), None)
    (row,) = document["rows"]
    assert bench.TE_LAYER not in [e["name"] for e in row["timed"]]
    assert row["not_timed"] == {bench.TE_LAYER: "skipped: no transformer_engine here"}


def test_a_peer_whose_backward_cannot_be_captured_is_noted_and_not_timed(on_the_cpu, monkeypatch):
    capturing = []

    def replayed(launch):
        capturing.append(True)
        try:
            return None, launch()
        finally:
            capturing.pop()

    te = stand_in_transformer_engine(on_the_cpu, False)
    backward = te.unpermute_with_mask_map_bwd_with_merging_probs

    def refusing(*args):
        if capturing:
            raise RuntimeError("operation not permitted when stream is capturing")
        return backward(*args)

    te.unpermute_with_mask_map_bwd_with_merging_probs = refusing
    monkeypatch.setattr(bench, "replayed", replayed)
    rows, document = run_case(monkeypatch, layer_case(), te)
    (row,) = document["rows"]
    note = row["not_timed"][bench.TE_LAYER]
    assert note.startswith("failed: ") and "capturing its forward and backward in a CUDA graph" in note
    assert "operation not permitted when stream is capturing" in note
    assert bench.TE_LAYER not in {r.kernel for r in rows}
    assert [e["name"] for e in row["timed"]][0] == bench.TMAKIT_LAYER


def test_tmakits_own_layer_failing_its_capture_fails_the_study(on_the_cpu, monkeypatch):
    def replayed(launch):
        raise RuntimeError("captured nothing")

    monkeypatch.setattr(bench, "replayed", replayed)
    with pytest.raises(RuntimeError, match="capturing its forward and backward in a CUDA graph"):
        run_case(monkeypatch, layer_case(), None)


def test_transformer_engines_autograd_pair_is_torchs_gradient():
    """The autograd functions around TransformerEngine's kernels (stood in for by their
    definitions) give torch's autograd's gradients of x and of the (T, E) merging probs."""
    torch = pytest.importorskip("torch")
    te = stand_in_transformer_engine(torch, True)
    s = small_layer(torch, layer_case())
    functions = peers.te_layer_functions(te)
    out = peers.te_layer(te, functions, s["x"], s["mask"], s["merging"], 72)
    got = peers.with_gradients(out, (s["x"], s["merging"]), s["grad"])
    reference = bench.layer_reference(s["x"], s["probs"], s["grad"])
    assert bench.layer_verdict(got, reference, s["ids"]).startswith("ok")


def test_torchs_layer_compiles_whole_with_its_backward():
    """torch.compile traces torch's layer as one graph and AOTAutograd its backward (aot_eager:
    no compiler needed), its output and gradients unchanged."""
    torch = pytest.importorskip("torch")
    s = small_layer(torch, layer_case())
    torch._dynamo.reset()
    compiled = torch.compile(peers.torch_layer, dynamic=False, backend="aot_eager", fullgraph=True)
    got = peers.with_gradients(compiled(s["x"], s["ids"], s["probs"]), (s["x"], s["probs"]), s["grad"])
    for theirs, ours in zip(got, torch_gradients(s), strict=True):
        assert torch.equal(theirs, ours)
    torch._dynamo.reset()
