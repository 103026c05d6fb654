"""Many tensors, one launch: `copy_many_` (torch's `_foreach_copy_`), `pack` (torch's `cat` of the
flattened tensors, each at a 16-byte-aligned offset) and `unpack_` (torch's `split_with_sizes_copy`
back into the tensors), on the grouped copy (`kernels.many`); `GroupedCopy` prepares any of the
three once for lists that stay put.

A pair of compact tensors of one dtype and shape on one Hopper GPU, both 16-byte aligned, is
chunked into the table the kernel walks (`plan.many`): every such pair of a call in one launch
(`grouped=False` sends them to one `torch._foreach_copy_` instead). Any other pair takes the
drop-in path: `tmakit.copy_` one pair at a time where TMA serves it as laid out or as a view (a
transposing pair), else the `_foreach_copy_`.

A call's route (which pairs go where) and its chunk table, encoded on the host and copied to the
device once, are kept for calls with the same tensors (their addresses, shapes, strides, dtypes
and devices): an optimizer's parameters, a layer's flat buffer. Inside a CUDA-graph capture
nothing is encoded: tensors whose route is kept (an eager call with them came first) are captured
as the grouped kernel, whose table is then kept for the process; others are captured as torch's
`_foreach_copy_`, so a replay never reads a host buffer since rewritten.

Reading those facts of every tensor costs the host about a microsecond a pair, more than torch's
own loop in C++; a `GroupedCopy` reads only each tensor's address per call.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING

from ..errors import TmaConfigError
from ..plan.many import ManyPlan, aligned_pair, pack_offsets, pairs_disjoint
from ..runtime.launch import many_launcher
from ..validate import flag
from .copy import copy_, copy_path
from .tensors import check_torch_tensor, cuda_index, device_facts, import_torch, recorded_by_autograd

if TYPE_CHECKING:
    import torch

__all__ = ["GroupedCopy", "copy_many_", "pack", "unpack_"]

_ROUTES: OrderedDict[tuple, _Route] = OrderedDict()  # a call's signature -> its route
_ROUTES_KEPT = 64
_CAPTURED: dict[int, object] = {}  # tables a captured graph reads: kept for the process
_SHAPE, _DTYPE, _DEVICE, _GRAD = (attrgetter(name) for name in ("shape", "dtype", "device", "requires_grad"))


def copy_many_(dsts: Sequence[torch.Tensor], srcs: Sequence[torch.Tensor], *, grouped: bool = True) -> None:
    """Copy each `srcs[i]` into `dsts[i]`: every compact aligned pair in one launch.

    Args:
        dsts: the destinations, torch tensors.
        srcs: the sources, one per destination, each of its destination's shape (a dtype change
            or a broadcast takes torch's `_foreach_copy_`, which does both).
        grouped: run the compact aligned pairs on the grouped TMA kernel; False sends them to
            torch's `_foreach_copy_`.

    Returns:
        None: the destinations are written.

    Raises:
        TmaConfigError: lists of different lengths, an entry that is not a tensor, or a pair
            torch's `copy_` refuses.
    """
    torch = import_torch("copy_many_")
    dsts, srcs = _tensor_list(dsts, "copy_many_", "dsts"), _tensor_list(srcs, "copy_many_", "srcs")
    grouped = flag(grouped, "copy_many_'s grouped")
    if len(dsts) != len(srcs):
        raise TmaConfigError(f"copy_many_ got {len(dsts)} destinations and {len(srcs)} sources; one each")
    key = _signature(torch, dsts, srcs, grouped)
    route = _ROUTES.get(key) if key is not None else None
    if route is None:
        route = _Route(torch, dsts, srcs, grouped, "copy_many_")
        if key is not None and route.complete:
            _ROUTES[key] = route
            if len(_ROUTES) > _ROUTES_KEPT:
                _ROUTES.popitem(last=False)
    else:
        try:
            _ROUTES.move_to_end(key)
        except KeyError:  # evicted by another thread meanwhile
            pass
    route.run(torch, dsts, srcs)


def pack(
    tensors: Sequence[torch.Tensor], out: torch.Tensor | None = None, *, grouped: bool = True
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
    flat, offsets, spans, sources = _pack_pairs(torch, tensors, out)
    copy_many_(spans, sources, grouped=grouped)
    return flat, offsets


def unpack_(flat: torch.Tensor, tensors: Sequence[torch.Tensor], *, grouped: bool = True) -> None:
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
    dsts, srcs = _unpack_pairs(torch, flat, tensors)
    copy_many_(dsts, srcs, grouped=grouped)


class GroupedCopy:
    """`copy_many_` of fixed lists, prepared once: each call launches it, the host reading only
    where each tensor is and, with grad mode on, which tensors require grad. It keeps its tensors
    alive. A tensor whose storage moves is refused; one changed in place to another shape or
    layout at the same address (`resize_`, `t_()`, `as_strided_`) is not seen, and the call would
    copy the bytes it was prepared with: prepare again after such a change. `GroupedCopy.packing`
    and `GroupedCopy.unpacking` prepare `pack` and `unpack_` the same way.

    Args:
        dsts, srcs: as `copy_many_`'s.
        grouped: as `copy_many_`'s.
        check_addresses: read each tensor's address (and, with grad mode on, `requires_grad`)
            per call; False reads neither, a CUDA graph's contract: the tensors stay as prepared
            (what is left per pair is bumping the destinations' version counters).

    Raises:
        TmaConfigError: as `copy_many_`'s, or prepared inside a CUDA-graph capture (prepare it
            before; a call inside a capture is captured as its grouped kernel).
    """

    flat: torch.Tensor | None = None
    offsets: list[int] | None = None

    def __init__(
        self,
        dsts: Sequence[torch.Tensor],
        srcs: Sequence[torch.Tensor],
        *,
        grouped: bool = True,
        check_addresses: bool = True,
    ) -> None:
        torch = import_torch("GroupedCopy")
        self._check = flag(check_addresses, "GroupedCopy's check_addresses")
        dsts, srcs = _tensor_list(dsts, "GroupedCopy", "dsts"), _tensor_list(srcs, "GroupedCopy", "srcs")
        grouped = flag(grouped, "GroupedCopy's grouped")
        if len(dsts) != len(srcs):
            raise TmaConfigError(
                f"GroupedCopy got {len(dsts)} destinations and {len(srcs)} sources; one each"
            )
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise TmaConfigError(
                "GroupedCopy is prepared inside a CUDA-graph capture, where no table can be encoded: "
                "prepare it before the capture and call it inside"
            )
        self._dsts, self._srcs, self._grouped = dsts, srcs, grouped
        self._route = _Route(torch, dsts, srcs, grouped, "GroupedCopy")
        names = [f"dsts[{i}]" for i in range(len(dsts))] + [f"srcs[{i}]" for i in range(len(srcs))]
        self._watch(torch, dsts + srcs, names, lambda: (dsts, srcs))

    def _watch(self, torch, tensors: list, names: list[str], pairs) -> None:
        """What each call reads: the caller's `tensors` (named `names`; the pairs may be views of
        them), and `pairs()`, the pairs made from them again when the route must change."""
        self._tensors, self._names, self._pairs = tensors, names, pairs
        self._addresses = tuple(map(torch.Tensor.data_ptr, tensors))
        self._grads = tuple(map(_GRAD, tensors)) if any(map(_GRAD, tensors)) else False
        self._routes = {_recorded(torch, tensors): self._route}  # by what autograd records

    @classmethod
    def packing(
        cls,
        tensors: Sequence[torch.Tensor],
        out: torch.Tensor | None = None,
        *,
        grouped: bool = True,
        check_addresses: bool = True,
    ) -> GroupedCopy:
        """`pack(tensors, out)` prepared: each call writes the buffer `.flat` at `.offsets`.

        Args:
            tensors, out, grouped: as `pack`'s.
            check_addresses: as `GroupedCopy`'s.

        Returns:
            the prepared copy, its buffer and offsets as attributes `flat` and `offsets`.

        Raises:
            TmaConfigError: as `pack`'s.
        """
        torch = import_torch("GroupedCopy")
        flat, offsets, spans, sources = _pack_pairs(torch, tensors, out)
        prepared = cls(spans, sources, grouped=grouped, check_addresses=check_addresses)
        names = ["the buffer"] + [f"tensors[{i}]" for i in range(len(sources))]
        prepared._watch(torch, [flat, *sources], names, lambda: _pack_pairs(torch, sources, flat)[2:])
        prepared.flat, prepared.offsets = flat, offsets
        return prepared

    @classmethod
    def unpacking(
        cls,
        flat: torch.Tensor,
        tensors: Sequence[torch.Tensor],
        *,
        grouped: bool = True,
        check_addresses: bool = True,
    ) -> GroupedCopy:
        """`unpack_(flat, tensors)` prepared.

        Args:
            flat, tensors, grouped: as `unpack_`'s.
            check_addresses: as `GroupedCopy`'s.

        Returns:
            the prepared copy.

        Raises:
            TmaConfigError: as `unpack_`'s.
        """
        torch = import_torch("GroupedCopy")
        dsts, srcs = _unpack_pairs(torch, flat, tensors)
        prepared = cls(dsts, srcs, grouped=grouped, check_addresses=check_addresses)
        tensors = _tensor_list(tensors, "unpack_", "tensors")
        names = ["the buffer"] + [f"tensors[{i}]" for i in range(len(tensors))]
        prepared._watch(torch, [flat, *tensors], names, lambda: _unpack_pairs(torch, flat, tensors))
        prepared.flat = flat
        return prepared

    def __call__(self) -> None:
        """Copy every pair as prepared.

        Raises:
            TmaConfigError: a tensor no longer where it was prepared (its storage resized or
                swapped): prepare again.
        """
        torch = import_torch("GroupedCopy")
        if self._check and tuple(map(torch.Tensor.data_ptr, self._tensors)) != self._addresses:
            moved = next(
                i
                for i, (t, a) in enumerate(zip(self._tensors, self._addresses, strict=True))
                if t.data_ptr() != a
            )
            raise TmaConfigError(
                f"GroupedCopy: {self._names[moved]} moved from address {self._addresses[moved]:#x} to "
                f"{self._tensors[moved].data_ptr():#x} since it was prepared (its storage resized or "
                "swapped); prepare a GroupedCopy of the tensors as they are now"
            )
        if self._check:
            recorded = _recorded(torch, self._tensors)
        else:  # requires_grad as prepared: only the grad mode is read
            recorded = torch.is_grad_enabled() and self._grads
        route = self._routes.get(recorded)
        if route is None:  # grad mode or requires_grad changed since: paired and routed afresh
            self._dsts, self._srcs = self._pairs()
            route = _Route(torch, self._dsts, self._srcs, self._grouped, "GroupedCopy")
            if route.complete:
                self._routes[recorded] = route
        self._route = route
        route.run(torch, self._dsts, self._srcs)


# -- routes ---------------------------------------------------------------------------------------------
class _Route:
    """Where each pair of a list goes, by its index: each device's grouped launch (with its chunk
    table on the device), the pairs `copy_` serves one at a time, the rest in one
    `_foreach_copy_`. Holds no tensor, so a kept route keeps no memory of the caller's alive."""

    def __init__(self, torch, dsts: list, srcs: list, grouped: bool, what: str) -> None:
        together, self.one_by_one, self.rest = [], [], []
        for i, (dst, src) in enumerate(zip(dsts, srcs, strict=True)):
            check_torch_tensor(dst, what, f"dsts[{i}]")
            check_torch_tensor(src, what, f"srcs[{i}]")
            if _groupable(dst, src):
                together.append(i)
            elif dst.shape == src.shape and dst.dtype == src.dtype and copy_path(dst, src).by_tma:
                self.one_by_one.append(i)
            else:
                self.rest.append(i)
        self.complete = True  # False: a table could not be encoded (a capture), so not to be kept
        self.launches: list[tuple[object, object, list[int]]] = []  # (device, table, pairs)
        self.in_order: list[tuple[int, bool]] | None = None  # (pair, by copy_) when an order matters
        if not _apart(dsts, srcs):  # pairs share bytes: one at a time, in the list's order
            by_tma = set(together + self.one_by_one)
            self.in_order = [(i, i in by_tma) for i in range(len(dsts))]
            return
        if not grouped:
            self.rest = sorted(self.rest + together)
            return
        itself = [i for i in together if srcs[i].data_ptr() == dsts[i].data_ptr()]  # onto itself
        together = [i for i in together if srcs[i].data_ptr() != dsts[i].data_ptr()]
        self.rest = sorted(self.rest + itself)
        for device in dict.fromkeys(dsts[i].device for i in together):  # one launch per device
            pairs = [i for i in together if dsts[i].device == device]
            with torch.cuda.device(device):
                if torch.cuda.is_current_stream_capturing():  # a replay would read a rewritten buffer
                    self.complete, self.rest = False, sorted(self.rest + pairs)
                    continue
            nbytes = [_nbytes(dsts[i]) for i in pairs]
            if any(nbytes):
                src, dst = [srcs[i].data_ptr() for i in pairs], [dsts[i].data_ptr() for i in pairs]
                self.launches.append((device, _encode(torch, device, src, dst, nbytes), pairs))

    def run(self, torch, dsts: list, srcs: list) -> None:
        if self.in_order is not None:
            for i, by_tma in self.in_order:
                copy_(dsts[i], srcs[i]) if by_tma else _torch_copy(dsts, srcs, i)
            return
        for device, table, pairs in self.launches:
            with torch.cuda.device(device):  # the pairs' GPU: its stream is the one captured and launched on
                if torch.cuda.is_current_stream_capturing():  # a graph's replays read this table
                    _CAPTURED[id(table)] = table
                table.record_stream(torch.cuda.current_stream(device))  # freed only after this stream's use
                many_launcher(_plan(device.index), str(device))(table)
            torch.autograd.graph.increment_version([dsts[i] for i in pairs])
        for i in self.one_by_one:
            copy_(dsts[i], srcs[i])
        if self.rest:
            try:
                torch._foreach_copy_([dsts[i] for i in self.rest], [srcs[i] for i in self.rest])
            except (RuntimeError, TypeError, ValueError):  # e.g. complex32, which copy_ takes
                for i in self.rest:  # the pairs share no bytes: copying one again changes nothing
                    _torch_copy(dsts, srcs, i)


