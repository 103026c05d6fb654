"""`pack` and `unpack_` of lists that come back (a layer's parameters packed each step): the
tensors' table kept with the buffer's side of every chunk as offsets into the buffer
(`many.kernel`'s relative side), so a call allocates its buffer, or checks the one given, and
launches; no view of the buffer per tensor, no table per buffer. A kept table is found by the
tensors' addresses and checked by their layouts, as `copy_many_`'s routes are; lists it does not
serve (mixed dtypes, strided or unaligned tensors, autograd recording, a capture before any eager
call) take `pack`'s and `unpack_`'s pairs through `copy_many_`."""

from __future__ import annotations

import bisect
import itertools
from typing import TYPE_CHECKING

from ..api.tensors import check_torch_tensor, recorded_by_autograd
from ..errors import TmaConfigError
from ..limits import GLOBAL_BASE_ALIGN
from ..runtime.dispatch import GuardedCalls
from .call import addresses, encode, groupable, launch_table, layout_check, packed_layout, span
from .plan import has_gaps, pairs_disjoint

if TYPE_CHECKING:
    import torch

_KEPT = GuardedCalls()  # by the tensors' addresses: each list's Packed (None: not served)


class Packed:
    """A list's packed layout on one device and its kept table: `relative` "destination" for
    `pack` (the buffer is written), "source" for `unpack_` (the buffer is read)."""

    def __init__(self, torch, tensors: list, relative: str, layout: tuple) -> None:
        self.dtype, offsets, self.length = layout
        self.device, self.relative = tensors[0].device, relative
        self.element = torch.empty(0, dtype=self.dtype).itemsize
        self.offsets = [offset // self.element for offset in offsets]
        addresses, nbytes = [t.data_ptr() for t in tensors], [t.nbytes for t in tensors]
        self.padded = has_gaps(offsets, nbytes, self.length * self.element)
        src, dst = (addresses, offsets) if relative == "destination" else (offsets, addresses)
        self.table = encode(torch, self.device, src, dst, nbytes) if any(nbytes) else None
        spans = sorted(span(t) for t in tensors if t.nbytes)
        self.starts = [start for start, _ in spans]
        self.reach = list(itertools.accumulate((start + size for start, size in spans), max))

    def allocate(self, torch) -> torch.Tensor:
        """A new buffer (the bytes between spans zeros, as `pack` makes one)."""
        make = torch.zeros if self.padded else torch.empty
        return make(self.length, dtype=self.dtype, device=self.device)

    def fits(self, torch, flat: object) -> bool:
        """Whether this table serves the buffer `flat`: this dtype and device, compact, 1-D, long
        enough, aligned, no byte shared with a tensor (where not, `pack` and `unpack_` check it
        and name what is wrong)."""
        if not (
            isinstance(flat, torch.Tensor)
            and flat.device == self.device
            and flat.dtype == self.dtype
            and flat.dim() == 1
            and flat.stride(0) == 1
            and flat.numel() >= self.length
            and flat.data_ptr() % GLOBAL_BASE_ALIGN == 0
            and not (flat.is_conj() or flat.is_neg() or flat.is_inference() or recorded_by_autograd(flat))
        ):
            return False
        start, end = flat.data_ptr(), flat.data_ptr() + self.length * self.element
        before = bisect.bisect_left(self.starts, end)  # the tensors that start before the buffer ends
        return before == 0 or self.reach[before - 1] <= start

    def run(self, torch, flat: torch.Tensor, tensors: list, sms: int | None = None) -> None:
        """The kept table's grouped copy between `flat` and `tensors`, on an SM budget of `sms`."""
        if self.table is not None:
            launch_table(torch, self.device, self.table, self.relative, flat, sms)
        written = [flat] if self.relative == "destination" else tensors
        torch.autograd.graph.increment_version(written)


def kept_packing(torch, tensors: object, relative: str, grouped: bool) -> Packed | None:
    """The kept (or now made) `Packed` of `tensors` for `pack` ("destination") or `unpack_`
    ("source"); None for a list it does not serve."""
    if not grouped or not isinstance(tensors, (list, tuple)) or not tensors:
        return None
    tensors = list(tensors)
    key = addresses(torch, tensors, relative)
    if key is None:
        return None
    packed = _KEPT.find(key, tensors)
    if packed is not GuardedCalls.MISSING:
        return packed
    packed = _packed(torch, tensors, relative)
    if packed is None and _capturing(torch, tensors[0]):
        return None  # not kept: an eager call may serve it
    _KEPT.keep_guarded(key, layout_check(torch, tensors), packed)
    return packed


def _packed(torch, tensors: list, relative: str) -> Packed | None:
    try:  # a quantized, nested or sparse tensor: the pairs' path names it
        for i, tensor in enumerate(tensors):
            check_torch_tensor(tensor, "pack", f"tensors[{i}]")
    except TmaConfigError:
        return None
    if not all(groupable(t, t) and not t.is_inference() for t in tensors):
        return None  # an inference tensor's route checks its writes
    if len({t.dtype for t in tensors}) > 1 or len({t.device for t in tensors}) > 1:
        return None
    if _capturing(torch, tensors[0]):  # no table can be encoded inside a capture
        return None
    layout = packed_layout(torch, tensors)
    if any(offset % torch.empty(0, dtype=layout[0]).itemsize for offset in layout[1]):
        return None
    if relative == "source":  # unpack_ writes the tensors: none may share a byte with another
        starts, nbytes = zip(*map(span, tensors), strict=True)
        if not pairs_disjoint([0] * len(tensors), starts, [0] * len(tensors), nbytes):
            return None
    return Packed(torch, tensors, relative, layout)


def _capturing(torch, tensor) -> bool:
    """Whether the stream of `tensor`'s GPU is being captured."""
    if not (tensor.is_cuda and torch.cuda.is_available()):
        return False
    with torch.cuda.device(tensor.device):
        return torch.cuda.is_current_stream_capturing()
