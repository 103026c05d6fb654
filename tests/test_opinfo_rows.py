"""torch's own test inputs for the index ops through tmakit's rows ops: the OpInfo sample inputs
of `index_select`, `index_copy`, `index_add` and `index_reduce` (every dtype listed; a dim other
than 0 through the view with that dim first), each held to torch's output exactly (a float
`index_add` with repeated entries: within the summation-order bound). On the CPU every sample
takes torch's op; on a Hopper GPU each takes its route (`tmakit.rows_path`). OpInfo's rows (5
elements) are too short for bulk row copies, so each sample runs again with its rows repeated 16
times: the same indices on rows the kernel serves (`strict`)."""

from __future__ import annotations

import pytest

import tmakit
from opinfo_db import DTYPES, on_the_gpu, op_db, torch
from tmakit.check.reference import index_add_wrong_rows

NAMES = ("index_select", "index_copy", "index_add", "index_reduce")
OPS = [op for op in op_db if op.name in NAMES]


def first(tensor, dim):
    """`tensor` with `dim` first (a 0-D tensor as it is)."""
    return tensor.movedim(dim, 0) if tensor.dim() else tensor


def through_tmakit(name, x, dim, index, rest, kwargs):
    """The sample's result by tmakit's op on the views with `dim` first: (result, table,
    compact, path), strict (the kernel at any row length) where bulk row copies serve it, else
    the plain call (torch's op)."""
    for strict in (True, False):
        try:
            if name == "index_select":
                got = tmakit.gather_rows(first(x, dim), index, strict=strict)
                return (got.movedim(0, dim) if x.dim() else got), first(x, dim), got, strict
            out = x.clone()
            table, source = first(out, dim), first(rest[0], dim)
            if name == "index_copy":
                tmakit.scatter_rows_(table, index, source, strict=strict)
            elif name == "index_add":
                tmakit.index_add_(table, index, source, strict=strict, **kwargs)
            else:
                tmakit.index_reduce_(table, index, source, rest[1], strict=strict, **kwargs)
            return out, first(x, dim), source, strict
        except tmakit.TmaConfigError:
            if not strict:
                raise
    raise AssertionError("unreachable")


ROWS_OPS = {"index_select": "gather", "index_copy": "scatter", "index_add": "add"}


def widened(tensor, dim):
    """`tensor` with `dim` first and each of its rows repeated 16 times: rows of a 16-byte
    multiple, which bulk row copies address (OpInfo's rows, of 5 elements, never are)."""
    rows = first(tensor, dim)
    return rows.reshape(rows.shape[0], -1).repeat(1, 16).contiguous()


def run_samples(device: str) -> dict[str, int]:
    """Every sample through tmakit's op, held to torch's output, as it is and (not 0-D) widened;
    the count of each path taken."""
    paths: dict[str, int] = {}
    count = 0
    for op in OPS:
        supported = op.supported_dtypes(device)
        for dtype in (dtype for dtype in DTYPES if dtype in supported):
            for sample in op.sample_inputs(device, dtype):
                x, (dim, index, *rest) = sample.input, sample.args
                where = f"{op.name} {dtype} {tuple(x.shape)} dim {dim} {tuple(index.shape)} {sample.kwargs}"
                variants = [(x, dim, rest)]
                if x.dim() and (op.name == "index_select" or rest[0].dim()):
                    wide_rest = rest if op.name == "index_select" else [widened(rest[0], dim), *rest[1:]]
                    variants.append((widened(x, dim), 0, wide_rest))
                for x, dim, rest in variants:
                    expected = op(x, dim, index, *rest, **sample.kwargs)
                    got, table, compact, by_tma = through_tmakit(op.name, x, dim, index, rest, sample.kwargs)
                    rows_op = ROWS_OPS.get(op.name) or {"amax": "max", "amin": "min"}.get(rest[-1])
                    repeated_float_add = rows_op == "add" and dtype.is_floating_point and x.dim() > 0
                    if repeated_float_add and not sample.kwargs:
                        wrong = index_add_wrong_rows(first(got, dim), table, index.reshape(-1), compact)
                        assert not wrong.numel(), where
                    else:
                        torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True, msg=where)
                    path = "tma-rows-bulk (strict)" if by_tma else "torch"
                    paths[path] = paths.get(path, 0) + 1
                    count += 1
    assert count > 100  # the database still holds these ops' samples
    return paths


def test_opinfo_samples_of_the_index_ops_are_exact_on_the_cpu():
    assert set(run_samples("cpu")) == {"torch"}  # CPU tensors: torch's op serves each


@pytest.mark.gpu
def test_gpu_opinfo_samples_of_the_index_ops_are_exact(capsys):
    paths = on_the_gpu(run_samples, capsys, "index")
    assert paths.get("tma-rows-bulk (strict)", 0) > 0  # the kernel ran on some
