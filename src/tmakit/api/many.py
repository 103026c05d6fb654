"""Many tensors, one launch: `copy_many_` (torch's `_foreach_copy_`), `pack` (torch's `cat` of the
flattened tensors, each at a 16-byte-aligned offset) and `unpack_` (torch's `split_with_sizes_copy`
back into the tensors), on the grouped copy (`kernels.many`).

With `grouped=True`, a pair of compact tensors of one dtype and shape on one Hopper GPU, both
16-byte aligned, is chunked into the table the kernel walks (`plan.many`): every such pair of a
call in one launch. The grouped kernel compiles for sm_90a and its table is checked on the CPU,
but its GPU tests have not completed, so it is opt-in: by default those pairs take one
`torch._foreach_copy_`. Any other pair takes the drop-in path: `tmakit.copy_` one pair at a time
where TMA serves it as laid out or as a view (a transposing pair), else the `_foreach_copy_`.

The chunk table is encoded on the host and copied to the device once per set of tensors (their
addresses and sizes), then kept for calls with the same tensors (an optimizer's parameters, a
layer's flat buffer). Inside a CUDA-graph capture nothing is encoded: tensors whose table is kept
(an eager call with them came first) are captured as the grouped kernel, whose table is then
kept for the process; others are captured as torch's `_foreach_copy_`, so a replay never reads a
host buffer since rewritten.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import TmaConfigError
from ..plan.many import ManyPlan, aligned_pair, pack_offsets
from ..runtime.launch import many_launcher
from ..validate import flag
from .copy import copy_, copy_path
from .tensors import check_torch_tensor, cuda_index, device_facts, import_torch, recorded_by_autograd

if TYPE_CHECKING:
    import torch

__all__ = ["copy_many_", "pack", "unpack_"]

_TABLES: OrderedDict[tuple, object] = OrderedDict()  # (addresses, sizes, device) -> device table
_TABLES_KEPT = 64
_CAPTURED: dict[tuple, object] = {}  # tables a captured graph reads: kept for the process


def copy_many_(dsts: Sequence[torch.Tensor], srcs: Sequence[torch.Tensor], *, grouped: bool = False) -> None:
    """Copy each `srcs[i]` into `dsts[i]`; with `grouped`, every compact aligned pair in one launch.

    Args:
        dsts: the destinations, torch tensors.
        srcs: the sources, one per destination, each of its destination's shape (a dtype change
            or a broadcast takes torch's `_foreach_copy_`, which does both).
        grouped: run the compact aligned pairs on the grouped TMA kernel (its GPU tests not yet passed;
            without it they take torch's `_foreach_copy_`).

    Returns:
        None: the destinations are written.

    Raises:
        TmaConfigError: lists of different lengths, an entry that is not a tensor, or a pair
            torch's `_foreach_copy_` refuses.
    """
    torch = import_torch("copy_many_")
    dsts, srcs = _tensor_list(dsts, "copy_many_", "dsts"), _tensor_list(srcs, "copy_many_", "srcs")
    grouped = flag(grouped, "copy_many_'s grouped")
    if len(dsts) != len(srcs):
        raise TmaConfigError(f"copy_many_ got {len(dsts)} destinations and {len(srcs)} sources; one each")
    together, one_by_one, rest = [], [], []
    for i, (dst, src) in enumerate(zip(dsts, srcs, strict=True)):
        check_torch_tensor(dst, "copy_many_", f"dsts[{i}]")
        check_torch_tensor(src, "copy_many_", f"srcs[{i}]")
        if _groupable(dst, src):
            together.append((dst, src))
        elif dst.shape == src.shape and dst.dtype == src.dtype and copy_path(dst, src).by_tma:
            one_by_one.append((dst, src))
        else:
            rest.append((dst, src))
    if together and grouped:
        _grouped_copy(together)
    elif together:
        rest += together
    for dst, src in one_by_one:
        copy_(dst, src)
    if rest:
        try:
            torch._foreach_copy_([d for d, _ in rest], [s for _, s in rest])
        except (RuntimeError, TypeError, ValueError) as error:
            raise TmaConfigError(
                f"torch's _foreach_copy_ refused the pairs no bulk copy serves: {error}"
            ) from None


def pack(
    tensors: Sequence[torch.Tensor], out: torch.Tensor | None = None, *, grouped: bool = False
) -> tuple[torch.Tensor, list[int]]:
    """Every tensor, flattened, into one 1-D buffer, each at a 16-byte-aligned offset.

    Args:
        tensors: torch tensors on one device (empty ones included).
        out: the buffer, 1-D and compact, of the tensors' dtype when they share one (else uint8,
            the offsets then in bytes), at least as long as `pack_offsets` says; allocated when None
            (the bytes between spans then zeros).
        grouped: as `copy_many_`'s.

    Returns:
        (the buffer, the offset of each tensor in it, in the buffer's elements).

    Raises:
        TmaConfigError: an entry that is not a tensor, tensors on different devices, an `out`
            too short or of another dtype.
    """
    torch = import_torch("pack")
    tensors = _tensor_list(tensors, "pack", "tensors")
    flat, (offsets, spans) = _flat_views(torch, tensors, out, "pack")
    sources = [_as(t.reshape(-1), flat.dtype, "pack") for t in tensors]
    copy_many_(spans, sources, grouped=grouped)
    return flat, offsets


def unpack_(flat: torch.Tensor, tensors: Sequence[torch.Tensor], *, grouped: bool = False) -> None:
    """Copy each tensor's span of a buffer `pack` wrote back into the tensor.

    Args:
        flat: the packed buffer.
        tensors: the tensors, in `pack`'s order; each gets its span, reshaped to its shape.
        grouped: as `copy_many_`'s.

    Returns:
        None: the tensors are written.

    Raises:
        TmaConfigError: as `pack`.
    """
    torch = import_torch("unpack_")
    if flat is None:
        raise TmaConfigError("unpack_ takes the buffer pack wrote as flat; got None")
    tensors = _tensor_list(tensors, "unpack_", "tensors")
    flat, (_, views) = _flat_views(torch, tensors, flat, "unpack_")
    dsts, srcs = [], []
    for span, tensor in zip(views, tensors, strict=True):
        if tensor.is_contiguous() and tensor.dtype == flat.dtype:
            dsts.append(tensor.view(-1))
            srcs.append(span)
        elif tensor.is_contiguous():  # its bytes, as the buffer's elements
            dsts.append(_as(tensor.view(-1), flat.dtype, "unpack_"))
            srcs.append(span)
        else:  # the span as the tensor's shape, copied into its layout
            dsts.append(tensor)
            srcs.append(_as(span, tensor.dtype, "unpack_").view(tensor.shape))
    copy_many_(dsts, srcs, grouped=grouped)


def _as(tensor: torch.Tensor, dtype: torch.dtype, what: str) -> torch.Tensor:
    """`tensor` itself when of `dtype`, else its bytes viewed as `dtype`: what a packed buffer of
    mixed dtypes (uint8) moves. Tensors autograd records or with a lazily applied bit have no such
    view: they need a buffer of their own dtype."""
    if tensor.dtype == dtype:
        return tensor
    if recorded_by_autograd(tensor) or tensor.is_conj() or tensor.is_neg():
        raise TmaConfigError(
            f"{what}: a {tensor.dtype} tensor that requires grad, or a conjugate or negative view, "
            "cannot move as the bytes of a mixed-dtype buffer: pack tensors of one dtype (or "
            ".detach() / .resolve_conj() / .resolve_neg() first)"
        )
    try:
        return tensor.view(dtype)
    except RuntimeError as error:
        raise TmaConfigError(
            f"{what}: the {tensor.dtype} tensor cannot be viewed as {dtype}: {error}"
        ) from None


def _tensor_list(value: object, what: str, name: str) -> list:
    if not isinstance(value, (list, tuple)):
        raise TmaConfigError(
            f"{what}'s {name} is {type(value).__name__}; it takes a list (or tuple) of tensors"
            + ("; for one pair use tmakit.copy_" if what == "copy_many_" else "")
        )
    return list(value)


# -- the grouped copy ---------------------------------------------------------------------------------
def _groupable(dst: torch.Tensor, src: torch.Tensor) -> bool:
    return (
        dst.is_cuda
        and dst.device == src.device
        and dst.dtype == src.dtype
        and dst.shape == src.shape
        and dst.is_contiguous()
        and src.is_contiguous()
        and not recorded_by_autograd(dst, src)
        and not (dst.is_conj() or src.is_conj() or dst.is_neg() or src.is_neg())
        and aligned_pair(src.data_ptr(), dst.data_ptr())
        and cuda_index(dst) >= 0
    )


def _grouped_copy(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    torch = import_torch("copy_many_")
    device = pairs[0][0].device
    for dst, _ in pairs:
        if dst.device != device:  # one launch per device
            same = [pair for pair in pairs if pair[0].device == device]
            _grouped_copy(same)
            _grouped_copy([pair for pair in pairs if pair[0].device != device])
            return
    src = [s.data_ptr() for _, s in pairs]
    dst = [d.data_ptr() for d, _ in pairs]
    nbytes = [d.numel() * d.element_size() for d, _ in pairs]
    if not any(nbytes):
        return
    with torch.cuda.device(device):  # the pairs' GPU: its stream is the one captured and launched on
        _grouped_launch(torch, pairs, src, dst, nbytes, device)


def _grouped_launch(torch, pairs: list, src: list, dst: list, nbytes: list, device) -> None:
    key = (tuple(src), tuple(dst), tuple(nbytes), device.index)
    capturing = torch.cuda.is_current_stream_capturing()
    table = _CAPTURED.get(key)
    if table is None:
        table = _TABLES.get(key)
    if table is None and capturing:
        # A table encoded now would be read at each replay from a host buffer since rewritten:
        # torch's copies are captured instead (an eager call with the same tensors first keeps
        # the table, and the capture then records the grouped kernel).
        torch._foreach_copy_([d for d, _ in pairs], [s for _, s in pairs])
        return
    if table is None:
        host = _plan(device.index).chunk_table(src, dst, nbytes)
        pinned = torch.empty(host.shape, dtype=torch.int64, pin_memory=True)
        pinned.numpy()[:] = host
        table = pinned.to(device)  # landed before any stream's kernel can read it
        _TABLES[key] = table
        if len(_TABLES) > _TABLES_KEPT:
            _TABLES.popitem(last=False)
    elif key in _TABLES:
        _TABLES.move_to_end(key)
    if capturing:  # a graph's replays read this table: never evicted
        _CAPTURED[key] = table
    table.record_stream(torch.cuda.current_stream(device))  # freed only after this stream's use
    many_launcher(_plan(device.index), str(device))(table)
    torch.autograd.graph.increment_version([d for d, _ in pairs])


@functools.cache
def _plan(device: int) -> ManyPlan:
    sm_count, _ = device_facts(import_torch("copy_many_").device("cuda", device))
    return ManyPlan(sm_count=sm_count)


def _flat_views(torch, tensors, flat, what: str):
    """(offsets in the buffer's elements, each tensor's span as a 1-D view), and the buffer."""
    tensors = _tensor_list(tensors, what, "tensors")
    for i, tensor in enumerate(tensors):
        check_torch_tensor(tensor, what, f"tensors[{i}]")
    if not tensors:
        raise TmaConfigError(f"{what} got no tensors")
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise TmaConfigError(f"{what}'s tensors are on {sorted(map(str, devices))}; one device")
    dtypes = {t.dtype for t in tensors}
    dtype = dtypes.pop() if len(dtypes) == 1 else torch.uint8
    element = torch.empty(0, dtype=dtype).element_size()
    offsets, total = pack_offsets([t.numel() * t.element_size() for t in tensors])
    if any(offset % element for offset in offsets):  # an element wider than 16 bytes
        raise TmaConfigError(f"{what}: {dtype} elements do not fall on 16-byte offsets")
    length = -(-total // element)
    device = next(iter(devices))
    if flat is None:  # the bytes between spans zeroed, so a packed buffer is the same each time
        ends = [offset + t.numel() * t.element_size() for offset, t in zip(offsets, tensors, strict=True)]
        padded = ends[:-1] != offsets[1:] or total != length * element
        flat = (torch.zeros if padded else torch.empty)(length, dtype=dtype, device=device)
    check_torch_tensor(flat, what, "the buffer")
    if flat.dim() != 1 or not flat.is_contiguous() or flat.dtype != dtype or flat.numel() < length:
        raise TmaConfigError(
            f"{what}'s buffer is {tuple(flat.shape)} {flat.dtype}; it must be a compact 1-D {dtype} "
            f"tensor of at least {length} elements"
        )
    if flat.device != device:
        raise TmaConfigError(f"{what}'s buffer is on {flat.device}, the tensors on {device}")
    starts = [offset // element for offset in offsets]
    sizes = [t.numel() * t.element_size() // element for t in tensors]
    return flat, (starts, [flat[s : s + n] for s, n in zip(starts, sizes, strict=True)])
