"""What a TMA reduce store leaves in each destination element, per op and dtype, as the PTX ISA
defines `cp.reduce.async.bulk(.tensor)`. Pure NumPy: the reference of `tmakit.reduce_into_`.

Arrays hold each dtype's values in its NumPy type; bf16, which NumPy lacks, as its raw uint16
bits. Shared by the families that reduce (reduce stores, the bulk reduce of rows by index) and the
seed's walkthrough (`ELEMENT_RULES`). Each element receives exactly one reduction (d = d op s), so:
- integer add wraps modulo 2^width; integer min/max are unsigned (signed ones are refused:
  `plan.reduce_ops.SIGNED_ORDER_REFUSED`);
- inc (u32): d = (d >= s) ? 0 : d + 1; dec (u32): d = (d == 0 || d > s) ? s : d - 1;
- float add is one rounding to nearest even of the exact sum (computed in float64, whose 53 bits
  make the rounding to f32/f16/bf16 after it exact: 53 >= 2p + 2);
- subnormals (`FLUSHES_SUBNORMALS`): no reduce add flushes them - every subnormal input and
  result is kept, as IEEE 754 has it. Seen on the H200 (tests/test_gpu_reduce.py):
  f32 adds of subnormals came out exact. The PTX ISA's text for the non-tensor reduce says
  otherwise for f32 ("the current implementation of cp.reduce.async.bulk.add.f32 flushes subnormal
  inputs and results to sign-preserving zero"; its f16/bf16 adds are `.noftz`); the tensor form's
  text names no rule and takes its type from the tensor map, which CuTe DSL 4.8.1 encodes as plain
  f32 (`F32_RN`, not `F32_FTZ_RN`);
- float min/max follow the PTX `min`/`max` instructions (without `.NaN`), as the ISA says `atom`
  and `red` do (the reduce's own text is silent): a NaN operand gives the other operand
  (IEEE 754-2008 minNum/maxNum), two NaNs give the canonical NaN, +0.0 > -0.0, and f16/bf16
  subnormals compare as they are. (torch's minimum/maximum propagate a NaN instead.)
- a NaN result of an add is a NaN (the model gives the canonical one; the ISA does not name the
  payload, so the GPU tests compare NaN-ness there); inf + -inf is a NaN, an overflow an inf.
"""

from __future__ import annotations

import numpy as np

from ..plan.reduce_ops import check_reduce

# What one reduce store leaves in a destination element d, given the source element s.
ELEMENT_RULES = {
    "add": "d + s (integers wrap modulo 2^width; floats round once, to nearest even, subnormals kept)",
    "min": "min(d, s) (unsigned integers; f16/bf16: a NaN loses to a number, -0.0 < +0.0)",
    "max": "max(d, s) (unsigned integers; f16/bf16: a NaN loses to a number, -0.0 < +0.0)",
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
# Whether a reduce add of the dtype flushes subnormal inputs and results to sign-preserving zero:
# none does on the H200 through CuTe DSL's tensor maps (the module's docstring: the ISA's text for
# the non-tensor f32 reduce says it flushes).
FLUSHES_SUBNORMALS = {"fp32": False, "fp16": False, "bf16": False}
# The smallest normal magnitude of each float dtype: below it, a nonzero value is subnormal.
SMALLEST_NORMAL = {"fp32": 2.0**-126, "fp16": 2.0**-14, "bf16": 2.0**-126}


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


def flush_subnormals(dtype: str, values: np.ndarray) -> np.ndarray:
    """float64 values with those that are subnormal in `dtype` replaced by a zero of their sign."""
    subnormal = (values != 0) & (np.abs(values) < SMALLEST_NORMAL[dtype])
    return np.where(subnormal, np.copysign(0.0, values), values)


def _float_reduce(op: str, dtype: str, d: np.ndarray, s: np.ndarray) -> np.ndarray:
    dv, sv = _as_float(dtype, d).astype(np.float64), _as_float(dtype, s).astype(np.float64)
    if op == "add":
        flush = FLUSHES_SUBNORMALS[dtype]
        if flush:
            dv, sv = flush_subnormals(dtype, dv), flush_subnormals(dtype, sv)
        with np.errstate(over="ignore", invalid="ignore"):
            result = _rounded(dtype, dv + sv)
        if flush:  # the rounded result, flushed (the ISA: "inputs and results")
            result = _rounded(dtype, flush_subnormals(dtype, _as_float(dtype, result).astype(np.float64)))
        return result
    # minNum/maxNum: a NaN loses to a number; two NaNs give the canonical NaN; +0.0 > -0.0; ties
    # of equal values keep `d` (the same bits).
    both_zero = (dv == 0) & (sv == 0)
    source_negative = np.signbit(sv) & ~np.signbit(dv)
    if op == "min":
        take_source = (sv < dv) | (both_zero & source_negative)
    else:
        take_source = (sv > dv) | (both_zero & np.signbit(dv) & ~np.signbit(sv))
    take_source |= np.isnan(dv) & ~np.isnan(sv)
    result = np.where(take_source, s, d)
    return np.where(np.isnan(dv) & np.isnan(sv), CANONICAL_NAN[dtype], result).astype(d.dtype)
