"""How a list of tensor pairs is copied (`many.api`'s calls and `GroupedCopy`): its route (each
device's grouped launch with its chunk table, the pairs `copy_` serves one at a time, the rest in
one `_foreach_copy_`, or every pair in the list's order where pairs share bytes), what a kept
route is found and checked by, and the chunk table's encoding."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING

from .. import registry
from ..api.tensors import (
    check_budget,
    check_torch_tensor,
    cuda_index,
    device_facts,
    import_torch,
    recorded_by_autograd,
    same_view,
    tensor_guard,
    torch_copy_refusal,
    write_refusal,
)
from ..errors import TmaConfigError, TorchOpError
from ..validate import overlap_verdict
from .launch import many_launcher
from .plan import ManyPlan, aligned_pair, call_plan, pack_offsets, pairs_disjoint

if TYPE_CHECKING:
    import torch

# The copy family's functions, bound at their first call (`registry.bound_on_first_call`: a family
# imports no other): then each call reads one global, as an imported name's.
copy_ = registry.bound_on_first_call("copy_", globals())
copy_path = registry.bound_on_first_call("copy_path", globals())
CAPTURED: dict[int, object] = {}  # tables a captured graph reads: kept for the process
GRAD = attrgetter("requires_grad")


class ListRoute:
    """Where each pair of a list goes, by its index: each device's grouped launch (with its chunk
    table on the device), the pairs `copy_` serves one at a time, the rest in one
    `_foreach_copy_`. A whole list's route, made of each pair's (`plan.route.Route`: one call's
    path and why). Holds no tensor, so a kept route keeps no memory of the caller's alive."""

    def __init__(
        self,
        torch,
        dsts: list,
        srcs: list,
        grouped: bool,
        what: str,
        strict: bool = False,
        sms: int | None = None,
    ) -> None:
        together, self.one_by_one, self.rest = [], [], []
        # the SM budget of its kernels (`plan.budget`), checked on each GPU first; copy_'s keyword
        # only where there is one (its plain call keeps its fast path)
        self.sms, self.budget = sms, {} if sms is None else {"sms": sms}
        if sms is not None:  # against each device's SM count (a tensor's, for one of each)
            for tensor in {getattr(t, "device", None): t for t in dsts}.values():
                check_budget(sms, tensor)
        if strict and not grouped:
            raise TmaConfigError(
                f"{what} with strict=True and grouped=False: strict takes TMA's path alone, grouped=False "
                "torch's _foreach_copy_; drop one"
            )
        for i, (dst, src) in enumerate(zip(dsts, srcs, strict=True)):
            check_torch_tensor(dst, what, f"dsts[{i}]")
            check_torch_tensor(src, what, f"srcs[{i}]")
            if groupable(dst, src):
                together.append(i)
            elif dst.shape == src.shape and dst.dtype == src.dtype and copy_path(dst, src).by_tma:
                self.one_by_one.append(i)
            elif strict:
                alike = dst.shape == src.shape and dst.dtype == src.dtype
                reason = copy_path(dst, src).reason if alike else "shapes or dtypes that differ"
                raise TmaConfigError(
                    f"{what} with strict=True: dsts[{i}] <- srcs[{i}] has no TMA path ({reason}); "
                    "nothing was copied"
                )
            else:
                self.rest.append(i)
        by_tma = set(self.one_by_one + (together if grouped else []))
        for i in range(len(dsts)):  # every pair's refusal before any pair is copied
            refuse_pair(dsts, srcs, i, i in by_tma)
        # False: not to be kept (a table could not be encoded in a capture), or not where what its
        # refusals read is more than a key holds: autograd recording (leaves, views and how they
        # were made), an inference tensor (written only in inference mode)
        self.complete = not (
            recorded_by_autograd(*dsts, *srcs) or any(t.is_inference() for t in (*dsts, *srcs))
        )
        self.launches: list[tuple[object, object, list[int]]] = []  # (device, table, pairs)
        self.in_order: list[tuple[int, bool]] | None = None  # (pair, by copy_) when an order matters
        if not apart(dsts, srcs):  # pairs share bytes: one at a time, in the list's order
            if recorded_by_autograd(*dsts, *srcs):
                raise TmaConfigError(
                    f"{what}: pairs that share memory while autograd records the call: each pair's "
                    "write changes what autograd lets the next pair write, which no check made "
                    "before the first can tell; copy them one at a time (dst.copy_(src)), or under "
                    "torch.no_grad()"
                )
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
                    if strict:
                        raise TmaConfigError(
                            f"{what} with strict=True inside a CUDA-graph capture, of tensors no eager call "
                            "has copied: no table can be encoded in a capture (torch's _foreach_copy_ "
                            "would serve it); call it once eagerly before the capture"
                        )
                    self.complete, self.rest = False, sorted(self.rest + pairs)
                    continue
            nbytes = [dsts[i].nbytes for i in pairs]
            if any(nbytes):
                src, dst = [srcs[i].data_ptr() for i in pairs], [dsts[i].data_ptr() for i in pairs]
                self.launches.append((device, encode(torch, device, src, dst, nbytes), pairs))

    def run(self, torch, dsts: list, srcs: list) -> None:
        if self.in_order is not None:
            for i, by_tma in self.in_order:
                copy_(dsts[i], srcs[i], **self.budget) if by_tma else torch_copy_pair(dsts, srcs, i)
            return
        for device, table, pairs in self.launches:
            launch_table(torch, device, table, sms=self.sms)
            torch.autograd.graph.increment_version(
                dsts if len(pairs) == len(dsts) else [dsts[i] for i in pairs]
            )
        for i in self.one_by_one:
            copy_(dsts[i], srcs[i], **self.budget)
        if self.rest:
            try:
                torch._foreach_copy_([dsts[i] for i in self.rest], [srcs[i] for i in self.rest])
            except (RuntimeError, TypeError, ValueError):  # e.g. complex32, which copy_ takes
                for i in self.rest:  # the pairs share no bytes: copying one again changes nothing
                    torch_copy_pair(dsts, srcs, i)


