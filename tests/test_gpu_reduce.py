"""TMA reduce stores on the device: every (op, dtype) pair the PTX ISA lists, on shapes with partial
tiles, batches, both layouts and a single row, position-dependent inputs, every element's bits
compared with the CPU model (`model.reduce_reference`) and, where torch computes that dtype on the
GPU, with torch (`add_`, `minimum`, `maximum`, bitwise ops). Then NaNs, infinities, signed zeros
and subnormals against the model's stated rules (torch's minimum/maximum propagate NaNs, so torch
is no reference there).

Rounding: each destination element receives exactly one reduction, so a float add is one rounding
to nearest even of the exact sum: fp32 bit-exact against torch's fp32 `add_`; f16 and bf16 also
bit-exact against torch, whose add computes in fp32 (24 bits) and rounds once more to f16 (11) or
bf16 (8) - innocuous, 24 >= 2p + 2 - and against the model (float64, then one rounding).
The inputs carry full mantissas (integers divided by 7 and by 3), so the sums do need rounding.

Data moves through signed views of each width (torch's uint32/uint64 have few CUDA ops).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tmakit
from tmakit import TmaConfigError
from tmakit.config import DTYPES
from tmakit.model import reduce_reference
from tmakit.model.reduce_ops import STORAGE, bf16_to_float, float_to_bf16
from tmakit.plan import reduce_pairs
from tmakit.plan.copy_defaults import copy_tile
from tmakit.reduce.plan import RING_DTYPES

pytestmark = pytest.mark.gpu

# (shape, layout): whole tiles, partial tiles both ways, a batch of odd extents, a column-major
# tensor, a single row.
SHAPES = [
    ((64, 64), "row"),
    ((1000, 776), "row"),
    ((3, 17, 333), "row"),
    ((513, 300), "col"),
    ((1, 1000), "row"),
]
NP_SIGNED = {2: np.int16, 4: np.int32, 8: np.int64}
# The dtypes torch reduces on the GPU (its uint32/uint64 lack the ops): a second reference.
TORCH_REFERENCE_DTYPES = ("int32", "int64", "fp32", "fp16", "bf16")


def torch_dtype(torch, name):
    return getattr(torch, DTYPES[name].torch_name)


def signed(torch, name):
    return {2: torch.int16, 4: torch.int32, 8: torch.int64}[DTYPES[name].nbytes]


def position_hash(shape, salt: int) -> np.ndarray:
    """64 bits per element that depend on its index and `salt` (splitmix64's finaliser)."""
    with np.errstate(over="ignore"):
        h = (np.arange(math.prod(shape), dtype=np.uint64).reshape(shape) + np.uint64(salt)) * np.uint64(
            0x9E3779B97F4A7C15
        )
        h ^= h >> np.uint64(30)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(27)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(31)
    return h


def position_values(op: str, name: str, shape, salt: int) -> np.ndarray:
    """The dtype's storage (`model.reduce_ops.STORAGE`; bf16 as bits) of position-dependent values:
    full-width integers (adds overflow, signs differ), small counters for inc/dec (both branches
    taken), floats with full mantissas in [-700, 700] (no NaN, no -0.0)."""
    h = position_hash(shape, salt)
    if op in ("inc", "dec"):
        return (h % np.uint64(20 + 5 * salt)).astype(np.uint32)
    if name in ("int32", "uint32"):
        return h.astype(np.uint32).view(STORAGE[name])
    if name in ("int64", "uint64"):
        return h.view(STORAGE[name])
    values = ((h % np.uint64(4093)).astype(np.float64) - 2046) / (7.0 if salt == 1 else 3.0)
    if name == "bf16":
        return float_to_bf16(values.astype(np.float32))
    return values.astype(STORAGE[name])


def upload(torch, values: np.ndarray, name: str, major: str):
    """A CUDA tensor of `values`' shape with padded strides of `major` holding their bits."""
    tensor = tmakit.padded_empty(values.shape, torch_dtype(torch, name), major=major)
    bits = np.ascontiguousarray(values).view(NP_SIGNED[DTYPES[name].nbytes])
    tensor.view(signed(torch, name)).copy_(torch.from_numpy(bits).cuda())
    return tensor


def download(torch, tensor, name: str) -> np.ndarray:
    return np.ascontiguousarray(tensor.view(signed(torch, name)).cpu().numpy()).view(STORAGE[name])


def torch_reference(torch, op: str, dst, src):
    """What torch computes for dst op src (a new tensor of dst's layout)."""
    if op == "add":
        return dst.clone().add_(src)
    function = {
        "min": torch.minimum,
        "max": torch.maximum,
        "and": torch.bitwise_and,
        "or": torch.bitwise_or,
        "xor": torch.bitwise_xor,
    }[op]
    return dst.clone().copy_(function(dst, src))


def first_wrong(found: np.ndarray, expected: np.ndarray, name: str, tile) -> str | None:
    """None when every element's bits agree; else the first wrong element and its tile."""
    width = f"uint{DTYPES[name].bits}"
    wrong = found.view(width) != expected.view(width)
    if not wrong.any():
        return None
    index = tuple(int(i) for i in np.argwhere(wrong)[0])
    *batch, row, col = index
    return (
        f"{int(wrong.sum())} wrong elements; first at {index}, tile "
        f"{(*batch, row // tile[0], col // tile[1])}: {found[index]!r} instead of {expected[index]!r}"
    )


@pytest.mark.parametrize("op, dtype", reduce_pairs(), ids=[f"{op}-{dtype}" for op, dtype in reduce_pairs()])
def test_every_pair_reduces_every_element_as_the_model_and_torch_say(op, dtype):
    import torch

    for shape, major in SHAPES:
        dst_values, src_values = position_values(op, dtype, shape, 1), position_values(op, dtype, shape, 2)
        dst, src = upload(torch, dst_values, dtype, major), upload(torch, src_values, dtype, major)
        by_torch = None  # computed before the reduce changes dst
        if dtype in TORCH_REFERENCE_DTYPES:
            by_torch = download(torch, torch_reference(torch, op, dst, src), dtype)
        assert tmakit.reduce_into_(dst, src, op) is dst
        torch.cuda.synchronize()
        found = download(torch, dst, dtype)
        tile = copy_tile(dtype)
        wrong = first_wrong(found, reduce_reference(op, dtype, dst_values, src_values), dtype, tile)
        assert wrong is None, f"{op} {dtype} {shape} {major}-major against the model: {wrong}"
        if by_torch is not None:
            wrong = first_wrong(found, by_torch, dtype, tile)
            assert wrong is None, f"{op} {dtype} {shape} {major}-major against torch: {wrong}"
        assert np.array_equal(download(torch, src, dtype).view(np.uint8), src_values.view(np.uint8))


def test_add_is_dst_plus_src_and_a_transposing_reduce_adds_the_other_layout():
    import torch

    x = torch.randn(1000, 776, device="cuda")
    y = torch.randn(1000, 776, device="cuda")
    want = x + y
    assert tmakit.add_(x, y) is x
    torch.cuda.synchronize()
    assert torch.equal(x.view(torch.int32), want.view(torch.int32))
    column_major = torch.randn(776, 1000, device="cuda").t()  # the other contiguous dim
    want = column_major + y
    tmakit.add_(column_major, y)
    torch.cuda.synchronize()
    assert torch.equal(column_major.contiguous().view(torch.int32), want.view(torch.int32))


def test_a_reduce_into_itself_doubles_each_element_once():
    import torch

    x = torch.arange(64 * 256, device="cuda", dtype=torch.int32).view(64, 256)
    tmakit.add_(x, x)
    torch.cuda.synchronize()
    assert torch.equal(x, 2 * torch.arange(64 * 256, device="cuda", dtype=torch.int32).view(64, 256))


def test_a_refused_pair_raises_before_any_launch_when_strict_and_runs_torchs_op_otherwise():
    import torch

    dst = torch.zeros(64, 64, device="cuda")
    with pytest.raises(TmaConfigError, match="reduce op 'max' with dtype fp32"):
        tmakit.reduce_into_(dst, torch.ones(64, 64, device="cuda"), "max", strict=True)
    signed = torch.zeros(64, 64, device="cuda", dtype=torch.int32)
    with pytest.raises(TmaConfigError, match="reduce op 'min' with dtype int32: .*as unsigned"):
        tmakit.reduce_into_(
            signed, torch.full_like(signed, -1), "min", strict=True
        )  # seen computed as unsigned
    assert bool((signed == 0).all())
    torch.cuda.synchronize()
    assert bool((dst == 0).all())
    tmakit.reduce_into_(signed, torch.full_like(signed, -1), "min")  # torch.minimum: signed
    tmakit.reduce_into_(dst, torch.ones(64, 64, device="cuda"), "max")
    assert bool((signed == -1).all()) and bool((dst == 1).all())


# -- NaNs, infinities, signed zeros and subnormals ------------------------------------------------
FLOAT_PAIRS = [(op, dtype) for op, dtype in reduce_pairs() if dtype in ("fp32", "fp16", "bf16")]
# Per float dtype: its smallest subnormal, largest subnormal, smallest normal and largest finite.
FLOAT_EDGES = {
    "fp32": (2.0**-149, 2.0**-126 - 2.0**-149, 2.0**-126, float(np.finfo(np.float32).max)),
    "fp16": (2.0**-24, 2.0**-14 - 2.0**-24, 2.0**-14, 65504.0),
    "bf16": (2.0**-133, 2.0**-126 - 2.0**-133, 2.0**-126, 3.3895313892515355e38),
}


def special_values(name: str) -> list[float]:
    """Zeros of both signs, ones, subnormals (smallest, largest, negative), normals at the edge,
    the largest finite value, infinities and a NaN, as float64."""
    smallest, largest_subnormal, normal, biggest = FLOAT_EDGES[name]
    return [0.0, -0.0, 1.0, -1.5, smallest, -smallest, largest_subnormal, -largest_subnormal,
            normal, -1.5 * normal, biggest, -biggest, np.inf, -np.inf, np.nan, 2.5]  # fmt: skip


def as_storage(name: str, values: np.ndarray) -> np.ndarray:
    if name == "bf16":
        return float_to_bf16(values.astype(np.float32))
    return values.astype(STORAGE[name])


def is_nan(name: str, stored: np.ndarray) -> np.ndarray:
    return np.isnan(bf16_to_float(stored) if name == "bf16" else stored.astype(np.float64))


def special_mismatches(found: np.ndarray, expected: np.ndarray, name: str) -> np.ndarray:
    """Where `found` differs from `expected`: other bits, except that a NaN the model expects may
    be any NaN (the ISA names no payload)."""
    width = f"uint{DTYPES[name].bits}"
    differ = found.view(width) != expected.view(width)
    return differ & ~(is_nan(name, expected) & is_nan(name, found))


@pytest.mark.parametrize("op, dtype", FLOAT_PAIRS, ids=[f"{op}-{dtype}" for op, dtype in FLOAT_PAIRS])
def test_nans_infinities_signed_zeros_and_subnormals_reduce_as_the_model_states(op, dtype, monkeypatch):
    """Every pair of special values (each as destination against each as source) reduced once,
    every element against the model's stated rules (`model.reduce_ops`: adds keep subnormals - the
    H200 kept f32 ones, where the ISA's text for the non-tensor reduce says f32 flushes them;
    min/max drop a NaN and order -0.0 below +0.0). A failure names the first wrong pairs and,
    for an add, which subnormal rule the hardware followed instead."""
    import torch

    from tmakit.model import reduce_ops as model

    values = np.array(special_values(dtype))
    pairs = len(values) ** 2
    dst_values = as_storage(dtype, np.resize(np.repeat(values, len(values)), (64, 256)))
    src_values = as_storage(dtype, np.resize(np.tile(values, len(values)), (64, 256)))
    dst, src = upload(torch, dst_values, dtype, "row"), upload(torch, src_values, dtype, "row")
    tmakit.reduce_into_(dst, src, op)
    torch.cuda.synchronize()
    found = download(torch, dst, dtype)
    expected = reduce_reference(op, dtype, dst_values, src_values)
    wrong = special_mismatches(found, expected, dtype)
    if not wrong.any():
        return
    as_float = bf16_to_float if dtype == "bf16" else (lambda a: a.astype(np.float64))
    firsts = [tuple(int(i) for i in index) for index in np.argwhere(wrong)[:6]]
    listed = "; ".join(
        f"{as_float(dst_values[i])!r} {op} {as_float(src_values[i])!r} gave {as_float(found[i])!r}, "
        f"the model {as_float(expected[i])!r}"
        for i in firsts
    )
    other_rule = ""
    if op == "add":  # would the other subnormal rule have matched?
        stated = model.FLUSHES_SUBNORMALS[dtype]
        monkeypatch.setitem(model.FLUSHES_SUBNORMALS, dtype, not stated)
        other = reduce_reference(op, dtype, dst_values, src_values)
        if not special_mismatches(found, other, dtype).any():
            other_rule = f"; the hardware follows FLUSHES_SUBNORMALS[{dtype!r}] = {not stated} instead"
    pytest.fail(
        f"{op} {dtype}: {int(wrong.sum())} of {wrong.size} elements ({pairs} pairs) wrong: "
        f"{listed}{other_rule}"
    )


RING_CASES = [(dtype, shape, major) for dtype in RING_DTYPES["add"] for shape, major in SHAPES]


@pytest.mark.parametrize(
    "dtype, shape, major", RING_CASES, ids=[f"{d}-{'x'.join(map(str, s))}-{m}" for d, s, m in RING_CASES]
)
def test_the_load_add_store_ring_adds_every_element_as_the_model_and_torch_say(dtype, shape, major):
    """`reduce_by="ring"`: the destination loaded beside the source and added in registers, every
    element's bits against the model and torch."""
    import torch

    dst_values, src_values = position_values("add", dtype, shape, 1), position_values("add", dtype, shape, 2)
    dst, src = upload(torch, dst_values, dtype, major), upload(torch, src_values, dtype, major)
    by_torch = download(torch, torch_reference(torch, "add", dst, src), dtype)
    assert tmakit.add_(dst, src, strict=True, reduce_by="ring") is dst
    assert tmakit.reduce_path(dst, src, strict=True, reduce_by="ring").reason.endswith("load-add-store ring")
    torch.cuda.synchronize()
    found, tile = download(torch, dst, dtype), copy_tile(dtype)
    wrong = first_wrong(found, reduce_reference("add", dtype, dst_values, src_values), dtype, tile)
    assert wrong is None, f"ring {dtype} {shape} {major}-major against the model: {wrong}"
    wrong = first_wrong(found, by_torch, dtype, tile)
    assert wrong is None, f"ring {dtype} {shape} {major}-major against torch: {wrong}"


def test_the_ring_adds_a_window_and_leaves_its_neighbours_and_many_trips_round_it_agree():
    """A window of a poisoned tensor: only the window changes; a tensor of many tiles a block
    (every stage reused many times) is bit-exact against torch, fp32 and bf16."""
    import torch

    base = torch.full((1100, 900), -7.0, device="cuda")
    window = base[37:1037, 64:840]  # 16-byte aligned rows, partial tiles both ways
    src = torch.randn(1000, 776, device="cuda")
    want = base.clone()
    want[37:1037, 64:840] += src
    tmakit.add_(window, src, strict=True, reduce_by="ring")
    torch.cuda.synchronize()
    assert torch.equal(base.view(torch.int32), want.view(torch.int32))
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(8192, 4096, device="cuda").to(dtype)
        y = torch.randn(8192, 4096, device="cuda").to(dtype)
        want = x.clone().add_(y)
        tmakit.add_(x, y, strict=True, reduce_by="ring")
        torch.cuda.synchronize()
        assert torch.equal(x.view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
                           want.view(torch.int16 if dtype == torch.bfloat16 else torch.int32))  # fmt: skip
