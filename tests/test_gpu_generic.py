"""Shape-generic kernels on the device: one compile per class serves random shapes, every element
compared bit for bit with the source (destinations poisoned first, position-dependent inputs).

- 120 same-layout copies and 72 transposing copies over every dtype, both layouts, ranks 2-4,
  extents from 1 up, partial tiles, padded and compact strides;
- rows views (`as_rows`) and bulk copies of random sizes;
- `load_tiles` of random shapes against the padded reference;
- a copy of more than 2^31 elements;
- the number of classes compiled for all of them.
"""

import importlib
import math
import random

import pytest

import tmakit
from tmakit.config import DTYPES
from tmakit.limits import POISON

pytestmark = pytest.mark.gpu

copies_call = importlib.import_module("tmakit.copies.call")

TORCH_DTYPES = {name: element.torch_name for name, element in DTYPES.items()}


def torch_dtype(torch, name):
    return getattr(torch, TORCH_DTYPES[name])


def position_dependent(torch, shape, dtype, major="row"):
    """A tensor of `shape` (padded strides of `major`) whose bits depend on each element's index."""
    out = tmakit.padded_empty(shape, dtype, major=major)
    width = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[out.element_size()]
    values = torch.arange(math.prod(shape), device="cuda", dtype=torch.int64).view(shape)
    out.view(width).copy_(((values * 2654435761) >> 7) % 113 - 56)
    return out


