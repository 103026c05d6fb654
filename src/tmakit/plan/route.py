"""Which path serves a call: TMA where it can address the tensors, a named fallback where it
cannot. Pure Python: the facts a route is a function of (shapes, strides, dtype names, element
size, base addresses, device indices) are read off the tensors by the API.

What the families' routes share: `Route` (a path of `PATHS` and why), the facts they read
(`TensorFacts`, `PairFacts`), the rules a copy's and a reduce's route take first
(`torch_pair_rule`), TMA's layout rules on a pair (`strided_rule`) and the canonical view of the
same memory (`canonical_pair`), the measured rule that gives torch a call past the L2
(`torch_faster`), and the dtype a copy moves a torch dtype as (`moved_dtype`: a copy moves bits, so
bool moves as uint8 and float64 as int64). A copy's route is the copy family's
(`copies.plan.copy_route`), a reduce's the reduce family's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import DTYPES, MOVED_AS, contiguous_index, major_of
from ..errors import TmaConfigError
from ..limits import MAX_RANK
from ..validate import check_outer_strides, overlaps_itself
from .tuning import TUNING, BeyondL2

# The paths a call can take, by name, and what each is.
PATHS: dict[str, str] = {
    "tma": "TMA tensor maps: tiles loaded into shared memory and stored out by the copy's ring",
    "tma-view": "TMA tensor maps on a view of the same memory (dims permuted together, runs merged)",
    "tma-rows": "TMA tensor maps on a compact tensor's memory viewed as rows (config.rows_view)",
    "tma-rows-bulk": "bulk copies (cp.async.bulk) of whole rows by index: one per index entry, no tensor map",
    "empty": "nothing to move: no kernel launches",
    "torch": "torch's own op: no TMA path addresses these tensors, or a rule measured torch's faster",
}
TMA_PATHS = frozenset({"tma", "tma-view", "tma-rows", "tma-rows-bulk", "empty"})

_TMAKIT_BY_TORCH = {element.torch_name: name for name, element in DTYPES.items()}


# Which non-strict calls torch's op serves past the L2: measured thresholds, each justified in
# `plan.tuning`.
TORCH_FASTER_BEYOND_L2: dict[str, BeyondL2] = TUNING["TORCH_FASTER_BEYOND_L2"].value


@dataclass(frozen=True)
class Route:
    """The path one call takes (`PATHS`) and why. `moved_as`: the tmakit dtype the data moves as
    where it is not the tensors' own; `view`: (shape, src strides, dst strides) of the view a
    "tma-view" or "tma-rows" copy moves (element strides, the same memory); `tail`: the elements
    of a compact run past its rows, which torch's copy_ moves."""

    op: str
    path: str
    reason: str
    moved_as: str | None = None
    view: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None = None
    tail: int = 0

    @property
    def by_tma(self) -> bool:
        """Whether TMA serves the call (an empty one included: nothing to move)."""
        return self.path in TMA_PATHS

    def __str__(self) -> str:
        moved = f", moved as {self.moved_as}" if self.moved_as else ""
        return f"{self.op}: {self.path} ({self.reason}{moved})"


