"""The global switch `TMAKIT_DISABLE=1` on the CPU: every family's route gives torch's op with the
switch's reason (`plan.route.SWITCHED_OFF`), the variable read at import, and on CPU tensors
standing in for a Hopper's (`stand_ins`) every public call and torch op runs torch's path, with
launchers that fail if reached, and equals torch's expression."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from types import SimpleNamespace

import pytest

from tmakit.plan.route import (
    NOT_SM90,
    SWITCH_VARIABLE,
    SWITCHED_OFF,
    SWITCHED_OFF_REASON,
    PairFacts,
    TensorFacts,
    device_rule,
)

HOPPER = TensorFacts((4096, 4096), (4096, 1), "bfloat16", 2, 1 << 30, 0)


def test_the_switched_off_device_index_names_the_switch_and_no_other_index_does():
    assert device_rule(0, 0) is None and device_rule(-1) is None
    assert device_rule(0, SWITCHED_OFF) == SWITCHED_OFF_REASON
    assert "not a Hopper" in device_rule(NOT_SM90, SWITCHED_OFF)  # the first named
    assert SWITCH_VARIABLE in SWITCHED_OFF_REASON


def test_every_familys_route_gives_torch_for_a_switched_off_hopper():
    from tmakit.copies.plan import copy_route
    from tmakit.moe.plan import MoeFacts, moe_route
    from tmakit.patches.route import Im2colFacts, im2col_call
    from tmakit.rows.plan import RowsFacts, rows_tma_rule

    off = replace(HOPPER, device=SWITCHED_OFF)
    column_major = replace(HOPPER, strides=(1, 4096), address=2 << 30)
    assert copy_route(PairFacts(HOPPER, column_major)).by_tma  # the same pair on a Hopper: TMA's
    route = copy_route(PairFacts(off, replace(column_major, device=SWITCHED_OFF)))
    assert (route.path, route.reason) == ("torch", SWITCHED_OFF_REASON)

    def rows(device: int) -> RowsFacts:
        table = TensorFacts((1000, 256), (256, 1), "float32", 4, 1 << 20, device)
        return RowsFacts("gather", table, replace(table, shape=(64, 256), address=2 << 20), device, "int64",
                         gpu="NVIDIA H200")  # fmt: skip

    assert rows_tma_rule(rows(0)) is None
    assert rows_tma_rule(rows(SWITCHED_OFF)) == SWITCHED_OFF_REASON

    moe = moe_route(MoeFacts("dispatch", replace(off, shape=(64, 4096)), 128, SWITCHED_OFF, 2))
    assert (moe.path, moe.reason) == ("torch", SWITCHED_OFF_REASON)

    x = TensorFacts((8, 64, 56, 56), (64 * 56 * 56, 1, 64 * 56, 64), "bfloat16", 2, 1 << 30, SWITCHED_OFF)
    call = im2col_call(Im2colFacts(x, 3, padding=1))
    assert (call.route.path, call.route.reason) == ("torch", SWITCHED_OFF_REASON)


def test_the_variable_is_read_at_import_and_sends_the_ops_to_torch():
    pytest.importorskip("torch", reason="the ops need torch")
    check = "import tmakit.ops_base as o, tmakit.api.tensors as t; print(t.switched_off(), o.op_strict())"
    for value, expected in (("1", "True False"), ("0", "False True"), ("", "False True")):
        env = {**os.environ, SWITCH_VARIABLE: value}
        out = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True)
        assert out.stdout.split() == expected.split(), (value, out.stderr)


def test_a_hoppers_index_reads_as_switched_off_while_the_switch_is_on(monkeypatch):
    from tmakit.api import tensors

    monkeypatch.setattr(tensors, "is_sm90", lambda index: True)
    hopper = SimpleNamespace(is_cuda=True, get_device=lambda: 0)
    before = tensors.set_switched_off(True)
    try:
        assert tensors.cuda_index(hopper) == SWITCHED_OFF
        assert tensors.cuda_index(SimpleNamespace(is_cuda=False)) == -1
    finally:
        tensors.set_switched_off(before)
    assert tensors.cuda_index(hopper) == 0


@pytest.fixture
def switched_off_hopper(monkeypatch):
    """CPU tensors standing in for an H200's (`stand_ins.gpu_stand_ins`) with the switch on: every
    launcher tmakit could build raises if it is called."""
    torch = pytest.importorskip("torch")
    from stand_ins import gpu_stand_ins
    from tmakit.api import tensors
    from tmakit.runtime.dispatch import forget_calls
    from tmakit.runtime.launch import Launcher

    gpu_stand_ins(monkeypatch)
    from tmakit.copies import api as copies_api
    from tmakit.copies.call import check_copy_tensors, routed_copy_launcher
    from tmakit.copies.views import TORCH_COPY
    from tmakit.runtime.dispatch import Dispatch

    # the routed dispatch `copy_` runs on a GPU (the stand-ins' plans every pair for TMA)
    monkeypatch.setattr(copies_api, "_COPIES", Dispatch(routed_copy_launcher, check_copy_tensors, TORCH_COPY))

    def reached(*args, **kwargs):
        raise AssertionError("a TMA launcher was reached with the switch on")

    refusing = Launcher(reached, checks_arguments=True, shape_generic=True)
    for target in ("tmakit.copies.call.copy_launcher", "tmakit.reduce.call.reduce_launcher",
                   "tmakit.reduce.call.class_launcher", "tmakit.patches.api.im2col_launcher",
                   "tmakit.moe.call.dispatch_launcher", "tmakit.moe.call.combine_launcher"):  # fmt: skip
        monkeypatch.setattr(target, lambda *args, **kwargs: refusing)
    monkeypatch.setattr("tmakit.rows.call._launcher", lambda *args: reached)
    monkeypatch.setattr("tmakit.rows.op.check_traced", lambda op, **tensors: None)  # CPU tensors as a GPU's
    for module in ("tmakit.api.tensors", "tmakit.rows.call", "tmakit.reduce.call", "tmakit.moe.call"):
        monkeypatch.setattr(f"{module}.cuda_index", lambda tensor: SWITCHED_OFF)
    before = tensors.set_switched_off(True)
    forget_calls()
    yield torch
    tensors.set_switched_off(before)
    forget_calls()


def test_every_public_call_takes_torchs_path_while_switched_off(switched_off_hopper):
    import tmakit

    torch = switched_off_hopper
    x = torch.arange(64 * 32, dtype=torch.float32).reshape(64, 32)
    assert tmakit.copy_path(torch.empty(32, 64), x.t()).reason == SWITCHED_OFF_REASON
    assert torch.equal(tmakit.copy_(torch.empty(32, 64), x.t()), x.t())

    dst = torch.ones(64, 32)
    assert tmakit.reduce_path(dst, x).reason == SWITCHED_OFF_REASON
    assert torch.equal(tmakit.add_(dst, x), x + 1)

    index = torch.tensor([5, 0, 63, 5])
    gathered = torch.empty(4, 32)
    assert tmakit.rows_path("gather", x, index, gathered).reason == SWITCHED_OFF_REASON
    assert torch.equal(tmakit.gather_rows(x, index, out=gathered), x[index])
    table = torch.zeros(64, 32)
    expected = torch.zeros(64, 32).index_add_(0, index, x[:4])
    assert torch.equal(tmakit.index_add_(table, index, x[:4]), expected)

    images = torch.arange(2 * 6 * 6 * 8, dtype=torch.float32).reshape(2, 6, 6, 8)  # NHWC
    assert tmakit.im2col_path(images, 3, padding=1).reason == SWITCHED_OFF_REASON
    unfolded = torch.nn.functional.unfold(images.permute(0, 3, 1, 2), 3, padding=1)  # (N, C*3*3, P*Q)
    expected = unfolded.view(2, 8, 3, 3, 36).permute(0, 4, 2, 3, 1).reshape(2 * 36, 3 * 3 * 8)
    assert torch.equal(tmakit.im2col(images, 3, padding=1), expected)

    tokens = x[:8]
    ids = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0], [0, 2], [1, 3], [2, 0], [3, 1]])
    routed = tmakit.moe_dispatch(tokens, ids, num_experts=4)
    assert tmakit.moe_path("dispatch", tokens, routed.row_map).reason == SWITCHED_OFF_REASON
    assert torch.equal(tmakit.moe_combine(routed.out, routed.row_map, None), 2 * tokens)

    dsts, srcs = [torch.empty(3, 5), torch.empty(16, 16)], [x[:3, :5], x[:16, :16].t()]
    tmakit.copy_many_(dsts, srcs)
    assert all(torch.equal(d, s) for d, s in zip(dsts, srcs, strict=True))


def test_the_torch_ops_run_torchs_path_instead_of_refusing_while_switched_off(switched_off_hopper):
    import tmakit.ops  # noqa: F401  registers the ops

    torch = switched_off_hopper
    x = torch.arange(64 * 32, dtype=torch.float32).reshape(64, 32)
    dst = torch.empty(32, 64)
    torch.ops.tmakit.copy_(dst, x.t())
    assert torch.equal(dst, x.t())
    total = torch.ones(64, 32)
    torch.ops.tmakit.reduce_into_(total, x)
    assert torch.equal(total, x + 1)
    index = torch.tensor([3, 1, 3])
    assert torch.equal(torch.ops.tmakit.gather_rows(x, index), x[index])


@pytest.mark.gpu
def test_on_a_hopper_every_call_and_op_equals_torchs_while_switched_off():
    """The switch on a Hopper: each public call and torch op runs torch's path (its `*_path` names
    the switch) and writes what torch's expression writes, bit for bit, into poisoned outputs;
    switched on again, the same calls take TMA's path."""
    torch = pytest.importorskip("torch")
    import tmakit
    import tmakit.ops  # noqa: F401  registers the ops
    from tmakit.api import tensors
    from tmakit.runtime.dispatch import forget_calls

    def poisoned(*shape):
        return torch.full(shape, float("nan"), device="cuda")

    x = torch.randn(512, 256, device="cuda")
    index = torch.randint(0, 512, (300,), device="cuda")
    images = torch.randn(2, 10, 10, 16, device="cuda")
    ids = torch.randint(0, 8, (512, 2), device="cuda")
    before = tensors.set_switched_off(True)
    forget_calls()
    try:
        assert tmakit.copy_path(poisoned(256, 512), x.t()).reason == SWITCHED_OFF_REASON
        assert torch.equal(tmakit.copy_(poisoned(256, 512), x.t()), x.t().contiguous())
        out = poisoned(256, 512)
        torch.ops.tmakit.copy_(out, x.t())
        assert torch.equal(out, x.t())
        total = x.clone()
        assert torch.equal(tmakit.add_(total, x), x + x)
        assert torch.equal(tmakit.gather_rows(x, index), x[index])
        assert torch.equal(torch.ops.tmakit.gather_rows(x, index), x[index])
        assert tmakit.rows_path("gather", x, index, poisoned(300, 256)).reason == SWITCHED_OFF_REASON
        table = torch.zeros(512, 256, device="cuda")
        once = torch.randperm(512, device="cuda")[:300]  # each row added once: no order of sums to differ
        expected = torch.zeros(512, 256, device="cuda").index_add_(0, once, x[:300])
        assert torch.equal(tmakit.index_add_(table, once, x[:300]), expected)
        assert tmakit.im2col_path(images, 3, padding=1).reason == SWITCHED_OFF_REASON
        patches = tmakit.im2col(images, 3, padding=1)
        routed = tmakit.moe_dispatch(x, ids, num_experts=8)
        assert tmakit.moe_path("dispatch", x, routed.row_map).reason == SWITCHED_OFF_REASON
        assert torch.equal(tmakit.moe_combine(routed.out, routed.row_map, None), 2 * x)
        dsts, srcs = [poisoned(64, 64), poisoned(256, 512)], [x[:64, :64], x.t()]
        tmakit.copy_many_(dsts, srcs)
        assert all(torch.equal(d, s) for d, s in zip(dsts, srcs, strict=True))
    finally:
        tensors.set_switched_off(before)
        forget_calls()
    assert torch.equal(tmakit.im2col(images, 3, padding=1), patches)  # TMA's patch matrix: the same
    assert tmakit.copy_path(poisoned(256, 512), x.t()).by_tma


