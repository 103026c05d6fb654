"""torch's own op for each reduce: the path `reduce_into_` takes for the tensors TMA reduce
stores cannot serve (`api.reduce`), with torch's refusals raised as TmaConfigError naming them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import TorchOpError
from .tensors import import_torch

if TYPE_CHECKING:
    import torch

# torch's own op for each reduce, as its messages name it (`torch_reduce` runs them).
TORCH_OPS: dict[str, str] = {
    "add": "dst.add_(src)",
    "min": "torch.minimum(dst, src, out=dst)",
    "max": "torch.maximum(dst, src, out=dst)",
    "inc": "dst = where(dst >= src, 0, dst + 1) (PTX red.inc, unsigned)",
    "dec": "dst = where(dst == 0 or dst > src, src, dst - 1) (PTX red.dec, unsigned)",
    "and": "dst.bitwise_and_(src)",
    "or": "dst.bitwise_or_(src)",
    "xor": "dst.bitwise_xor_(src)",
}


def torch_reduce(dst: torch.Tensor, src: torch.Tensor, op: str, reason: str) -> None:
    """dst = dst op src by torch (`TORCH_OPS`); a RuntimeError of torch's (NotImplementedError
    included) raised as TmaConfigError naming the op, why torch runs it and torch's message."""
    torch = import_torch("reduce_into_")
    try:
        _TORCH_REDUCES[op](torch, dst, src)
    except RuntimeError as error:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise TorchOpError(
            f"reduce_into_ {op} runs torch's {TORCH_OPS[op]} here ({reason}), and torch refused: {detail}"
        ) from error


def in_place_shape(torch: Any, dst: torch.Tensor, src: torch.Tensor) -> None:
    """An in-place op's rule for an `out=` or composed op: `src` broadcasts to `dst`'s shape
    (torch's own RuntimeError otherwise; an `out=` would resize `dst`)."""
    if torch.broadcast_shapes(dst.shape, src.shape) != dst.shape:
        raise RuntimeError(
            f"output with shape {list(dst.shape)} doesn't match the broadcast shape "
            f"{list(torch.broadcast_shapes(dst.shape, src.shape))}"
        )


def torch_minimum(torch: Any, dst: torch.Tensor, src: torch.Tensor) -> None:
    in_place_shape(torch, dst, src)
    torch.minimum(dst, src, out=dst)


def torch_maximum(torch: Any, dst: torch.Tensor, src: torch.Tensor) -> None:
    in_place_shape(torch, dst, src)
    torch.maximum(dst, src, out=dst)


def wrapping_step(torch: Any, dst: torch.Tensor, src: torch.Tensor, op: str) -> None:
    """PTX's red.inc / red.dec on torch tensors: inc: dst = 0 if dst >= src else dst + 1; dec:
    dst = src if dst == 0 or dst > src else dst - 1, compared as the dtype orders (unsigned for
    the uint types). torch has no comparisons or arithmetic for uint16/32/64 on every device, so
    those run in int64: exact for uint16/32, and uint64's bits with the sign flipped to order."""
    in_place_shape(torch, dst, src)
    if not torch.can_cast(torch.result_type(dst, src), dst.dtype):
        raise RuntimeError(f"result type {torch.result_type(dst, src)} can't be cast to {dst.dtype}")
    src = src.to(dst.dtype)
    if dst.dtype == torch.uint64:
        bits, src_bits = dst.view(torch.int64), src.view(torch.int64)
        sign = torch.iinfo(torch.int64).min  # xor: unsigned order as int64's
        value, order, src_value, src_order = bits, bits ^ sign, src_bits, src_bits ^ sign
        out = bits
    elif dst.dtype in (torch.uint16, torch.uint32):
        value = order = dst.to(torch.int64)
        src_value = src_order = src.to(torch.int64)
        out = dst
    else:
        value, order, src_value, src_order, out = dst, dst, src, src, dst
    if op == "inc":
        result = torch.where(order >= src_order, torch.zeros_like(value), value + 1)
    else:
        result = torch.where((value == 0) | (order > src_order), src_value, value - 1)
    out.copy_(result)


_TORCH_REDUCES: dict[str, Callable[[Any, Any, Any], None]] = {
    "add": lambda torch, dst, src: dst.add_(src),
    "min": torch_minimum,
    "max": torch_maximum,
    "inc": lambda torch, dst, src: wrapping_step(torch, dst, src, "inc"),
    "dec": lambda torch, dst, src: wrapping_step(torch, dst, src, "dec"),
    "and": lambda torch, dst, src: dst.bitwise_and_(src),
    "or": lambda torch, dst, src: dst.bitwise_or_(src),
    "xor": lambda torch, dst, src: dst.bitwise_xor_(src),
}
