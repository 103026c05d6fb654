"""torch's own test inputs for the copies of many tensors: the OpInfo sample inputs of `cat`
through `tmakit.pack` (each tensor's span of the buffer held to torch's `cat` of the flattened
tensors) and of `split_with_sizes_copy` through `tmakit.unpack_` (the pieces, packed, copied back
into poisoned tensors, held to torch's pieces), every dtype listed, byte for byte, called and
prepared once (`GroupedCopy`). On the CPU torch's copies serve each; on a Hopper GPU the compact
aligned tensors take the grouped kernel."""

from __future__ import annotations

import pytest

import tmakit
from opinfo_db import on_the_gpu, op_db, torch

OPS = {
    op.name: op for op in op_db if op.name in ("cat", "split_with_sizes_copy") and not op.variant_test_name
}


def same_bytes(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bytes_of(a), bytes_of(b))


def bytes_of(tensor):
    return tensor.contiguous().reshape(-1).view(torch.uint8)


def poisoned(like):
    """A compact tensor like `like`, every byte 0xA5."""
    out = torch.empty_like(like, memory_format=torch.contiguous_format)
    out.reshape(-1).view(torch.uint8).fill_(0xA5)
    return out


def run_samples(device: str) -> dict[str, int]:
    """Every sample of both ops through pack / unpack_, called and prepared; the count of lists
    the grouped kernel served (a prepared copy's route has launches) and of the others."""
    paths = {"grouped": 0, "torch": 0}
    count = 0
    for name, op in OPS.items():
        for dtype in op.supported_dtypes(device):
            for sample in op.sample_inputs(device, dtype):
                where = f"{name} {dtype} {sample}"
                if name == "cat":
                    tensors = list(sample.input)
                    expected = torch.cat([t.reshape(-1) for t in tensors]).split([t.numel() for t in tensors])
                    flat, offsets = tmakit.pack(tensors)
                    prepared = tmakit.GroupedCopy.packing(tensors)
                    prepared()
                    for buffer in (flat, prepared.flat):
                        for i, (offset, t) in enumerate(zip(offsets, tensors, strict=True)):
                            span = buffer[offset : offset + t.numel()]
                            assert same_bytes(span, expected[i]), f"{where}: tensor {i}'s span"
                else:
                    x, sizes, *rest = sample.input, *sample.args
                    dim = rest[0] if rest else sample.kwargs.get("dim", 0)
                    expected = torch.split_with_sizes_copy(x, list(sizes), dim)
                    flat, _ = tmakit.pack(list(x.split(list(sizes), dim)))
                    outs = [poisoned(e) for e in expected]
                    tmakit.unpack_(flat, outs)
                    again = [poisoned(e) for e in expected]
                    prepared = tmakit.GroupedCopy.unpacking(flat, again)
                    prepared()
                    for i, e in enumerate(expected):
                        assert same_bytes(outs[i], e) and same_bytes(again[i], e), f"{where}: piece {i}"
                paths["grouped" if prepared._route.launches else "torch"] += 1
                count += 1
    assert count > 100  # the database still holds these ops' samples
    return paths


def test_opinfo_samples_of_cat_and_split_pack_and_unpack_exactly_on_the_cpu():
    assert run_samples("cpu")["grouped"] == 0  # CPU tensors: torch's copies serve each


@pytest.mark.gpu
def test_gpu_opinfo_samples_of_cat_and_split_pack_and_unpack_exactly(capsys):
    paths = on_the_gpu(run_samples, capsys, "cat / split_with_sizes_copy")
    assert paths["grouped"] > 0  # the kernel served some
