"""How a call finds what it did last time: one table of known calls (`CallTable`) for every
family, and the dispatcher of the (dst, src) pair families (`Dispatch`: `copy_` and the reduce
stores), which adds a fast path that skips the table for a configuration repeated call after call.

A table of known calls holds, by a key read off the call (shapes, strides, dtypes, devices, the
arguments with their types, so that 3.0 does not find 3's plan), what planning that call gave: a
repeated call skips its planning. What a key cannot hold, where the tensors lie, the call checks
every time. Reading a key off an argument that is not a dense torch tensor fails
(`KEY_ERRORS`): such a call is planned in full, and its checks name what is wrong. A list's
call keyed by its tensors' addresses (`GuardedCalls`) keeps, beside each entry, a check that the
tensors are laid out as they were.

Reading shapes and strides off two torch tensors costs about half as much host time as the launch
itself, so a caller who moves the same configuration again and again should not pay even the
table's key. A TVM-FFI launcher's compiled function checks every argument against what it was
compiled for (dtype, shape, strides, 16-byte alignment, one device for both tensors and its guard
words) and raises before it launches when one differs: such a launcher can be tried first.

The states of a `Dispatch`, per call key (the options exactly as the caller passed them):

    LOOKING --(the same checking launcher served `needed` calls in a row)--> FAST
    FAST    --(the launcher tried first raised TypeError/ValueError)------> LOOKING, `needed` doubled
    FAST    --(it launched)----------------------------------------------> FAST

- LOOKING: the call builds the signature (shapes, strides, dtypes, devices, call key), finds its
  launcher in the table or plans one (for a new shape of a known class: that shape's checks, no
  compile), checks both base addresses are 16-byte aligned, launches, and counts the streak of
  calls in a row served by that launcher.
- FAST: the launcher is called first and nothing is read off the tensors; for the default call
  (no option given) of a launcher that checks its arguments, one C++ tensor guard of both
  tensors (`guarded`) stands in for the plain-path checks and the shape reads.
- `needed` starts at 2 and doubles with each rejection, up to 64: raising costs many calls' time, so a
  caller alternating A, B never raises and one whose runs are A, A, B soon stops raising.
A launch error the DSL cannot parse also surfaces as ValueError: the call is then launched again
through the lookup, which writes the same bytes.

A shape-generic launcher (`shape_generic`: one kernel for every shape of its class) takes any
extents and strides, so it is never tried blindly: its FAST state is pinned to the shape and
strides its last lookup checked, compared before it launches (four reads and tuple
comparisons, no exception on a miss), and a call of another shape goes through the lookup, whose
checks run for every new shape.

Arguments that are not tensors (numpy arrays, lists, None, sparse tensors) fail in the lookup, while
the signature is read; `check_tensors` then names what is wrong (TmaConfigError). Every check of a
new configuration is the planner's, on the miss path: a call whose launcher is tried first pays none.

What the signature cannot fix is where the tensors lie: each call compares the two base
addresses with the spans its signature covers (two reads, no exception), and a destination that
may overlap its source other than as the very same view goes through the lookup, which refuses a
partial overlap (`validate.overlap_verdict`) as torch's `copy_` does; where only an
element-wise check could tell (layouts that differ), the fallback serves the call and torch decides.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import TmaConfigError
from ..limits import GLOBAL_BASE_ALIGN
from ..plan import CopyOptions
from ..validate import check_base_address, overlap_verdict, span_bytes, typed
from .launch import Launcher

if TYPE_CHECKING:
    import torch

Known = TypeVar("Known")
KEY_ERRORS = (AttributeError, TypeError, RuntimeError)  # an argument a key cannot be read off
MAX_KNOWN_CALLS = 1024  # a caller of ever new shapes does not grow a table without bound
_TABLES: list = []  # every table of known calls (`forget_calls` empties them)


class CallTable(dict):
    """The calls one op has planned, by what defines them (a dict, bounded: past
    `MAX_KNOWN_CALLS` entries it starts again), emptied with every other by `forget_calls`."""

    def __init__(self) -> None:
        super().__init__()
        _TABLES.append(self)

    def keep(self, key: Hashable, known: Known) -> Known:
        """`known` kept under `key` (the table emptied first where it is full); returns it."""
        if len(self) >= MAX_KNOWN_CALLS:
            self.clear()
        self[key] = known
        return known

    def known(self, key: Callable[[], Hashable], plan: Callable[[], Known]) -> Known:
        """The entry of the call whose key `key()` reads, else `plan()`, kept under it (a key that
        cannot be read, or hashed, plans in full and keeps nothing)."""
        try:
            found = key()
            known = self.get(found)
        except KEY_ERRORS:
            return plan()
        return self.keep(found, plan()) if known is None else known


class GuardedCalls(CallTable):
    """A table of known calls keyed by a call's addresses (a list's thousands of tensors): each
    key holds up to `layouts` entries (views of other dtypes or shapes at the same addresses),
    each beside the check (`guard(tensors) -> bool`) that the tensors are laid out as when it was
    kept; the least recently used key dropped past `most` (the dict's own order: a key found is
    put back as the newest). A key is hashed once a call: the table holds its hash, beside it the
    key itself. Shared by threads: a race costs a new route at most."""

    MISSING = object()

    def __init__(self, most: int = 64, layouts: int = 4) -> None:
        super().__init__()
        self.most, self.layouts = most, layouts

    def find(self, key: tuple | None, tensors: list) -> object:
        """The entry kept for `key` whose guard `tensors` pass, else `MISSING`."""
        slot = None if key is None else hash(key)
        entry = None if slot is None else self.get(slot)
        if entry is None or entry[0] != key:
            return self.MISSING
        for same, known in entry[1]:
            if same(tensors):
                self[slot] = self.pop(slot, entry)  # the newest now
                return known
        return self.MISSING

    def keep_guarded(self, key: tuple, guard: Callable[[list], bool], known: object) -> None:
        """Keep `known` for `key` and the layouts `guard` checks, as the newest."""
        slot = hash(key)
        entry = self.pop(slot, None)
        kept = entry[1] if entry is not None and entry[0] == key else []
        self[slot] = (key, [(guard, known), *kept][: self.layouts])
        while len(self) > self.most:
            self.pop(next(iter(self)), None)

    def counts(self) -> list[int]:
        """How many layouts each kept key holds, least recent first."""
        return [len(kept) for _, kept in self.values()]

    def newest(self) -> list:
        """The newest key's entries, newest first."""
        return [known for _, known in next(reversed(self.values()))[1]]

    def __contains__(self, key: object) -> bool:
        entry = self.get(hash(key))
        return entry is not None and entry[0] == key