def launch_table(
    torch, device, table: tuple, relative: str | None = None, buffer=None, sms: int | None = None
) -> None:
    """The grouped copy of an encoded `table` on `device`'s current stream (with `relative`, its
    offsets into `buffer`), on an SM budget of `sms` (`plan.budget`; None: the whole GPU)."""
    with torch.cuda.device(device):  # the pairs' GPU: its stream is the one captured and launched on
        if torch.cuda.is_current_stream_capturing():  # a graph's replays read this table
            CAPTURED[id(table)] = table
        # both views are one buffer's: freed only after this stream's use
        table[0].record_stream(torch.cuda.current_stream(device))
        launch = many_launcher(plan_of(device.index, sms), str(device), relative).launch
        launch(*table) if relative is None else launch(*table, buffer.view(torch.uint8))


def refuse_pair(dsts: list, srcs: list, i: int, by_tma: bool) -> None:
    """Raise what copying pair `i` would raise (`by_tma`: by `copy_`'s TMA path, else by torch's
    copy_), found without copying: a list is refused before any of its pairs is written."""
    dst, src = dsts[i], srcs[i]
    verdict = "by torch"
    if by_tma:
        where = (dst.stride(), dst.data_ptr()), (src.stride(), src.data_ptr())
        verdict = overlap_verdict(tuple(dst.shape), *where, dst.element_size())
    if verdict == "shared":  # as copy_'s dispatch refuses it (`check_no_partial_overlap`)
        raise TmaConfigError(
            f"dsts[{i}] partly overlaps srcs[{i}] in memory; TMA reads the source while it writes "
            "the destination: pass a copy of the source (.clone()); nothing was copied"
        )
    # a TMA pair's memory its own: only torch's rules for any write; else (torch's copy_, or
    # copy_'s dispatch handing it an overlap only torch's element-wise check decides) all of them
    reason = write_refusal(dst, src) if verdict == "disjoint" else torch_copy_refusal(dst, src)
    if reason is not None:
        raise TorchOpError(
            f"dsts[{i}] {tuple(dst.shape)} {dst.dtype} <- srcs[{i}] {tuple(src.shape)} {src.dtype}: "
            f"torch's copy_ refuses the pair ({reason}); nothing was copied"
        )


def torch_copy_pair(dsts: list, srcs: list, i: int) -> None:
    """torch's copy_ of a list's pair `i`, its refusal (TorchOpError) naming the pair: the list's
    counterpart of `copies.views.copy_by_torch`, `copy_`'s launch of torch's op."""
    try:
        dsts[i].copy_(srcs[i])
    except (RuntimeError, TypeError, ValueError) as error:
        raise TorchOpError(
            f"dsts[{i}] {tuple(dsts[i].shape)} {dsts[i].dtype} <- srcs[{i}] {tuple(srcs[i].shape)} "
            f"{srcs[i].dtype}: torch's copy_ refuses the pair no bulk copy serves ({error}); pass "
            "tensors copy_ takes"
        ) from None


