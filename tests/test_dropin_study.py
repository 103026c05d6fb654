"""The drop-in study's cases, its torch im2col expression and its rows, on the CPU."""

from __future__ import annotations

import pytest

from tmakit.bench.dropin import EAGER, DropinCase
from tmakit.bench.report import BenchRow
from tmakit.families import family_named
from tmakit.families.dropin import case_row, cases
from tmakit.patches.api import torch_im2col


def test_the_cases_cover_each_op_at_each_size_and_the_resnet_layers():
    names = [case.name for case in cases()]
    assert len(set(names)) == len(names)
    for op in ("copy", "transpose", "add"):
        assert [n for n in names if n.startswith(f"{op} ")] == [
            f"{op} {mib} MiB {'fp32' if op == 'add' else 'fp16'}" for mib in (1, 16, 256, 1024)
        ]
    assert "im2col 32x224x224x16 7x7 stride 2 pad 3" in names
    assert sum(n.startswith("im2col ") for n in names) == 8


def test_only_picks_cases_by_the_start_of_their_names():
    class Options:
        only = "add 256,im2col 32x7"

    assert [c.name for c in family_named("dropin").plans(Options())] == [
        "add 256 MiB fp32",
        "im2col 32x7x7x512 3x3 stride 1 pad 1",
    ]


def test_an_im2col_case_counts_its_patch_matrix():
    case = DropinCase("im2col", (2, 9, 9, 16), "fp16", (3, 2, 1))
    assert case.tensor_bytes == 2 * 5 * 5 * 9 * 16 * 2


@pytest.mark.parametrize("r, stride, padding", [(3, 1, 1), (3, 2, 1), (7, 2, 3), (1, 1, 0)])
def test_the_strided_expression_is_the_patch_matrix(r, stride, padding):
    torch = pytest.importorskip("torch")
    x = torch.arange(2 * 11 * 10 * 4, dtype=torch.float32).reshape(2, 11, 10, 4)
    n, h, w, c = x.shape
    p, q = (h + 2 * padding - r) // stride + 1, (w + 2 * padding - r) // stride + 1
    out = torch.full((n * p * q, r * r * c), float("nan"))
    assert torch_im2col(x, r, stride, padding, out=out) is out
    unfolded = torch.nn.functional.unfold(x.permute(0, 3, 1, 2), r, 1, padding, stride)  # (N, C*R*S, L)
    expected = unfolded.view(n, c, r, r, p * q).permute(0, 4, 2, 3, 1).reshape(n * p * q, r * r * c)
    assert torch.equal(out, expected)


def test_a_case_row_divides_the_faster_peer_by_tmakit():
    case = cases()[0]
    notes = {"op": case.name, "path": "tma-ring", "rotated_buffers": 3}
    times = {"tmakit": 10.0, "torch": 12.0, "inductor": 11.0, f"tmakit {EAGER}": 20.0, f"torch {EAGER}": 19.0}
    verdicts = {"tmakit": "ok"}
    rows = [
        BenchRow(k, "copy", case.shape, case.dtype, case.tensor_bytes, [v], verdicts.get(k), None, notes)
        for k, v in times.items()
    ]
    row = case_row(case, rows)
    assert row["device_vs_faster_peer"] == pytest.approx(1.1)
    assert row["faster_peer"] == "inductor"
    assert row["eager_vs_torch"] == pytest.approx(0.95)
    assert row["path"] == "tma-ring"


def test_the_study_is_a_bench_kernel():
    assert family_named("dropin").reads == frozenset({"only"})