def forget_calls() -> None:
    """Empty every table of known calls and every dispatch: the next call of each is planned in
    full (tests that stand in for the GPU use it, so that nothing one planned is found by the
    next)."""
    for table in _TABLES:
        table.clear()


# (src span bytes, dst span bytes, equal strides): what a call's addresses are compared with.
Spans = tuple[int, int, bool]
_ALIGNMENT_BITS = GLOBAL_BASE_ALIGN - 1  # the low address bits an aligned base has clear
_DEFAULT_KEY = (None, None)  # the call key of a call with every option left out
# What a lookup reads off a pair's tensors, the key its launcher is found by: a plain tuple, built
# per lookup as a literal (a NamedTuple would cost host time on every call), read by the names below.
# Its first eight items are in every signature (`plan_copy` builds those alone where no dispatch
# read them); the dispatch's own add the call key and the devices' kinds.
Signature = tuple
DST_SHAPE = 0  # dst.shape
DST_STRIDES = 1  # dst.stride()
SRC_SHAPE = 2  # src.shape
SRC_STRIDES = 3  # src.stride()
DST_DTYPE = 4  # dst.dtype
SRC_DTYPE = 5  # src.dtype
DST_DEVICE = 6  # dst.get_device(): the CUDA device's index, -1 off a GPU
SRC_DEVICE = 7  # src.get_device()
CALL_KEY = 8  # the options as the caller passed them, with their types (`validate.typed`)
DEVICE_KINDS = 9  # None on a GPU; off one (every device's index -1), (dst.device.type, src.device.type)
PlanLauncher = Callable[[Any, Any, CopyOptions, Signature], Launcher]
CheckTensors = Callable[[Any, Any], None]