def apart(dsts: list, srcs: list) -> bool:
    """Whether the pairs share no bytes but a pair's own source, so any order gives the list's."""
    if len(dsts) < 2 and not (dsts and dsts[0].data_ptr() != srcs[0].data_ptr()):
        return True
    src, src_bytes = zip(*map(span, srcs), strict=True)
    dst, dst_bytes = zip(*map(span, dsts), strict=True)
    unchanged = [
        same_view(d, s) if a == b else False for d, s, a, b in zip(dsts, srcs, dst, src, strict=True)
    ]
    return pairs_disjoint(src, dst, src_bytes, dst_bytes, unchanged)


def span(tensor: torch.Tensor) -> tuple[int, int]:
    """(the first byte's address, the bytes) of the memory a tensor's elements lie in."""
    if not tensor.numel():
        return tensor.data_ptr(), 0
    last = sum((extent - 1) * stride for extent, stride in zip(tensor.shape, tensor.stride(), strict=True))
    return tensor.data_ptr(), (last + 1) * tensor.element_size()


def addresses(torch, tensors: list, kind: object) -> tuple | None:
    """What a kept route is found by: its `kind` (`grouped`, or a kept pack's side), the grad mode
    and every tensor's address; None for entries that are not plain tensors (the checks then name
    them)."""
    try:
        return (kind, torch.is_grad_enabled(), tuple(map(torch.Tensor.data_ptr, tensors)))
    except (TypeError, RuntimeError, AttributeError, NotImplementedError):
        return None


def layout_check(torch, tensors: list) -> Callable[[list], bool]:
    """A check that tensors are as `tensors` are (type, dtype, device, shape, strides,
    requires_grad, the conjugate and negative bits; the rest of what a route depends on), holding
    none of them: torch's own tensor guard (`tensors.tensor_guard`), or, where this torch has
    none, the same reads compared."""
    guard = tensor_guard(torch, tensors)
    if guard is not None:
        return lambda now: guard(*now)
    kept = _layouts(tensors)
    return lambda now: _layouts(now) == kept


def _layouts(tensors: list) -> tuple:
    return tuple(
        (type(t), t.dtype, t.device, t.shape, t.stride(), t.requires_grad, t.is_conj(), t.is_neg())
        for t in tensors
    )


def recorded(torch, tensors: list) -> tuple | bool:
    """Which tensors autograd records a call on (grad mode on and requiring grad); False for none,
    read from the grad mode alone under torch.no_grad()."""
    if not torch.is_grad_enabled():
        return False
    grads = tuple(map(GRAD, tensors))
    return any(grads) and grads


def encode(
    torch, device, src: Sequence[int], dst: Sequence[int], nbytes: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunk table of the pairs (addresses, bytes) on the device, (chunks, starts) views of
    one buffer copied there in one transfer, landed before any stream's kernel can read it."""
    chunks, starts = plan_of(device.index).chunk_table(src, dst, nbytes)
    pinned = torch.empty(chunks.size + starts.size, dtype=torch.int64, pin_memory=True)
    pinned.numpy()[: chunks.size] = chunks.ravel()
    pinned.numpy()[chunks.size :] = starts
    table = pinned.to(device)
    return table[: chunks.size].view(chunks.shape), table[chunks.size :]


def groupable(dst: torch.Tensor, src: torch.Tensor) -> bool:
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


@functools.cache
def plan_of(device: int, sms: int | None = None) -> ManyPlan:
    """The grouped copy's ring on `device`, on an SM budget of `sms` (`many.plan.call_plan`)."""
    return call_plan(device_facts(import_torch("copy_many_").device("cuda", device))[0], sms)


def packed_layout(torch, tensors: list) -> tuple[torch.dtype, list[int], int]:
    """How `pack` lays `tensors` out: (the buffer's dtype: theirs when they share one, else uint8;
    each tensor's offset in bytes; the buffer's length in its elements)."""
    dtypes = {t.dtype for t in tensors}
    dtype = dtypes.pop() if len(dtypes) == 1 else torch.uint8
    offsets, total = pack_offsets([t.numel() * t.element_size() for t in tensors])  # symbolic when traced
    return dtype, offsets, -(-total // torch.empty(0, dtype=dtype).itemsize)