def _torch_copy(dsts: list, srcs: list, i: int) -> None:
    try:
        dsts[i].copy_(srcs[i])
    except (RuntimeError, TypeError, ValueError) as error:
        raise TmaConfigError(
            f"dsts[{i}] {tuple(dsts[i].shape)} {dsts[i].dtype} <- srcs[{i}] {tuple(srcs[i].shape)} "
            f"{srcs[i].dtype}: torch's copy_ refuses the pair no bulk copy serves ({error}); pass "
            "tensors copy_ takes"
        ) from None


def _apart(dsts: list, srcs: list) -> bool:
    """Whether the pairs share no bytes but a pair's own source, so any order gives the list's."""
    if len(dsts) < 2 and not (dsts and dsts[0].data_ptr() != srcs[0].data_ptr()):
        return True
    src, src_bytes = zip(*map(_span, srcs), strict=True)
    dst, dst_bytes = zip(*map(_span, dsts), strict=True)
    return pairs_disjoint(src, dst, src_bytes, dst_bytes)


def _span(tensor: torch.Tensor) -> tuple[int, int]:
    """(the first byte's address, the bytes) of the memory a tensor's elements lie in."""
    if not tensor.numel():
        return tensor.data_ptr(), 0
    last = sum((extent - 1) * stride for extent, stride in zip(tensor.shape, tensor.stride(), strict=True))
    return tensor.data_ptr(), (last + 1) * tensor.element_size()