def test_tmakit_log_writes_each_route_decided_once():
    """TMAKIT_LOG=1: a route is logged to stderr the first time it is decided, not again; without
    the variable nothing is written."""
    pytest.importorskip("torch")
    program = (
        "import torch, tmakit\n"
        "a, b = torch.zeros(64, 32), torch.ones(32, 64)\n"
        "for _ in range(3): tmakit.copy_path(a, b.t())\n"
    )
    configured = "import logging; logging.basicConfig(level=logging.INFO)\n" + program  # its own handler
    for value, lines, code in (("1", 1, program), ("", 0, program), ("1", 1, configured)):
        env = {**os.environ, "TMAKIT_LOG": value}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        logged = [line for line in done.stderr.splitlines() if "tmakit route: copy_: torch" in line]
        assert len(logged) == lines, done.stderr


def test_an_nvtx_range_wraps_each_call_raised_or_not(monkeypatch):
    pytest.importorskip("torch")
    import torch

    from tmakit.api import nvtx

    events = []
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda label: events.append(("push", label)))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: events.append(("pop",)))
    monkeypatch.setattr(nvtx, "_FOUND", {})

    def copy_(dst, src, *, strict=False, sms=None):
        if strict:
            raise ValueError("refused")
        return dst + src

    ranged = nvtx.ranged("copy_", copy_)
    assert ranged(1, 2) == 3 and ranged.__wrapped__ is copy_ and ranged.__name__ == "copy_"
    with pytest.raises(ValueError, match="refused"):
        ranged(1, 2, strict=True)
    probe = [("push", "tmakit.probe"), ("pop",)]  # NVTX tried once, at the first call
    assert events == probe + [("push", "tmakit.copy_"), ("pop",)] * 2


