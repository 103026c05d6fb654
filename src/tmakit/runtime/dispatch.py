"""How `tmakit.copy_` finds the launcher for a call: a lookup by the tensors' signature, and a fast
path that skips it for a configuration repeated call after call.

Reading shapes and strides off two torch tensors costs about half as much host time as the launch
itself, so a caller who copies the same configuration again and again should not pay it. A
TVM-FFI launcher's compiled function checks every argument against what it was compiled for
(dtype, shape, strides, 16-byte alignment, one device for both tensors and its guard words) and
raises before it launches when one differs: such a launcher can be tried first.

The states, per call key (the options exactly as the caller passed them):

    LOOKING --(the same checking launcher served `needed` calls in a row)--> FAST
    FAST    --(the launcher tried first raised TypeError/ValueError)------> LOOKING, `needed` doubled
    FAST    --(it launched)----------------------------------------------> FAST

- LOOKING: the call builds the signature (shapes, strides, dtypes, devices, call key), finds its
  launcher or plans one (for a new shape of a known class: that shape's checks, no compile),
  checks both base addresses are 16-byte aligned, launches, and counts the streak of calls in a
  row served by that launcher.
- FAST: the launcher is called first and nothing is read off the tensors; for the default call
  (no option given) of a launcher that checks its arguments, one C++ tensor guard of both
  tensors (`guarded`) stands in for the plain-path checks and the shape reads.
- `needed` starts at 2 and doubles with each rejection, up to 64: raising costs many calls' time, so a
  caller alternating A, B never raises and one whose runs are A, A, B soon stops raising.
A launch error the DSL cannot parse also surfaces as ValueError: the copy is then launched again
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
from typing import TYPE_CHECKING, Any

from ..errors import TmaConfigError
from ..limits import GLOBAL_BASE_ALIGN
from ..plan import CopyOptions
from ..validate import check_base_address, overlap_verdict, span_bytes, typed
from .launch import Launcher

if TYPE_CHECKING:
    import torch

# (src span bytes, dst span bytes, equal strides): what a call's addresses are compared with.
Spans = tuple[int, int, bool]
_ALIGNMENT_BITS = GLOBAL_BASE_ALIGN - 1  # the low address bits an aligned base has clear
_DEFAULT_KEY = (None, None)  # the call key of a call with every option left out
# What a lookup reads off a copy's tensors, the key its launcher is found by: a plain tuple, built
# per lookup as a literal (a NamedTuple would cost host time on every call), read by the names below.
# Its first eight items are in every signature (`api.copy.plan_copy` builds those alone where no
# dispatch read them); the dispatch's own add the call key and the devices' kinds.
Signature = tuple
SRC_SHAPE = 0  # src.shape
SRC_STRIDES = 1  # src.stride()
DST_SHAPE = 2  # dst.shape
DST_STRIDES = 3  # dst.stride()
SRC_DTYPE = 4  # src.dtype
DST_DTYPE = 5  # dst.dtype
SRC_DEVICE = 6  # src.get_device(): the CUDA device's index, -1 off a GPU
DST_DEVICE = 7  # dst.get_device()
CALL_KEY = 8  # the options as the caller passed them, with their types (`validate.typed`)
DEVICE_KINDS = 9  # None on a GPU; off one (every device's index -1), (src.device.type, dst.device.type)
PlanLauncher = Callable[[Any, Any, CopyOptions, Signature], Launcher]
CheckTensors = Callable[[Any, Any], None]


class Streak:
    """Which launcher the last full lookups of one call key found, how many times in a row, and
    how many in a row make it the launcher tried first."""

    FIRST_NEEDED = 2
    MOST_NEEDED = 64

    def __init__(self) -> None:
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
        self.needed = min(2 * self.needed, self.MOST_NEEDED)


class CopyDispatch:
    """The launchers of `copy_` calls: `plan_launcher(dst, src, options, facts)` (`facts`: what
    the lookup read off the tensors, `Signature`) checks a new configuration in full and returns
    its launcher (`runtime.launch.Launcher`, called (src, dst); its attributes say how: one whose
    `checks_arguments` is True may be tried first; one whose `moves_nothing` is True, an empty
    copy's, needs no aligned address). `check_tensors(dst, src)` raises the error that names what
    is wrong with arguments whose signature cannot be read (None: that read's own error).
    `fallback(src, dst)` serves a call whose base addresses are not 16-byte aligned (None: the
    alignment's TmaConfigError); a launcher whose `any_address` is True takes any.
    `guard_of(src, dst)` (None: no guarded call) returns a check, run in C++, that two tensors
    are as these are (dtype, device, shape, strides, requires_grad, lazily applied bits), or None
    where it cannot: the default call's launcher in the FAST state, with its guard, serves
    `guarded` without a read of its own. Shared by threads: a race costs a rejection at most."""

    MOST_SIGNATURES = 4096  # signatures remembered before the table starts again

    def __init__(
        self,
        plan_launcher: PlanLauncher,
        check_tensors: CheckTensors | None = None,
        fallback: Launcher | None = None,
        guard_of: Callable[[Any, Any], Callable[[Any, Any], bool] | None] | None = None,
    ) -> None:
        self.plan_launcher = plan_launcher
        self.check_tensors = check_tensors
        self.fallback = fallback  # (src, dst): serves a call whose base addresses TMA cannot take
        self.guard_of = guard_of
        self._guarded: tuple | None = None  # the default call's (launcher, guard, spans) (FAST)
        self._launchers: dict[tuple, tuple[Launcher, Spans]] = {}  # signature -> launcher, spans
        self._streaks: dict[Hashable, Streak] = {}  # call key -> its streak
        self._tried_first: dict[Hashable, tuple[Launcher, Spans]] = {}  # call key -> launcher (FAST)
        # call key -> (shape-generic launcher, the shape and strides it was checked for, spans) (FAST)
        self._pinned: dict[Hashable, tuple] = {}
        self._options: dict[Hashable, CopyOptions] = {}  # call key -> its options, built once

    def guarded(self, dst: torch.Tensor, src: torch.Tensor) -> bool:
        """A default call (no option given) through the launcher the last ones took, where both
        tensors pass its guard (one C++ check for what the signature holds, requires_grad and the
        lazily applied bits: a call out of the plain path never passes) and the addresses meet
        no more than they did: launched, True. False: nothing done, the caller's full path
        decides (a launcher that refused the tensors is guarded no more)."""
        found = self._guarded
        if found is None:
            return False
        launcher, guard, spans = found
        try:
            if not guard(src, dst) or may_overlap(src, dst, spans):
                return False
        except TypeError:  # not tensors: the full path names what is wrong
            return False
        try:
            launcher(src, dst)
        except (TypeError, ValueError):  # alignment: the full path decides
            self._guarded = None
            return False
        return True

    def copy_(
        self,
        dst: torch.Tensor,
        src: torch.Tensor,
        tile: tuple[int, int] | None,
        stages: int | None,
        options: dict[str, Any],
    ) -> torch.Tensor:
        """Copy `src` into `dst` with these options; returns `dst`. The tensors are only duck-typed
        (shape, stride(), dtype, get_device(), data_ptr(), element_size()): the tests pass
        stand-ins."""
        try:
            # The options with their types (`validate.typed`): stages=4.0 does not find 4's launcher.
            key = (
                _DEFAULT_KEY
                if tile is None and stages is None and not options
                else typed((tile, stages, *options.items()))
            )
            pinned = self._pinned.get(key)
        except TypeError:  # an unhashable option: named, or a list tile taken as the tuple it means
            chosen = CopyOptions.of(tile=tile, stages=stages, **options)
            return self.copy_(dst, src, chosen.tile, chosen.stages, {n: getattr(chosen, n) for n in options})
        read = None  # [src shape, src strides, dst shape, dst strides], once read
        if pinned is not None:
            launcher, checked, spans = pinned
            try:
                read = [src.shape, src.stride(), dst.shape, dst.stride()]
            except Exception:  # not tensors: the lookup below names what is wrong
                pass
            if read == checked and not may_overlap(src, dst, spans):
                try:
                    launcher(src, dst)
                    if self._guarded is None and key is _DEFAULT_KEY and self.guard_of is not None:
                        self.guard(key, launcher, src, dst, spans)  # unguarded since a refusal
                    return dst
                except (TypeError, ValueError):  # dtype, device or alignment: the lookup says
                    self._pinned.pop(key, None)
        tried = self._tried_first.get(key)
        if tried is not None and not may_overlap(src, dst, tried[1]):
            try:
                tried[0](src, dst)
                return dst
            except (TypeError, ValueError):
                self._tried_first.pop(key, None)
                self._streaks[key].rejected()
        try:
            # get_device(): the device's index (-1 on the CPU), cheaper than building a torch.device
            if read is None:
                read = [src.shape, src.stride(), dst.shape, dst.stride()]
            shape, src_strides, dst_shape, dst_strides = read
            src_device, dst_device = src.get_device(), dst.get_device()
            # Off a GPU the index is -1 on every device: the CPU's and the meta device's calls,
            # checked apart, are kept apart by the devices' kinds.
            kinds = None if src_device >= 0 and dst_device >= 0 else (src.device.type, dst.device.type)
            # `Signature`, its items in the order its names give
            signature = (shape, src_strides, dst_shape, dst_strides, src.dtype, dst.dtype,
                         src_device, dst_device, key, kinds)  # fmt: skip
            found = self._launchers.get(signature)
        except Exception:  # not tensors, or tensors without strides (sparse)
            if self.check_tensors is not None:
                self.check_tensors(dst, src)  # raises the error naming what is wrong
            raise
        checked = False
        if found is None:
            copy_options = self._options.get(key)
            if copy_options is None:
                copy_options = self._options[key] = CopyOptions.of(tile=tile, stages=stages, **options)
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
                    self.fallback(src, dst)
                    return dst
                checked = True
            launcher = self.plan_launcher(dst, src, copy_options, signature)
            if spans is None:
                spans = pair_spans(src, shape, src_strides, dst_strides, dst_shape)
            if len(self._launchers) >= self.MOST_SIGNATURES:
                self._launchers.clear()  # many shapes seen: forget them (their classes stay compiled)
            self._launchers[signature] = found = (launcher, spans)
        launcher, spans = found
        if not checked and not getattr(launcher, "moves_nothing", False):
            if not getattr(launcher, "any_address", False) and not check_addresses(
                dst, src, spans, shape, src_strides, dst_strides, self.fallback
            ):
                self.fallback(src, dst)
                return dst
        launcher(src, dst)
        if getattr(launcher, "shape_generic", False):
            self._pinned[key] = (launcher, read, spans)
            self.guard(key, launcher, src, dst, spans)
        elif getattr(launcher, "checks_arguments", False):
            self._pinned.pop(key, None)
            streak = self._streaks.setdefault(key, Streak())
            if streak.count(launcher):
                self._tried_first[key] = (launcher, spans)
                self.guard(key, launcher, src, dst, spans)
        return dst

    def guard(self, key: Hashable, launcher: Launcher, src: Any, dst: Any, spans: Spans) -> None:
        """The default call's launcher now tried first: guarded too (`guarded`), where it checks
        its own arguments' addresses (a launcher that does not is never called unchecked)."""
        if (
            key is not _DEFAULT_KEY
            or self.guard_of is None
            or not getattr(launcher, "checks_arguments", False)
        ):
            return
        guard = self.guard_of(src, dst)
        self._guarded = None if guard is None else (launcher, guard, spans)

    def clear(self) -> None:
        """Forget every launcher found and every streak: the next call of each is planned again."""
        self._guarded = None
        for table in (self._launchers, self._streaks, self._tried_first, self._pinned, self._options):
            table.clear()

    # -- what tests and tools may read ------------------------------------------------------------
    def tried_first(self) -> dict[Hashable, Launcher]:
        """Call key -> the launcher tried first (the keys in the FAST state), shape-generic ones
        pinned to a shape and the default call's guarded one included."""
        tried = {key: found[0] for key, found in self._tried_first.items()}
        guarded = {} if self._guarded is None else {_DEFAULT_KEY: self._guarded[0]}
        return {**tried, **{key: pin[0] for key, pin in self._pinned.items()}, **guarded}

    def streak(self, key: Hashable) -> Streak | None:
        """The streak of a call key, None before its first checked launch."""
        return self._streaks.get(key)

    def streaks(self) -> list[Streak]:
        return list(self._streaks.values())

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
    if may_overlap(src, dst, spans):
        if fallback is not None and overlap_of(dst, src, shape, src_strides, dst_strides) == "unknown":
            return False
        check_no_partial_overlap(dst, src, shape, src_strides, dst_strides)
    if (src.data_ptr() | dst.data_ptr()) & _ALIGNMENT_BITS:
        if fallback is not None:
            return False
        check_base_address(src.data_ptr())
        check_base_address(dst.data_ptr())
    return True


def may_overlap(src: Any, dst: Any, spans: Spans) -> bool:
    """Whether the destination's span meets the source's other than at the very same view (two
    address reads; `check_no_partial_overlap` then decides)."""
    try:
        source, destination = src.data_ptr(), dst.data_ptr()
    except Exception:  # not tensors: the lookup names what is wrong
        return True
    return addresses_may_overlap(source, destination, spans)


def addresses_may_overlap(source: int, destination: int, spans: Spans) -> bool:
    """`may_overlap` on base addresses already read."""
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
