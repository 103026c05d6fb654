"""The reductions TMA stores perform: which (op, dtype) pairs the hardware reduces
(`REDUCE_DTYPES`), torch's names for the ops (`REDUCE_OP_ALIASES`) and the PTX type each dtype is
reduced as. Pure Python. Shared by every family that reduces (the TMA reduce stores of
`tmakit.reduce`, the bulk reduce of rows by index in `tmakit.rows`) and by the seed's walkthrough
of a reduce store (`tmakit explain --reduce OP`).

`cp.reduce.async.bulk.tensor` carries no element type: the tensor map's decides, and neither
PTX nor CuTe DSL 4.8.1 checks the pair (f32 max, fp8 add and int8 min all compile). The table
here, the PTX ISA's for that instruction, is the only guard; every other pair is refused before
anything compiles (`check_reduce`).
"""

from __future__ import annotations

from ..config import DTYPES
from ..errors import TmaConfigError
from ..validate import one_of, type_name

# The PTX ISA's element types of cp.reduce.async.bulk.tensor, per reduction, as tmakit's dtypes:
# add u32 s32 u64 f32 f16 bf16 (no s64); min/max u32 s32 u64 s64 f16 bf16 (no f32); inc/dec u32;
# and/or/xor b32 b64 (tmakit's integer types of those widths) - less the signed min and max
# (`SIGNED_ORDER_REFUSED`).
_BITWISE = ("int32", "uint32", "int64", "uint64")
_ORDERED = ("uint32", "uint64", "fp16", "bf16")
# Signed min/max: the ISA lists them, but on the H200 (CuTe DSL 4.8.1's tensor maps) int32 and
# int64 min and max compared as unsigned - a negative and a positive value gave the wrong one - so
# they are refused rather than computed wrong. Why: the instruction takes its type from the tensor
# map, and the DSL's maps of cutlass.Int32/Int64 tensors say U32/U64. Int32 and Uint32 share the
# signless MLIR type i32 (base_dsl/typing.py: `class Int32(..., mlir_type=T.i32)`, and Uint32 the
# same), and the map's format is derived from that type (`get_default_tma_format(i32)` is U32; an
# Int32 tensor's reduce atom prints `tma_format = U32`, an Int64's `U64`). `make_tiled_tma_atom`'s
# `internal_type` goes through the same signless type; only the private IR builder
# (`cute_nvgpu.atom_make_non_exec_tiled_tma_reduce(..., tma_format=TmaDataFormat.S32)`) takes S32.
SIGNED_ORDER_REFUSED = {("min", "int32"), ("min", "int64"), ("max", "int32"), ("max", "int64")}
REDUCE_DTYPES: dict[str, tuple[str, ...]] = {
    "add": ("uint32", "int32", "uint64", "fp32", "fp16", "bf16"),
    "min": _ORDERED,
    "max": _ORDERED,
    "inc": ("uint32",),
    "dec": ("uint32",),
    "and": _BITWISE,
    "or": _BITWISE,
    "xor": _BITWISE,
}
REDUCE_OPS = tuple(REDUCE_DTYPES)
# torch's names for the same reductions (`scatter_reduce`'s and `index_reduce`'s "sum", "amax",
# "amin"), accepted wherever an op is named and read as tmakit's.
REDUCE_OP_ALIASES = {"sum": "add", "amax": "max", "amin": "min"}


def reduce_op(op: object) -> str:
    """`op` as one of `REDUCE_OPS`, torch's names (`REDUCE_OP_ALIASES`) read as tmakit's;
    TmaConfigError naming both otherwise."""
    if isinstance(op, str) and op in REDUCE_OP_ALIASES:  # a numpy string too
        return REDUCE_OP_ALIASES[str(op)]
    aliases = tuple(f"{alias} (= {name})" for alias, name in REDUCE_OP_ALIASES.items())
    try:
        return str(one_of(op, "reduce op", REDUCE_OPS))
    except TmaConfigError as error:
        raise TmaConfigError(f"{error}, or torch's {', '.join(aliases)}") from None


BITWISE_OPS = ("and", "or", "xor")
# The PTX type each dtype is reduced as, for messages (bitwise ops name the width only: `ptx_type`).
PTX_TYPES = {
    "uint32": "u32",
    "int32": "s32",
    "uint64": "u64",
    "int64": "s64",
    "fp32": "f32",
    "fp16": "f16",
    "bf16": "bf16",
}


def ptx_type(op: str, dtype: str) -> str:
    """The PTX ISA's name of the type `op` reduces `dtype` as: .b32/.b64 for bitwise ops."""
    return f"b{DTYPES[dtype].bits}" if op in BITWISE_OPS else PTX_TYPES[dtype]


def reduce_pairs() -> list[tuple[str, str]]:
    """Every (op, dtype) pair a TMA reduce store takes, in the table's order."""
    return [(op, dtype) for op, dtypes in REDUCE_DTYPES.items() for dtype in dtypes]


def check_reduce(op: str, dtype: str) -> None:
    """Refuse an op TMA does not reduce with, or a dtype that op does not take (TmaConfigError
    naming both and the dtypes the op takes)."""
    op = reduce_op(op)
    if not isinstance(dtype, str):
        raise TmaConfigError(f"dtype is {dtype!r} ({type_name(dtype)}); pass a name such as 'fp32'")
    allowed = REDUCE_DTYPES[op]
    if (op, dtype) in SIGNED_ORDER_REFUSED:
        raise TmaConfigError(
            f"reduce op {op!r} with dtype {dtype}: the PTX ISA lists signed {op}, but through CuTe "
            f"DSL 4.8.1's tensor maps the H200 compared {dtype} as unsigned (wrong results), so "
            f"tmakit refuses it; {op} takes {', '.join(allowed)}"
        )
    if dtype not in allowed:
        types = ", ".join(f"{name} (.{ptx_type(op, name)})" for name in allowed)
        hint = ""
        if op == "add" and dtype == "int64":
            hint = "; an int64 add has the bits of a uint64 one: pass dst.view(torch.uint64) and src's"
        raise TmaConfigError(
            f"reduce op {op!r} with dtype {dtype}: a TMA reduce store (cp.reduce.async.bulk.tensor) "
            f"takes {op} on {types} only{hint}"
        )