def test_without_nvtx_in_torch_the_calls_run_as_they_are_warned_once(monkeypatch):
    pytest.importorskip("torch")
    import torch

    from tmakit.api import nvtx

    def missing(label):
        raise RuntimeError("NVTX functions not installed")

    monkeypatch.setattr(torch.cuda.nvtx, "range_push", missing)
    monkeypatch.setattr(nvtx, "_FOUND", {})
    ranged = nvtx.ranged("add_", lambda a, b: a + b)
    with pytest.warns(UserWarning, match="no NVTX here"):
        assert ranged(1, 2) == 3
    assert ranged(2, 2) == 4 and nvtx._FOUND == {"torch": None}


def test_tmakit_nvtx_wraps_the_public_functions_at_import_and_nothing_without_it():
    check = (
        "import sys, tmakit; from tmakit.copies import api; from tmakit.rows import api as rows; "
        "wrapped = getattr(tmakit.index_add_, '__wrapped__', None); "
        "print(tmakit.copy_ is api.copy_, wrapped is rows.index_add_, tmakit.CopyOptions.__name__, "
        "hasattr(tmakit.lint_text, '__wrapped__'), 'torch' in sys.modules)"
    )
    for value, expected in (
        ("1", "False True CopyOptions False False"),
        ("", "True False CopyOptions False False"),
    ):
        env = {**os.environ, "TMAKIT_NVTX": value}
        out = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True)
        assert out.stdout.split() == expected.split(), (value, out.stderr)