def poisoned(torch, shape, dtype, major="row", pad=0):
    """A destination of `shape` with padded strides (`pad` more 16-byte chunks of pitch), every
    bit set."""
    element = torch.empty(0, dtype=dtype).element_size()
    rows, cols = shape[-2:]
    inner, outer = (cols, rows) if major == "row" else (rows, cols)
    pitch = -(-inner * element // 16) * 16 // element + pad * (16 // element)
    strides = [pitch, 1] if major == "row" else [1, pitch]
    step = outer * pitch
    for extent in reversed(shape[:-2]):
        strides.insert(0, step)
        step *= extent
    storage = torch.full((step * element,), POISON & 0xFF, dtype=torch.uint8, device="cuda")
    return storage.view(dtype).as_strided(shape, strides)


def first_difference(torch, got, want):
    """None if every element's bits agree, else the first wrong index and both values."""
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[got.element_size()]
    a, b = got.contiguous().view(width), want.contiguous().view(width)
    wrong = (a != b).nonzero()
    if len(wrong) == 0:
        return None
    index = tuple(int(i) for i in wrong[0])
    return f"{len(wrong)} wrong elements, first at {index}: {a[index]} instead of {b[index]}"


def random_shape(rng, rank):
    extents = [rng.choice((1, 2, 3)) for _ in range(rank - 2)]
    return (
        *extents,
        rng.choice((1, 2, 17, 64, 100, 255, 513, 1000)),
        rng.choice((1, 8, 33, 256, 300, 777, 2048)),
    )


def test_random_copies_through_one_compile_per_class():
    import torch

    rng = random.Random(2026)
    before = len(copies_call._CLASSES)  # each class compiled (or loaded from disk) once, kept there
    checked = 0
    for index in range(120):
        name = list(DTYPES)[index % len(DTYPES)]
        dtype = torch_dtype(torch, name)
        shape = random_shape(rng, rng.choice((2, 2, 3, 4)))
        major = rng.choice(("row", "col"))
        src = position_dependent(torch, shape, dtype, major)
        dst = poisoned(torch, shape, dtype, major, pad=rng.choice((0, 0, 1)))
        assert tmakit.copy_(dst, src) is dst
        torch.cuda.synchronize()
        wrong = first_difference(torch, dst, src)
        assert wrong is None, (
            f"copy {index}: {shape} {name} {major}, strides {src.stride()} -> {dst.stride()}: {wrong}"
        )
        checked += 1
    classes = len(copies_call._CLASSES) - before
    print(f"{checked} copies, {classes} classes compiled")
    assert classes <= 2 * len(DTYPES) * 2 * 3  # dtype x layout x rank x fits-L2, at most


def test_random_transposing_copies():
    import torch

    rng = random.Random(7)
    for index in range(72):
        name = list(DTYPES)[index % len(DTYPES)]
        dtype = torch_dtype(torch, name)
        shape = random_shape(rng, rng.choice((2, 2, 3)))
        major = rng.choice(("row", "col"))
        src = position_dependent(torch, shape, dtype, major)
        dst = poisoned(torch, shape, dtype, "col" if major == "row" else "row")
        tmakit.copy_(dst, src)
        torch.cuda.synchronize()
        wrong = first_difference(torch, dst, src)
        assert wrong is None, f"transpose {index}: {shape} {name} {major} -> other: {wrong}"


@pytest.mark.parametrize("options", [{"as_rows": True}, {"bulk": True}])
def test_rows_views_and_bulk_copies_of_random_sizes(options):
    import torch

    rng = random.Random(11)
    for index in range(24):
        name = list(DTYPES)[index % len(DTYPES)]
        dtype = torch_dtype(torch, name)
        numel = 512 * rng.choice((1, 3, 7, 100, 4097, 40000))
        shape = rng.choice(((1, numel), (numel // 256, 256), (2, numel // 512, 256)))
        src = position_dependent(torch, shape, dtype).contiguous()
        dst = torch.empty_like(src)
        dst.view(torch.uint8).fill_(POISON & 0xFF)
        tmakit.copy_(dst, src, **options)
        torch.cuda.synchronize()
        wrong = first_difference(torch, dst, src)
        assert wrong is None, f"{options} {index}: {shape} {name}: {wrong}"


def test_load_tiles_of_random_shapes():
    import torch

    rng = random.Random(3)
    for index in range(30):
        name = ("fp16", "bf16", "fp32", "int8")[index % 4]
        dtype = torch_dtype(torch, name)
        rank = rng.choice((2, 3))
        shape = (
            *(rng.choice((2, 3)),) * (rank - 2),
            rng.choice((5, 64, 100, 300)),
            rng.choice((64, 200, 520)),
        )
        major = rng.choice(("row", "col"))
        src = position_dependent(torch, shape, dtype, major)
        tile = (32, 32) if major == "col" else (16, 64)
        got = tmakit.load_tiles(src, tile)
        rows, cols = shape[-2:]
        assert got.shape == (*shape[:-2], -(-rows // tile[0]) * tile[0], -(-cols // tile[1]) * tile[1])
        wrong = first_difference(torch, got[..., :rows, :cols], src)
        assert wrong is None, f"load_tiles {index}: {shape} {name} {major}: {wrong}"
        width = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[got.element_size()]
        padding = got.view(width).clone()
        padding[..., :rows, :cols] = 0
        assert int(padding.count_nonzero()) == 0, "TMA's out-of-bounds fill must be zeros"


def test_a_copy_of_more_than_2_to_the_31_elements():
    import torch

    shape = (32771, 65552)  # 2,148,204,592 uint8 elements, past 2^31
    src = torch.arange(65552, device="cuda", dtype=torch.int32).to(torch.uint8).expand(shape).contiguous()
    src[:, 0] = torch.arange(shape[0], device="cuda").to(torch.uint8)  # rows differ too
    dst = torch.empty_like(src)
    dst.fill_(POISON & 0xFF)
    tmakit.copy_(dst, src)
    torch.cuda.synchronize()
    assert torch.equal(dst, src)
    del src, dst
    torch.cuda.empty_cache()


def test_a_new_shape_in_a_warm_class_still_meets_every_rule():
    """The compiled class accepts any shape; tmakit's checks run before its launch all the same."""
    import torch

    good = position_dependent(torch, (64, 64), torch.float16)
    tmakit.copy_(torch.empty_like(good), good)
    rows = torch.empty(64 * 63, dtype=torch.float16, device="cuda")
    odd = rows.as_strided((64, 62), (63, 1))  # 126-byte rows
    odd.copy_(position_dependent(torch, (64, 62), torch.float16))
    with pytest.raises(tmakit.TmaConfigError, match="global stride of dim 0 is 126 bytes"):
        tmakit.copy_(torch.empty_like(odd), odd, strict=True)
    served = torch.full_like(odd, float("nan"))
    tmakit.copy_(served, odd)  # not strict: torch's copy_ serves what TMA cannot address
    torch.cuda.synchronize()
    assert first_difference(torch, served, odd) is None
    vector = torch.empty(1, 777, dtype=torch.float16, device="cuda")  # a 1554-byte row stride
    vector.copy_(position_dependent(torch, (1, 777), torch.float16))
    out = torch.empty_like(vector)
    tmakit.copy_(out, vector)  # extent 1: the stride never reaches TMA; a valid one stands in
    torch.cuda.synchronize()
    assert first_difference(torch, out, vector) is None