def _signature(torch, dsts: list, srcs: list, grouped: bool) -> tuple | None:
    """What a call's route depends on, read from every tensor at once; None for entries that are
    not plain tensors (the checks then name them)."""
    tensors = dsts + srcs
    try:
        lazy = any(map(torch.Tensor.is_neg, tensors)) or any(map(torch.Tensor.is_conj, tensors))
        return (
            grouped,
            _recorded(torch, tensors),
            lazy and (tuple(map(torch.Tensor.is_neg, tensors)), tuple(map(torch.Tensor.is_conj, tensors))),
            tuple(map(torch.Tensor.data_ptr, tensors)),
            tuple(map(_SHAPE, tensors)),
            tuple(map(torch.Tensor.stride, tensors)),
            tuple(map(_DTYPE, tensors)),
            tuple(map(_DEVICE, tensors)),
        )
    except (TypeError, RuntimeError, AttributeError, NotImplementedError):  # the checks name what
        return None


def _recorded(torch, tensors: list) -> tuple | bool:
    """Which tensors autograd records a call on (grad mode on and requiring grad); False for none,
    read from the grad mode alone under torch.no_grad()."""
    if not torch.is_grad_enabled():
        return False
    grads = tuple(map(_GRAD, tensors))
    return any(grads) and grads


