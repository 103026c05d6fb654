"""Many tensors, one launch: `copy_many_` (torch's `_foreach_copy_`), `pack` (torch's `cat` of the
flattened tensors, each at a 16-byte-aligned offset) and `unpack_` (torch's `split_with_sizes_copy`
back into the tensors), on the grouped copy (`many.kernel`); `GroupedCopy` prepares any of the
three once for lists that stay put.

A pair of compact tensors of one dtype and shape on one Hopper GPU, both 16-byte aligned, is
chunked into the table the kernel walks (`many.plan`): every such pair of a call in one launch
(`grouped=False` sends them to one `torch._foreach_copy_` instead). Any other pair takes the
drop-in path: `tmakit.copy_` one pair at a time where TMA serves it as laid out or as a view (a
transposing pair), else the `_foreach_copy_`. Where pairs share bytes, every pair is copied one at
a time in the list's order (`many.call`).

A call's route (`many.call.ListRoute`: which pairs go where) and its chunk table, encoded on the
host and copied to the device once, are kept for calls with the same tensors (found by their
addresses, checked by their layouts): an optimizer's parameters, a layer's flat buffer. `pack`
and `unpack_` keep a list's table relative to the buffer (`many.kept`), so a new buffer needs no
new table. Inside a CUDA-graph capture nothing is encoded: tensors whose route is kept (an eager
call with them came first) are captured as the grouped kernel, whose table is then kept for the
process; others are captured as torch's `_foreach_copy_`, so a replay never reads a host buffer
since rewritten.

Finding the kept route costs the host about half a microsecond a pair, a little more than
torch's own loop in C++; a `GroupedCopy` reads only each tensor's address per call, or nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from ..api.tensors import check_budget, check_torch_tensor, compile_check, import_torch, recorded_by_autograd
from ..errors import TmaConfigError
from ..plan.budget import call_budget, check_sms, sm_budget
from ..plan.route import RECORDED_BY_AUTOGRAD
from ..runtime.dispatch import GuardedCalls
from ..validate import flag
from .call import GRAD, ListRoute, addresses, layout_check, packed_layout, recorded
from .kept import kept_packing
from .plan import has_gaps

if TYPE_CHECKING:
    import torch
    from typing_extensions import Unpack  # typing's from Python 3.11

__all__ = ["GroupedCopy", "copy_many_", "pack", "unpack_"]

_ROUTES = GuardedCalls()  # by a call's addresses, each route with its layout check
# torch.compiler.is_compiling, asked first by each function: a trace records its torch op instead.
is_compiling = compile_check(globals(), "is_compiling")


def copy_many_(
    dsts: Sequence[torch.Tensor],
    srcs: Sequence[torch.Tensor],
    *,
    grouped: bool = True,
    strict: bool = False,
    sms: int | None = None,
) -> Sequence[torch.Tensor]:
    """Copy each `srcs[i]` into `dsts[i]`: every compact aligned pair in one launch. Every pair is
    checked before any is copied: a refused call writes nothing.

    Args:
        dsts: the destinations, torch tensors.
        srcs: the sources, one per destination, each of its destination's shape (a dtype change
            or a broadcast takes torch's `_foreach_copy_`, which does both).
        grouped: run the compact aligned pairs on the grouped TMA kernel; False sends them to
            torch's `_foreach_copy_`.
        strict: raise TmaConfigError where a pair has no TMA path, instead of torch's op.
        sms: an SM budget (`tmakit.sm_budget`): the grouped copy's persistent grid (and each pair
            `copy_` serves) takes this many SMs, one block each; None: the enclosing budget's,
            else the whole GPU. Pairs torch's op serves are not confined.

    Returns:
        `dsts` itself (the list or tuple passed), written, as torch's `_foreach_copy_` returns it.

    Raises:
        TmaConfigError: lists of different lengths, an entry that is not a tensor, a pair torch's
            `copy_` refuses (`TorchOpError`), or with `strict` a pair TMA does not serve; an `sms`
            past the GPU's SM count. While
            torch.compile traces the call, what the op's fake implementation refuses, wrapped in
            dynamo's error.
    """
    sms = call_budget(sms)
    if is_compiling():
        traced_copy_many_(dsts, srcs, grouped, strict, sms)
        return dsts
    given, torch = dsts, import_torch("copy_many_")
    dsts, srcs = _tensor_list(dsts, "copy_many_", "dsts"), _tensor_list(srcs, "copy_many_", "srcs")
    grouped, strict = flag(grouped, "copy_many_'s grouped"), flag(strict, "copy_many_'s strict")
    if len(dsts) != len(srcs):
        raise TmaConfigError(f"copy_many_ got {len(dsts)} destinations and {len(srcs)} sources; one each")
    tensors = dsts + srcs
    key = addresses(torch, tensors, (grouped, strict, sms))
    route = _ROUTES.find(key, tensors)
    if route is GuardedCalls.MISSING:
        route = ListRoute(torch, dsts, srcs, grouped, "copy_many_", strict, sms)
        if key is not None and route.complete:
            _ROUTES.keep_guarded(key, layout_check(torch, tensors), route)
    route.run(torch, dsts, srcs)
    return given


def pack(
    tensors: Sequence[torch.Tensor],
    out: torch.Tensor | None = None,
    *,
    grouped: bool = True,
    strict: bool = False,
    sms: int | None = None,
) -> tuple[torch.Tensor, list[int]]:
    """Every tensor, flattened, into one 1-D buffer, each at a 16-byte-aligned offset.

    Args:
        tensors: torch tensors on one device (empty ones included).
        out: the buffer, 1-D and compact, of the tensors' dtype when they share one (else uint8,
            the offsets then in bytes), at least as long as `pack_offsets` says; allocated when None
            (the bytes between spans then zeros).
        grouped, strict, sms: as `copy_many_`'s.

    Returns:
        (the buffer, the offset of each tensor in it, in the buffer's elements).

    Raises:
        TmaConfigError: an entry that is not a tensor, tensors on different devices, an `out`
            too short or of another dtype; as `copy_many_`'s.
    """
    sms = call_budget(sms)
    if is_compiling():
        return traced_pack(tensors, out, grouped, strict, sms)
    torch = import_torch("pack")
    kept = kept_packing(torch, tensors, "destination", flag(grouped, "pack's grouped"))
    if kept is not None and (out is None or kept.fits(torch, out)):  # its kept table, on this buffer
        check_budget(sms, tensors[0])
        flat = kept.allocate(torch) if out is None else out
        kept.run(torch, flat, tensors, sms)
        return flat, list(kept.offsets)
    flat, offsets, spans, sources = _pack_pairs(torch, tensors, out)
    copy_many_(spans, sources, grouped=grouped, strict=strict, sms=sms)
    return flat, offsets


def unpack_(
    flat: torch.Tensor,
    tensors: Sequence[torch.Tensor],
    *,
    grouped: bool = True,
    strict: bool = False,
    sms: int | None = None,
) -> None:
    """Copy each tensor's span of a buffer `pack` wrote back into the tensor.

    Args:
        flat: the packed buffer.
        tensors: the tensors, in `pack`'s order; each gets its span, reshaped to its shape.
        grouped, strict, sms: as `copy_many_`'s.

    Returns:
        None: the tensors are written.

    Raises:
        TmaConfigError: as `pack`.
    """
    sms = call_budget(sms)
    if is_compiling():
        return traced_unpack_(flat, tensors, grouped, strict, sms)
    torch = import_torch("unpack_")
    kept = kept_packing(torch, tensors, "source", flag(grouped, "unpack_'s grouped"))
    if kept is not None and kept.fits(torch, flat):  # its kept table, on this buffer
        check_budget(sms, flat)
        kept.run(torch, flat, list(tensors), sms)
        return
    dsts, srcs = _unpack_pairs(torch, flat, tensors)
    copy_many_(dsts, srcs, grouped=grouped, strict=strict, sms=sms)


def traced_copy_many_(dsts: object, srcs: object, grouped: object, strict: object, sms: object) -> None:
    """`copy_many_` while torch.compile or torch.export traces it: `torch.ops.tmakit.copy_many_`
    with the call's options, which the trace records as one op and which runs `copy_many_` at run
    time (TMA, or torch's `_foreach_copy_` for the pairs TMA does not serve unless the call is
    strict). A call autograd records is torch's `_foreach_copy_`, traced as such, as outside a
    trace (strict: refused)."""
    torch = import_torch("copy_many_")
    dsts, srcs = _tensor_list(dsts, "copy_many_", "dsts"), _tensor_list(srcs, "copy_many_", "srcs")
    mode = _mode("copy_many_", grouped, strict, sms)
    if len(dsts) != len(srcs):
        raise TmaConfigError(f"copy_many_ got {len(dsts)} destinations and {len(srcs)} sources; one each")
    if recorded_by_autograd(*dsts, *srcs):
        _refuse_strict("copy_many_", mode)
        torch._foreach_copy_(dsts, srcs)
        return
    _ops().copy_many_.default(dsts, srcs, **mode)


def traced_pack(
    tensors: object, out: torch.Tensor | None, grouped: object, strict: object, sms: object
) -> tuple[torch.Tensor, list[int]]:
    """`pack` while torch.compile or torch.export traces it: `torch.ops.tmakit.pack` (or its `out`
    overload) with the call's options, the offsets read off the tensors' sizes and dtypes
    (`call.packed_layout`), as `traced_copy_many_` runs `copy_many_`."""
    torch = import_torch("pack")
    tensors = _tensor_list(tensors, "pack", "tensors")
    mode = _mode("pack", grouped, strict, sms)
    if recorded_by_autograd(*tensors, *([] if out is None else [out])):
        _refuse_strict("pack", mode)
        flat, offsets, dsts, srcs = _pack_pairs(torch, tensors, out)
        torch._foreach_copy_(dsts, srcs)
        return flat, offsets
    if out is None:
        flat = _ops().pack.default(tensors, **mode)
    else:
        _ops().pack.out(tensors, out=out, **mode)
        flat = out
    dtype, offsets, _ = packed_layout(torch, tensors)
    return flat, [offset // dtype.itemsize for offset in offsets]


def traced_unpack_(flat: torch.Tensor, tensors: object, grouped: object, strict: object, sms: object) -> None:
    """`unpack_` while torch.compile or torch.export traces it: `torch.ops.tmakit.unpack_` with the
    call's options, as `traced_copy_many_` runs `copy_many_`."""
    torch = import_torch("unpack_")
    tensors = _tensor_list(tensors, "unpack_", "tensors")
    mode = _mode("unpack_", grouped, strict, sms)
    if recorded_by_autograd(flat, *tensors):
        _refuse_strict("unpack_", mode)
        torch._foreach_copy_(*_unpack_pairs(torch, flat, tensors))
        return
    _ops().unpack_.default(flat, tensors, **mode)


def _mode(what: str, grouped: object, strict: object, sms: object) -> dict[str, object]:
    return {
        "grouped": flag(grouped, f"{what}'s grouped"),
        "strict": flag(strict, f"{what}'s strict"),
        "sms": check_sms(sms, f"{what}'s sms"),
    }


def _refuse_strict(what: str, mode: dict[str, bool]) -> None:
    if mode["strict"]:
        raise TmaConfigError(
            f"{what} with strict=True: no TMA path, {RECORDED_BY_AUTOGRAD}; nothing was copied"
        )


def _ops() -> Any:
    """`torch.ops.tmakit`, its ops registered (`tmakit.ops`, imported by the first traced call)."""
    from .. import ops

    return ops.torch.ops.tmakit


class GroupedCopyKeywords(TypedDict, total=False):
    """`GroupedCopy`'s keyword options, which `GroupedCopy.packing` and `.unpacking` pass on."""

    grouped: bool
    check_addresses: bool
    sms: int | None


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
        sms: as `copy_many_`'s, fixed when prepared (None: the enclosing `tmakit.sm_budget`'s
            then, else the whole GPU).

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
        sms: int | None = None,
    ) -> None:
        torch = import_torch("GroupedCopy")
        self._sms = call_budget(sms)
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
        self._route = ListRoute(torch, dsts, srcs, grouped, "GroupedCopy", sms=self._sms)
        names = [f"dsts[{i}]" for i in range(len(dsts))] + [f"srcs[{i}]" for i in range(len(srcs))]
        self._watch(torch, dsts + srcs, names, lambda: (dsts, srcs))

    def _watch(self, torch, tensors: list, names: list[str], pairs) -> None:
        """What each call reads: the caller's `tensors` (named `names`; the pairs may be views of
        them), and `pairs()`, the pairs made from them again when the route must change."""
        self._tensors, self._names, self._pairs = tensors, names, pairs
        self._addresses = tuple(map(torch.Tensor.data_ptr, tensors))
        self._grads = tuple(map(GRAD, tensors)) if any(map(GRAD, tensors)) else False
        # by what autograd records: each route with the pairs it was made for
        self._routes = {recorded(torch, tensors): (self._route, self._dsts, self._srcs)}

    @classmethod
    def packing(
        cls,
        tensors: Sequence[torch.Tensor],
        out: torch.Tensor | None = None,
        **options: Unpack[GroupedCopyKeywords],
    ) -> GroupedCopy:
        """`pack(tensors, out)` prepared: each call writes the buffer `.flat` at `.offsets`.

        Args:
            tensors, out: as `pack`'s.
            **options: `grouped`, `check_addresses` and `sms`, as `GroupedCopy`'s.

        Returns:
            the prepared copy, its buffer and offsets as attributes `flat` and `offsets`.

        Raises:
            TmaConfigError: as `pack`'s.
        """
        torch = import_torch("GroupedCopy")
        flat, offsets, *pairs = _pack_pairs(torch, tensors, out)
        tensors = _tensor_list(tensors, "pack", "tensors")

        def remake() -> list:
            return _pack_pairs(torch, tensors, flat)[2:]

        prepared = cls._of_buffer(torch, flat, tensors, pairs, remake, options)
        prepared.offsets = offsets
        return prepared

    @classmethod
    def unpacking(
        cls, flat: torch.Tensor, tensors: Sequence[torch.Tensor], **options: Unpack[GroupedCopyKeywords]
    ) -> GroupedCopy:
        """`unpack_(flat, tensors)` prepared.

        Args:
            flat, tensors: as `unpack_`'s.
            **options: `grouped`, `check_addresses` and `sms`, as `GroupedCopy`'s.

        Returns:
            the prepared copy.

        Raises:
            TmaConfigError: as `unpack_`'s.
        """
        torch = import_torch("GroupedCopy")
        pairs = _unpack_pairs(torch, flat, tensors)
        tensors = _tensor_list(tensors, "unpack_", "tensors")

        def remake() -> tuple[list, list]:
            return _unpack_pairs(torch, flat, tensors)

        return cls._of_buffer(torch, flat, tensors, pairs, remake, options)

    @classmethod
    def _of_buffer(
        cls, torch, flat, tensors: list, pairs, remake, options: GroupedCopyKeywords
    ) -> GroupedCopy:
        """A prepared pack or unpack: `pairs` (destinations, sources; `remake()` makes them again),
        each call watching the buffer and the caller's `tensors` rather than the pairs' views."""
        prepared = cls(*pairs, **options)
        names = ["the buffer"] + [f"tensors[{i}]" for i in range(len(tensors))]
        prepared._watch(torch, [flat, *tensors], names, remake)
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
            autograd = recorded(torch, self._tensors)
        else:  # requires_grad as prepared: only the grad mode is read
            autograd = torch.is_grad_enabled() and self._grads
        kept = self._routes.get(autograd)
        if kept is None:  # grad mode or requires_grad changed since: paired and routed afresh
            dsts, srcs = self._pairs()
            kept = ListRoute(torch, dsts, srcs, self._grouped, "GroupedCopy", sms=self._sms), dsts, srcs
            if kept[0].complete:
                self._routes[autograd] = kept
        self._route, dsts, srcs = kept
        with sm_budget(self._sms):  # the pairs copy_ serves on the budget prepared, as the table
            self._route.run(torch, dsts, srcs)