class CallKey:
    """One call key's state: its options, built once; which launcher its last full lookups found,
    how many times in a row, and how many in a row make it the launcher tried first; and the
    launcher tried first (`first`: (its launch, spans, the [dst shape, dst strides, src shape, src
    strides] a shape-generic one is pinned to, else None, the launcher); None: LOOKING)."""

    FIRST_NEEDED = 2
    MOST_NEEDED = 64
    __slots__ = ("options", "first", "launcher", "calls", "needed")

    def __init__(self, options: CopyOptions) -> None:
        self.options = options
        self.first: tuple | None = None
        self.launcher: Launcher | None = None
        self.calls = 0
        self.needed = self.FIRST_NEEDED

    def count(self, launcher: Launcher) -> bool:
        """Count a call served by `launcher`; True when it is to be tried first from now on."""
        self.calls = self.calls + 1 if launcher is self.launcher else 1
        self.launcher = launcher
        return self.calls >= self.needed

    def rejected(self) -> None:
        """The launcher tried first refused a call: ask twice as many calls in a row next time."""
        self.first = None
        self.needed = min(2 * self.needed, self.MOST_NEEDED)


_LOOKING = CallKey(CopyOptions())  # a call key seen for the first time: nothing tried first


class Dispatch:
    """The launchers of a pair family's calls (`copy_`, a reduce store): `plan_launcher(dst, src,
    options, facts)` (`facts`: what the lookup read off the tensors, `Signature`) checks a new
    configuration in full and returns its `runtime.launch.Launcher` (called (dst, src); one whose
    `checks_arguments` may be tried first; an empty copy's `moves_nothing`, and a torch op's
    `any_address`, need no aligned address). `check_tensors(dst, src)` raises the error that names
    what is wrong with arguments whose signature cannot be read (None: that read's own error).
    `fallback` serves a call whose base addresses are not 16-byte aligned (None: the alignment's
    TmaConfigError). `guard_of(dst, src)` (None: no guarded call) returns a check, run in C++,
    that two tensors are as these are (dtype, device, shape, strides, requires_grad, lazily
    applied bits), or None where it cannot: the default call's launcher in the FAST state, with
    its guard, serves `guarded` without a read of its own. Shared by threads: a race costs a
    rejection at most.

    Its caches, each filled once: per call key (`CallKey`: options, streak, the launcher tried
    first; the default call's, with its guard, in `_guarded`), and the launchers by signature (a
    `CallTable`)."""

    def __init__(
        self,
        plan_launcher: PlanLauncher,
        check_tensors: CheckTensors | None = None,
        fallback: Launcher | None = None,
        guard_of: Callable[[Any, Any], Callable[[Any, Any], bool] | None] | None = None,
    ) -> None:
        self.plan_launcher = plan_launcher
        self.check_tensors = check_tensors
        self.fallback = fallback
        self.guard_of = guard_of
        self._guarded: tuple | None = None  # the default call's (launch, guard, spans, launcher) (FAST)
        self._keys: dict[Hashable, CallKey] = {}
        self._launchers = CallTable()  # signature -> (launcher, spans)
        _TABLES.append(self)

    def guarded(self, dst: torch.Tensor, src: torch.Tensor) -> bool:
        """A default call (no option given) through the launcher the last ones took, where both
        tensors pass its guard (one C++ check for what the signature holds, requires_grad and the
        lazily applied bits: a call out of the plain path never passes) and the addresses meet
        no more than they did: launched, True. False: nothing done, the caller's full path
        decides (a launcher that refused the tensors is guarded no more)."""
        found = self._guarded
        if found is None:
            return False
        launch, guard, spans, _ = found
        try:
            if not guard(dst, src) or may_overlap(dst, src, spans):
                return False
        except TypeError:  # not tensors: the full path names what is wrong
            return False
        try:
            launch(dst, src)
        except (TypeError, ValueError):  # alignment: the full path decides
            self._guarded = None
            return False
        return True

    def call(
        self,
        dst: torch.Tensor,
        src: torch.Tensor,
        tile: tuple[int, int] | None,
        stages: int | None,
        options: dict[str, Any],
    ) -> torch.Tensor:
        """Move `src` into `dst` with these options; returns `dst`. The tensors are only duck-typed
        (shape, stride(), dtype, get_device(), data_ptr(), element_size()): the tests pass
        stand-ins."""
        try:
            # The options with their types (`validate.typed`): stages=4.0 does not find 4's launcher.
            key = (
                _DEFAULT_KEY
                if tile is None and stages is None and not options
                else typed((tile, stages, *options.items()))
            )
            state = self._keys.get(key, _LOOKING)
        except TypeError:  # an unhashable option: named, or a list tile taken as the tuple it means
            chosen = CopyOptions.of(tile=tile, stages=stages, **options)
            return self.call(dst, src, chosen.tile, chosen.stages, {n: getattr(chosen, n) for n in options})
        read = None  # [dst shape, dst strides, src shape, src strides], once read
        first = state.first
        if first is not None:
            launch, spans, pinned, launcher = first
            if pinned is None:  # tried blindly: its compiled function checks the rest
                if not may_overlap(dst, src, spans):
                    try:
                        launch(dst, src)
                        return dst
                    except (TypeError, ValueError):
                        state.rejected()
            else:  # shape-generic: only for the shape and strides it was checked for
                try:
                    read = [dst.shape, dst.stride(), src.shape, src.stride()]
                except Exception:  # not tensors: the lookup below names what is wrong
                    pass
                if read == pinned and not may_overlap(dst, src, spans):
                    try:
                        launch(dst, src)
                        if self._guarded is None and key is _DEFAULT_KEY:
                            self.guard(key, launcher, dst, src, spans)  # unguarded since a refusal
                        return dst
                    except (TypeError, ValueError):  # dtype, device or alignment: the lookup says
                        state.first = None
        try:
            # get_device(): the device's index (-1 on the CPU), cheaper than building a torch.device
            if read is None:
                read = [dst.shape, dst.stride(), src.shape, src.stride()]
            dst_shape, dst_strides, shape, src_strides = read
            dst_device, src_device = dst.get_device(), src.get_device()
            # Off a GPU the index is -1 on every device: the CPU's and the meta device's calls,
            # checked apart, are kept apart by the devices' kinds.
            kinds = None if src_device >= 0 and dst_device >= 0 else (dst.device.type, src.device.type)
            # `Signature`, its items in the order its names give
            signature = (dst_shape, dst_strides, shape, src_strides, dst.dtype, src.dtype,
                         dst_device, src_device, key, kinds)  # fmt: skip
            found = self._launchers.get(signature)
        except Exception:  # not tensors, or tensors without strides (sparse)
            if self.check_tensors is not None:
                self.check_tensors(dst, src)  # raises the error naming what is wrong
            raise
        if state is _LOOKING:
            state = self._keys[key] = CallKey(CopyOptions.of(tile=tile, stages=stages, **options))
        checked = False
        if found is None:
            spans = None
            # A pair of one shape and dtype on a GPU: its addresses are checked before anything is
            # planned or compiled (the planner names what else is wrong first).
            if (
                dst_shape == shape
                and signature[SRC_DTYPE] == signature[DST_DTYPE]
                and src_device >= 0
                and 0 not in shape
            ):
                spans = pair_spans(src, shape, src_strides, dst_strides)
                if not check_addresses(dst, src, spans, shape, src_strides, dst_strides, self.fallback):
                    self.fallback.launch(dst, src)
                    return dst
                checked = True
            launcher = self.plan_launcher(dst, src, state.options, signature)
            if spans is None:
                spans = pair_spans(src, shape, src_strides, dst_strides, dst_shape)
            found = self._launchers.keep(signature, (launcher, spans))
        launcher, spans = found
        if not (checked or launcher.moves_nothing or launcher.any_address) and not check_addresses(
            dst, src, spans, shape, src_strides, dst_strides, self.fallback
        ):
            self.fallback.launch(dst, src)
            return dst
        launcher.launch(dst, src)
        if launcher.shape_generic:
            state.first = (launcher.launch, spans, read, launcher)
            self.guard(key, launcher, dst, src, spans)
        elif launcher.checks_arguments and state.count(launcher):
            state.first = (launcher.launch, spans, None, launcher)
            self.guard(key, launcher, dst, src, spans)
        return dst

    def guard(self, key: Hashable, launcher: Launcher, dst: Any, src: Any, spans: Spans) -> None:
        """The default call's launcher now tried first: guarded too (`guarded`), where it checks
        its own arguments' addresses (a launcher that does not is never called unchecked)."""
        if key is not _DEFAULT_KEY or self.guard_of is None or not launcher.checks_arguments:
            return
        guard = self.guard_of(dst, src)
        self._guarded = None if guard is None else (launcher.launch, guard, spans, launcher)

    def clear(self) -> None:
        """Forget every launcher found and every streak: the next call of each is planned again."""
        self._guarded = None
        self._keys.clear()
        self._launchers.clear()

    # -- what tests and tools may read ------------------------------------------------------------
    def tried_first(self) -> dict[Hashable, Launcher]:
        """Call key -> the launcher tried first (the keys in the FAST state), shape-generic ones
        pinned to a shape and the default call's guarded one included."""
        tried = {key: state.first[3] for key, state in self._keys.items() if state.first is not None}
        if self._guarded is not None and _DEFAULT_KEY not in tried:
            tried[_DEFAULT_KEY] = self._guarded[3]
        return tried

    def streak(self, key: Hashable) -> CallKey | None:
        """The state of a call key (its streak), None before its first lookup."""
        return self._keys.get(key)

    def streaks(self) -> list[CallKey]:
        return list(self._keys.values())

    def launchers(self) -> list[Launcher]:
        """Every launcher found so far, one per signature."""
        return [found[0] for found in self._launchers.values()]