# Not frozen: read off the tensors of every new shape's route, in a third of a frozen one's time.
@dataclass(slots=True)
class TensorFacts:
    """What a route reads of one tensor: its shape and element strides as torch gives them, its
    dtype by torch's name (`float16`, `bool`), element size `nbytes`, base `address` and device
    index (-1: not a CUDA device; `NOT_SM90`: a GPU that is not a Hopper). Read, never changed
    (`dataclasses.replace` makes another)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    nbytes: int
    address: int
    device: int


@dataclass
class PairFacts:
    """What a two-tensor call's route is a function of: the destination's facts and the source's,
    and a bit torch applies to either as it reads ("conjugate", "negative"; TMA moves bits)."""

    dst: TensorFacts
    src: TensorFacts
    lazy: str | None = None


# A route's device index for a GPU tmakit's kernels cannot run on, and why torch's op serves it.
NOT_SM90 = -2
NOT_SM90_REASON = (
    "a GPU that is not a Hopper (compute capability 9.0); tmakit's TMA kernels are built for sm_90a"
)
# The switch that sends every call to torch's op (a Hopper's index reads as `SWITCHED_OFF` while
# it is set: `api.tensors.cuda_index`), and the device index and reason its routes carry.
SWITCH_VARIABLE = "TMAKIT_DISABLE"
SWITCHED_OFF = -3
SWITCHED_OFF_REASON = f"{SWITCH_VARIABLE}=1 is set: every tmakit call takes torch's op (unset it for TMA's)"
# Why a route's device index sends a call to torch's op, for the indices of a GPU TMA does not serve.
TORCH_DEVICES = {NOT_SM90: f"a tensor is on {NOT_SM90_REASON}", SWITCHED_OFF: SWITCHED_OFF_REASON}


def device_rule(*devices: int) -> str | None:
    """Why torch's op serves a call whose tensors lie on `devices` (route device indices), where
    one is a GPU TMA does not serve (`TORCH_DEVICES`); None otherwise."""
    for device in devices:
        if device < -1:
            return TORCH_DEVICES[device]
    return None


# Why a call autograd records takes torch's op: the reason its route gives.
RECORDED_BY_AUTOGRAD = (
    "a tensor requires grad with grad mode on; TMA's kernel records no autograd graph and torch's "
    "op does (under torch.no_grad() TMA serves it)"
)


def torch_route(op: str, reason: str) -> Route:
    return Route(op, "torch", reason)


def torch_pair_rule(facts: PairFacts, op: str, match: str, one_dtype: str) -> Route | None:
    """The rules a copy's and a reduce's routes share, in order: a source that does not broadcast
    to the destination (TmaConfigError: `match` says what the op needs); torch's op for tensors
    not both on one CUDA device, a dtype change (`one_dtype` says why TMA cannot), a broadcast
    source, a lazily applied bit, a destination that may overlap itself. None: none applies."""
    dst, src = facts.dst, facts.src
    if src.shape != dst.shape and not broadcasts(src.shape, dst.shape):
        raise TmaConfigError(
            f"destination is {dst.shape}, source {src.shape}: the source does not broadcast "
            f"to the destination's shape; {match}"
        )
    device = device_rule(src.device, dst.device)
    if device is not None:
        return torch_route(op, device)
    if src.device < 0 or src.device != dst.device:
        return torch_route(op, "the tensors are not both on one CUDA device")
    if src.dtype != dst.dtype:
        return torch_route(op, f"a dtype change ({src.dtype} to {dst.dtype}): {one_dtype}")
    if src.shape != dst.shape:
        return torch_route(op, f"a broadcast source ({src.shape} to {dst.shape})")
    if facts.lazy is not None:
        return torch_route(op, lazy_reason(facts.lazy))
    if overlaps_itself(dst.shape, dst.strides):
        return torch_route(op, self_overlap_reason(dst.strides))
    return None


def self_overlap_reason(strides: tuple[int, ...]) -> str:
    """Why a destination that may overlap itself takes torch's op: TMA's tiles would race."""
    return (
        f"dst's strides {strides} may map several of its elements to one address; torch's op "
        "checks each (and refuses a destination that overlaps itself)"
    )


def call_rule(lazy: str | None, recorded: bool) -> str | None:
    """Why torch's op serves a call whatever its tensors' layout (None: nothing of the kind): a bit
    torch applies lazily to a tensor as it reads, or autograd recording the call."""
    if lazy is not None:
        return lazy_reason(lazy)
    return RECORDED_BY_AUTOGRAD if recorded else None


def lazy_reason(lazy: str) -> str:
    """Why a tensor with a lazily applied bit takes torch's op."""
    return (
        f"a {lazy} view (its bit applied by torch as it reads; TMA would move the stored bits): "
        "x.resolve_conj() / x.resolve_neg() first for TMA"
    )


def torch_memory_rule(facts: PairFacts, aliased: bool) -> str | None:
    """The memory rules torch's `copy_` (its TensorIterator) checks before it writes, as a reason;
    None where it takes the pair: a destination that maps two elements to one address (an
    expanded dim of a destination torch does not find dense), and a destination that shares memory
    with its source (`aliased`: one storage) other than as the same span in the same strides,
    where both are dense (where either is not, torch does not look). The very same view and a
    meta destination exit earlier: the caller's."""
    dst, src = facts.dst, facts.src
    if not dense(dst.shape, dst.strides) and any(
        stride == 0 and extent > 1 for extent, stride in zip(dst.shape, dst.strides, strict=True)
    ):
        return (
            f"dst's strides {dst.strides} map several of its elements to one address (an expanded "
            "dim); torch's copy_ refuses to write it: write into a tensor of its own (.clone())"
        )
    if not aliased or 0 in dst.shape or 0 in src.shape:
        return None
    if not (dense(dst.shape, dst.strides) and dense(src.shape, src.strides)):
        return None
    dst_end = dst.address + math.prod(dst.shape) * dst.nbytes
    src_end = src.address + math.prod(src.shape) * src.nbytes
    if (dst.address, dst_end) == (src.address, src_end) and dst.strides == src.strides:
        return None
    if dst.address < src_end and src.address < dst_end:
        return (
            "dst and src share memory in different places or layouts; torch's copy_ refuses a "
            "partial overlap: pass a copy of src (src.clone())"
        )
    return None


