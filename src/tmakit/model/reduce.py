"""What a TMA reduce store leaves in each destination element, per op and dtype, as the PTX ISA
defines `cp.reduce.async.bulk(.tensor)`. Pure NumPy: the reference of `tmakit.reduce_into_`.

Arrays hold each dtype's values in its NumPy type; bf16, which NumPy lacks, as its raw uint16
bits. Each element receives exactly one reduction (d = d op s), so:
- integer add wraps modulo 2^width; integer min/max are unsigned (signed ones are refused:
  `plan.reduce.SIGNED_ORDER_REFUSED`);
- inc (u32): d = (d >= s) ? 0 : d + 1; dec (u32): d = (d == 0 || d > s) ? s : d - 1;
- float add is one rounding to nearest even of the exact sum (computed in float64, whose 53 bits
  make the rounding to f32/f16/bf16 after it exact: 53 >= 2p + 2);
- float min/max follow the PTX `min`/`max` instructions' NaN rule (IEEE 754-2008 minNum/maxNum):
  one NaN operand gives the other operand, two give the canonical NaN. The reduce's own text for
  NaNs and for -0.0 against +0.0 was not found here: the model keeps the destination on ties, and
  the GPU tests use neither NaNs nor negative zeros.
"""

from __future__ import annotations

import numpy as np

from ..plan.reduce import check_reduce

# What one reduce store leaves in a destination element d, given the source element s.
ELEMENT_RULES = {
    "add": "d + s (integers wrap modulo 2^width; floats round once, to nearest even)",
    "min": "min(d, s) (unsigned integers; f16/bf16: a NaN loses to a number)",
    "max": "max(d, s) (unsigned integers; f16/bf16: a NaN loses to a number)",
    "inc": "0 if d >= s else d + 1",
    "dec": "s if d == 0 or d > s else d - 1",
    "and": "d & s",
    "or": "d | s",
    "xor": "d ^ s",
}
# NumPy's storage of each dtype a reduce takes (bf16: raw bits).
STORAGE = {
    "int32": np.int32,
    "uint32": np.uint32,
    "int64": np.int64,
    "uint64": np.uint64,
    "fp32": np.float32,
    "fp16": np.float16,
    "bf16": np.uint16,
}
CANONICAL_NAN = {"fp32": np.float32(np.nan), "fp16": np.float16(np.nan), "bf16": np.uint16(0x7FFF)}


def bf16_to_float(bits: np.ndarray) -> np.ndarray:
    """bf16 bits -> float32 values (exact: bf16 is float32's upper half)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def float_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 values -> bf16 bits, rounded to nearest even; NaN to the canonical 0x7FFF."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), CANONICAL_NAN["bf16"], rounded)


def _as_float(dtype: str, array: np.ndarray) -> np.ndarray:
    return bf16_to_float(array) if dtype == "bf16" else np.asarray(array)


def _rounded(dtype: str, exact: np.ndarray) -> np.ndarray:
    """float64 values rounded once to the dtype (bf16 through float32: 24 >= 2 * 8 + 2)."""
    if dtype == "bf16":
        return float_to_bf16(exact.astype(np.float32))
    return exact.astype(STORAGE[dtype])


def reduce_reference(op: str, dtype: str, dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    """The destination after one TMA reduce store of `src` into `dst` with `op` (a new array of
    `dst`'s storage type). TmaConfigError for a pair TMA does not reduce (`plan.check_reduce`)."""
    check_reduce(op, dtype)
    storage = STORAGE[dtype]
    d, s = np.asarray(dst, dtype=storage), np.asarray(src, dtype=storage)
    if op in ("and", "or", "xor"):
        return {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op](d, s)
    if op == "inc":
        return np.where(d >= s, storage(0), d + storage(1)).astype(storage)
    if op == "dec":
        return np.where((d == 0) | (d > s), s, d - storage(1)).astype(storage)
    if dtype in CANONICAL_NAN:
        return _float_reduce(op, dtype, d, s)
    if op == "add":
        with np.errstate(over="ignore"):
            return (d + s).astype(storage)  # NumPy integers wrap modulo 2^width
    return np.minimum(d, s) if op == "min" else np.maximum(d, s)


def _float_reduce(op: str, dtype: str, d: np.ndarray, s: np.ndarray) -> np.ndarray:
    dv, sv = _as_float(dtype, d).astype(np.float64), _as_float(dtype, s).astype(np.float64)
    if op == "add":
        with np.errstate(over="ignore", invalid="ignore"):
            return _rounded(dtype, dv + sv)
    # minNum/maxNum: a NaN loses to a number; two NaNs give the canonical NaN; ties keep `d`.
    take_source = (sv < dv) if op == "min" else (sv > dv)
    take_source |= np.isnan(dv) & ~np.isnan(sv)
    result = np.where(take_source, s, d)
    return np.where(np.isnan(dv) & np.isnan(sv), CANONICAL_NAN[dtype], result).astype(d.dtype)