def _encode(torch, device, src: Sequence[int], dst: Sequence[int], nbytes: Sequence[int]) -> torch.Tensor:
    """The chunk table of the pairs (addresses, bytes) on the device, landed before any stream's
    kernel can read it."""
    host = _plan(device.index).chunk_table(src, dst, nbytes)
    pinned = torch.empty(host.shape, dtype=torch.int64, pin_memory=True)
    pinned.numpy()[:] = host
    return pinned.to(device)


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


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


def _pack_pairs(torch, tensors, out):
    """(the buffer, the offsets, each tensor's span of it viewed as the tensor, the tensors):
    `pack`'s pairs, each tensor copied from where it is (no flattened copy made first)."""
    tensors = _tensor_list(tensors, "pack", "tensors")
    flat, (offsets, spans) = _flat_views(torch, tensors, out, "pack")
    views = [_as(span, t.dtype, "pack").view(t.shape) for span, t in zip(spans, tensors, strict=True)]
    return flat, offsets, views, tensors


def _unpack_pairs(torch, flat, tensors) -> tuple[list, list]:
    """(destinations, sources): `unpack_`'s pairs, each tensor and its span of the buffer."""
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
    return dsts, srcs


def _as(tensor: torch.Tensor, dtype: torch.dtype, what: str) -> torch.Tensor:
    """`tensor` itself when of `dtype`, else its bytes viewed as `dtype`: what a packed buffer of
    mixed dtypes (uint8) moves. Tensors autograd records or with a lazily applied bit have no such
    view: they need a buffer of their own dtype."""
    if tensor.dtype == dtype:
        return tensor
    why = (
        "requires grad (grad mode on)" if recorded_by_autograd(tensor)
        else "is a conjugate view" if tensor.is_conj()
        else "is a negative view" if tensor.is_neg()
        else None
    )  # fmt: skip
    if why:
        raise TmaConfigError(
            f"{what}: a {tuple(tensor.shape)} {tensor.dtype} tensor {why} and cannot move as the bytes "
            "of a mixed-dtype buffer: pack tensors of one dtype, or .detach() / .resolve_conj() / "
            ".resolve_neg() it first"
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
