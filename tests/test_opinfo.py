"""torch's own test inputs through tmakit: the OpInfo sample inputs of torch's test suite for the
copying ops, each through `tmakit.copy_` into a destination of the op's output layout, held to
the op's output exactly; with `strict=True` each is that output or a TmaConfigError. Those of
`add` through `tmakit.add_` where torch's in-place `add_` is defined, and those of
`nn.functional.unfold` (4-D, as NHWC) through `tmakit.im2col`, held to unfold's output reordered
to (N*P*Q, R*S*C).

On the CPU every sample takes torch's path (the fallback); on a Hopper GPU the same samples take
whatever route they meet (`tmakit.copy_path`). Skipped where torch's internal test modules
cannot be imported (they need `expecttest`, in the test extra).
"""

from __future__ import annotations

import pytest

import tmakit
from opinfo_db import DTYPES, on_the_gpu, op_db, torch
from tmakit import TmaConfigError

# op name -> the view of the sample's input whose copy is the op's output
VIEWS = {
    "clone": lambda x, *args, **kwargs: x,
    "contiguous": lambda x, *args, **kwargs: x,
    "t_copy": lambda x: x.t(),
    "transpose_copy": lambda x, *args: x.transpose(*args),
    "permute_copy": lambda x, *args: x.permute(*args),
    "expand_copy": lambda x, *args, **kwargs: x.expand(*args, **kwargs),
    "as_strided_copy": lambda x, *args, **kwargs: x.as_strided(*args, **kwargs),
}
OPS = [op for op in op_db if op.name in VIEWS and not op.variant_test_name]


def samples(device: str):
    for op in OPS:
        supported = op.supported_dtypes(device)
        for dtype in DTYPES:
            if dtype in supported:
                for sample in op.sample_inputs(device, dtype):
                    yield op, dtype, sample


def poisoned_like(expected: torch.Tensor) -> torch.Tensor:
    """A destination of `expected`'s layout holding values unlike its own."""
    dst = torch.empty_strided(expected.shape, expected.stride(), dtype=expected.dtype, device=expected.device)
    if expected.numel():
        dst.copy_(expected == expected.flatten()[0] if expected.dtype == torch.bool else expected + 1)
    return dst


def run_samples(device: str) -> dict[str, int]:
    """Every sample through copy_ and copy_(strict=True); returns the count of each path taken."""
    paths: dict[str, int] = {}
    count = 0
    for op, dtype, sample in samples(device):
        expected = op(sample.input, *sample.args, **sample.kwargs)
        src = VIEWS[op.name](sample.input, *sample.args, **sample.kwargs)
        where = f"{op.name} {dtype} {tuple(sample.input.shape)} {sample.args} {sample.kwargs}"
        dst = poisoned_like(expected)
        route = tmakit.copy_path(dst, src)
        path = route.path
        assert tmakit.copy_(dst, src) is dst
        assert torch.equal(dst, expected), (where, path)
        strict = poisoned_like(expected)
        try:
            tmakit.copy_(strict, src, strict=True)
        except TmaConfigError:
            assert path == "torch" or route.tail, (where, path)  # refused where TMA moves not all
        else:
            assert torch.equal(strict, expected), (where, path)
        paths[path] = paths.get(path, 0) + 1
        count += 1
    assert count > 100  # the database still holds these ops' samples
    return paths


def test_opinfo_samples_of_the_copying_ops_copy_exactly_on_the_cpu():
    paths = run_samples("cpu")
    assert set(paths) == {"torch"}  # CPU tensors: torch's copy_ serves each


@pytest.mark.gpu
def test_gpu_opinfo_samples_of_the_copying_ops_copy_exactly(capsys):
    paths = on_the_gpu(run_samples, capsys, "copy")
    assert paths.get("tma", 0) + paths.get("tma-view", 0) + paths.get("tma-rows", 0) > 0


# -- add's samples through add_ ---------------------------------------------------------------------
ADD = next(op for op in op_db if op.name == "add" and not op.variant_test_name)


