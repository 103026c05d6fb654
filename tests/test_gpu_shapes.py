"""Issue 3 on the device: layouts, swizzles, batches, dtypes; logical and physical checks."""

import pytest

import tmakit
from tmakit import LoadConfig, TmaConfigError
from tmakit.config import padded_strides

pytestmark = pytest.mark.gpu


def padded(shape, dtype, tile, swizzle=0, major="row"):
    itemsize = tmakit.config.DTYPES[dtype].nbytes
    return LoadConfig(shape, dtype, tile, swizzle, major, padded_strides(shape, itemsize, major))


CASES = [
    padded((1000, 777), "bf16", (64, 64), 128),  # the 777-wide bf16 matrix, padded
    padded((1000, 777), "bf16", (64, 64), 128, "col"),
    padded((777, 1000), "fp16", (128, 16), 32),
    padded((509, 1021), "fp32", (32, 16), 64),
    padded((3, 100, 300), "fp8e4m3", (16, 128), 128),  # rank 3
    padded((2, 3, 2, 61, 130), "fp8e5m2", (64, 8), 64, "col"),  # rank 5
    padded((1, 384), "int8", (1, 128), 128),  # an extent of 1 (with a tile extent of 1)
    padded((2, 2, 100, 200), "int8", (1, 32), 32),
    padded((1, 16), "uint8", (1, 16)),  # a row extent of 1 with a tile extent of 1
    padded((4096, 4096), "fp16", (256, 64), 128),
    # torch.zeros(256, 1)'s strides (1, 1): the rows are contiguous, the extent-1 dim's stride unused
    LoadConfig((256, 1), "fp16", (64, 1), 0, "col", strides=(1, 1)),
    # a batch of 1 whose stride is no multiple of 16 bytes: never stepped along, never in the map
    LoadConfig((1, 992, 368), "fp8e5m2", (26, 32), 0, "row", strides=(1095167, 368, 1)),
]


@pytest.mark.parametrize("config", CASES, ids=str)
def test_logical_and_physical_bytes_match(config):
    from tmakit.load.check import check_on_gpu

    result = check_on_gpu(config)
    assert result["status"] == "ok", result


def test_load_tiles_on_a_transposed_view_and_a_padded_tensor():
    import torch

    storage = torch.arange(256 * 128, device="cuda", dtype=torch.int32).to(torch.float32).reshape(256, 128)
    view = storage.t()  # 128 x 256, column-major
    out = tmakit.load_tiles(view, tile=(32, 32), swizzle=128)
    assert torch.equal(out, view)

    odd = tmakit.padded_empty((1000, 777), torch.bfloat16)
    odd.copy_(torch.randn(1000, 777, device="cuda").to(torch.bfloat16))
    out = tmakit.load_tiles(odd, tile=(64, 64), swizzle=128)
    assert out.shape == (1024, 832)
    assert torch.equal(out[:1000, :777].view(torch.int16), odd.view(torch.int16))
    assert not out[1000:].any() and not out[:, 777:].any()


def test_compact_777_wide_bf16_is_refused_and_host_tensors_too():
    import torch

    with pytest.raises(TmaConfigError, match="1554 bytes"):
        tmakit.load_tiles(torch.empty(1000, 777, dtype=torch.bfloat16, device="cuda"), tile=(64, 64))
    with pytest.raises(TmaConfigError, match="tensor is on cpu"):
        tmakit.load_tiles(torch.empty(64, 64, dtype=torch.float16), tile=(64, 64))
    with pytest.raises(TmaConfigError, match="not 16-byte aligned"):
        base = torch.empty(64 * 64 + 8, dtype=torch.float16, device="cuda")
        tmakit.load_tiles(base[4 : 4 + 64 * 64].view(64, 64), tile=(64, 64))