def _pack_pairs(torch, tensors, out):
    """(the buffer, the offsets, destinations, sources): `pack`'s pairs, each tensor copied from
    where it is (no flattened copy made first): a compact tensor of the buffer's dtype flattened
    (a view) into its span, any other into its span viewed as the tensor."""
    tensors = _tensor_list(tensors, "pack", "tensors")
    flat, (offsets, spans) = _flat_views(torch, tensors, out, "pack")
    dsts, srcs = [], []
    for span, t in zip(spans, tensors, strict=True):
        if t.dtype == flat.dtype and t.is_contiguous():
            dsts.append(span)
            srcs.append(t.ravel())
        else:
            dsts.append(_as(span, t.dtype, "pack").view(t.shape))
            srcs.append(t)
    return flat, offsets, dsts, srcs


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
    dtype, offsets, length = packed_layout(torch, tensors)
    element = torch.empty(0, dtype=dtype).itemsize
    if any(offset % element for offset in offsets):  # an element wider than 16 bytes
        raise TmaConfigError(f"{what}: {dtype} elements do not fall on 16-byte offsets")
    device = next(iter(devices))
    if flat is None:  # the bytes between spans zeroed, so a packed buffer is the same each time
        padded = has_gaps(offsets, [t.nbytes for t in tensors], length * element)
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
    sizes = [t.nbytes // element for t in tensors]
    return flat, (starts, [flat[s : s + n] for s, n in zip(starts, sizes, strict=True)])