def run_add_samples(device: str) -> dict[str, int]:
    """Each sample of `add` with a tensor `other` and no `alpha` (`tmakit.add_` takes none)
    through `tmakit.add_` on a copy of its input: exactly `input.add_(other)` where that in-place
    op is defined, refused (TmaConfigError, input untouched) where `other` would grow the input;
    with `strict=True` the same sum or a TmaConfigError on torch's path only. Returns the count of
    samples by path."""
    paths: dict[str, int] = {}
    supported = ADD.supported_dtypes(device)
    for dtype in (dtype for dtype in DTYPES if dtype in supported):
        for sample in ADD.sample_inputs(device, dtype):
            other = sample.args[0] if sample.args else None
            if not isinstance(other, torch.Tensor) or sample.kwargs:
                continue
            where = f"add {dtype} {tuple(sample.input.shape)} + {tuple(other.shape)} {other.dtype}"
            dst = sample.input.clone()
            if torch.broadcast_shapes(dst.shape, other.shape) != dst.shape:
                for strict in (False, True):
                    with pytest.raises(TmaConfigError, match="a reduce combines elements of one shape"):
                        tmakit.add_(dst, other, strict=strict)
                assert torch.equal(dst, sample.input), where
                paths["refused"] = paths.get("refused", 0) + 1
                continue
            expected = sample.input.clone().add_(other)
            path = tmakit.reduce_path(dst, other, "add").path
            assert tmakit.add_(dst, other) is dst
            torch.testing.assert_close(dst, expected, rtol=0, atol=0, equal_nan=True, msg=f"{where} ({path})")
            strict = sample.input.clone()
            try:
                tmakit.add_(strict, other, strict=True)
            except TmaConfigError:
                assert path == "torch", (where, path)  # refused only where TMA has no path
            else:
                torch.testing.assert_close(strict, expected, rtol=0, atol=0, equal_nan=True, msg=where)
            paths[path] = paths.get(path, 0) + 1
    assert paths.get("refused", 0) and sum(paths.values()) > 30  # the database still holds add's samples
    return paths


def test_opinfo_samples_of_add_through_add__are_exact_on_the_cpu():
    assert set(run_add_samples("cpu")) == {"torch", "refused"}  # CPU tensors: torch's add_ serves each


@pytest.mark.gpu
def test_gpu_opinfo_samples_of_add_through_add__are_exact(capsys):
    on_the_gpu(run_add_samples, capsys, "add")


# -- nn.functional.unfold's samples through im2col -------------------------------------------------
UNFOLD = next(op for op in op_db if op.name == "nn.functional.unfold" and not op.variant_test_name)
UNFOLD_ARGUMENTS = ("kernel_size", "dilation", "padding", "stride")  # F.unfold's positional order


def run_unfold_samples(device: str) -> dict[str, int]:
    """Each 4-D sample of `nn.functional.unfold` on `device`, its input permuted to NHWC, through
    `tmakit.im2col` with the same convolution: the patch matrix must be unfold's (N, C*R*S, L)
    reordered to (N*L, R*S*C) exactly. Returns the count of samples by path."""
    paths: dict[str, int] = {}
    supported = UNFOLD.supported_dtypes(device)
    for dtype in (dtype for dtype in DTYPES if dtype in supported):
        for sample in UNFOLD.sample_inputs(device, dtype):
            nchw = sample.input
            if nchw.dim() != 4:
                continue
            given = {
                "dilation": 1,
                "padding": 0,
                "stride": 1,
                **dict(zip(UNFOLD_ARGUMENTS, sample.args, strict=False)),
            }
            given.update(sample.kwargs)
            kernel, dilation, padding, stride = (given[name] for name in UNFOLD_ARGUMENTS)
            unfolded = torch.nn.functional.unfold(nchw, kernel, dilation, padding, stride)  # (N, C*R*S, L)
            n, c = nchw.shape[:2]
            r, s = (kernel, kernel) if isinstance(kernel, int) else kernel
            length = unfolded.shape[-1]
            expected = unfolded.view(n, c, r, s, length).permute(0, 4, 2, 3, 1).reshape(n * length, r * s * c)
            x = nchw.permute(0, 2, 3, 1)
            path = tmakit.im2col_path(x, kernel, stride, padding, dilation).path
            got = tmakit.im2col(x, kernel, stride, padding, dilation)
            where = f"{dtype} {tuple(nchw.shape)} {given} ({path})"
            assert got.shape == expected.shape and torch.equal(got, expected), where
            paths[path] = paths.get(path, 0) + 1
    assert sum(paths.values()) > 100  # the database still holds unfold's samples
    return paths


def test_opinfo_samples_of_unfold_through_im2col_are_exact_on_the_cpu():
    assert set(run_unfold_samples("cpu")) == {"torch"}  # CPU tensors: torch's expression serves each


@pytest.mark.gpu
def test_gpu_opinfo_samples_of_unfold_through_im2col_are_exact(capsys):
    on_the_gpu(run_unfold_samples, capsys, "unfold")