def pair_spans(
    src: Any, shape: tuple, src_strides: tuple, dst_strides: tuple, dst_shape: tuple | None = None
) -> Spans:
    """The spans a call's addresses are compared with (`Spans`); `dst_shape`: the destination's
    where a broadcast source's differs."""
    nbytes = src.element_size()
    return (span_bytes(shape, src_strides, nbytes), span_bytes(dst_shape or shape, dst_strides, nbytes),
            tuple(src_strides) == tuple(dst_strides))  # fmt: skip


def check_addresses(
    dst: Any,
    src: Any,
    spans: Spans,
    shape: tuple,
    src_strides: tuple,
    dst_strides: tuple,
    fallback: Launcher | None = None,
) -> bool:
    """What the signature cannot fix: no partial overlap (TmaConfigError where proven, or where no
    `fallback` serves the call), both bases 16-byte aligned (TmaConfigError); False where the
    `fallback` serves the call instead: unaligned bases, or spans that meet in layouts whose
    overlap only torch's own element-wise check can decide."""
    if may_overlap(dst, src, spans):
        if fallback is not None and overlap_of(dst, src, shape, src_strides, dst_strides) == "unknown":
            return False
        check_no_partial_overlap(dst, src, shape, src_strides, dst_strides)
    if (src.data_ptr() | dst.data_ptr()) & _ALIGNMENT_BITS:
        if fallback is not None:
            return False
        check_base_address(src.data_ptr())
        check_base_address(dst.data_ptr())
    return True