def dense(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a view covers its memory exactly once in some order of its dims (torch's
    "non-overlapping and dense"): dims of fewer than two elements aside, its strides sorted are 1
    and the running products of the extents."""
    expected = 1
    for stride, extent in sorted((s, e) for s, e in zip(strides, shape, strict=True) if e >= 2):
        if stride != expected:
            return False
        expected *= extent
    return True


def broadcasts(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    """Whether a tensor of `shape` broadcasts to `to` (torch's rule: aligned from the last dim,
    each extent equal or 1, no more dims than `to`)."""
    if len(shape) > len(to):
        return False
    return all(extent in (1, target) for extent, target in zip(reversed(shape), reversed(to), strict=False))


def moved_dtype(torch_name: str) -> str | None:
    """The tmakit dtype a copy moves a torch dtype as: its own, a same-size one, or None."""
    return _TMAKIT_BY_TORCH.get(torch_name) or MOVED_AS.get(torch_name)


def moved_as_dtype(torch_name: str) -> str | None:
    """The same-size tmakit dtype a copy moves a torch dtype as where tmakit has no dtype of that
    name (`Route.moved_as`); None for tmakit's own dtypes and for those TMA has no type for."""
    return None if torch_name in _TMAKIT_BY_TORCH else MOVED_AS.get(torch_name)


def torch_faster(call: str, dtype: str, moved_bytes: int, l2_bytes: int | None) -> bool:
    """Whether `TORCH_FASTER_BEYOND_L2` gives a call on `dtype` (torch's name) moving
    `moved_bytes` to torch's kernel (never without an L2 size: a pure plan, a strict call)."""
    rule = TORCH_FASTER_BEYOND_L2.get(call)
    return rule is not None and rule.covers(dtype, moved_bytes, l2_bytes)


def strided_rule(
    shape: tuple[int, ...], src_strides: tuple[int, ...], dst_strides: tuple[int, ...], nbytes: int
) -> str | None:
    """The first TMA layout rule the pair breaks, as a reason; None when it meets them all:
    rank 2 to `MAX_RANK`, a stride-1 dim among the last two of each, outer strides TMA takes."""
    if not 2 <= len(shape) <= MAX_RANK:
        return f"rank {len(shape)} (TMA takes 2 to {MAX_RANK} dims)"
    for name, strides in (("src", src_strides), ("dst", dst_strides)):
        contiguous = contiguous_index(major_of(strides, shape), len(shape))
        try:
            check_outer_strides(shape, strides, nbytes, contiguous, name=name)
        except TmaConfigError as error:
            return str(error)
    return None


def canonical_pair(
    shape: tuple[int, ...], src_strides: tuple[int, ...], dst_strides: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The same element-for-element copy as a view of the same memory TMA is likelier to take:
    extent-1 dims dropped; the dims sorted together by the source's strides, largest first, with
    the destination's stride-1 dim just before the source's (so a transposing copy is
    column-major into row-major or back); neighbouring dims both tensors walk as one run merged.
    Extents 0 are the caller's (an empty copy never gets here)."""
    dims = [d for d in range(len(shape)) if shape[d] != 1]
    if not dims:
        return (1,), (1,), (1,)

    def order(d: int) -> tuple:
        last = src_strides[d] == 1
        second = dst_strides[d] == 1 and not last
        return (last, second, -abs(src_strides[d]), -abs(dst_strides[d]))

    dims.sort(key=order)
    extents, sources, destinations = [shape[dims[0]]], [src_strides[dims[0]]], [dst_strides[dims[0]]]
    for d in dims[1:]:
        inner_src, inner_dst = src_strides[d], dst_strides[d]
        if sources[-1] == inner_src * shape[d] and destinations[-1] == inner_dst * shape[d]:
            extents[-1] *= shape[d]
            sources[-1], destinations[-1] = inner_src, inner_dst
        else:
            extents.append(shape[d])
            sources.append(inner_src)
            destinations.append(inner_dst)
    return tuple(extents), tuple(sources), tuple(destinations)