def may_overlap(dst: Any, src: Any, spans: Spans) -> bool:
    """Whether the destination's span meets the source's other than at the very same view (two
    address reads; `check_no_partial_overlap` then decides)."""
    try:
        source, destination = src.data_ptr(), dst.data_ptr()
    except Exception:  # not tensors: the lookup names what is wrong
        return True
    src_bytes, dst_bytes, same_strides = spans
    if source == destination and same_strides:
        return False
    return source < destination + dst_bytes and destination < source + src_bytes


def overlap_of(dst: Any, src: Any, shape: tuple, src_strides: tuple, dst_strides: tuple) -> str:
    """`validate.overlap_verdict` of a call's tensors: "disjoint", "shared" or "unknown"."""
    first, second = (tuple(src_strides), src.data_ptr()), (tuple(dst_strides), dst.data_ptr())
    return overlap_verdict(tuple(shape), first, second, src.element_size())


def check_no_partial_overlap(
    dst: Any, src: Any, shape: tuple, src_strides: tuple, dst_strides: tuple
) -> None:
    """Refuse a destination that shares memory with its source other than as the very same view
    (`validate.overlap_verdict`): a tile's store could land on elements another tile has yet to
    load. Disjoint slices of one tensor pass."""
    if overlap_of(dst, src, shape, src_strides, dst_strides) != "disjoint":
        raise TmaConfigError(
            f"dst (strides {tuple(dst_strides)}) partly overlaps src (strides {tuple(src_strides)}) in "
            "memory; TMA reads src while it writes dst: pass a copy of src (src.clone()), or the very "
            "same view"
        )
