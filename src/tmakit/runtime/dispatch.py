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
- FAST: the launcher is called first and nothing is read off the tensors.
- `needed` starts at 2 and doubles with each rejection, up to 64: raising costs about 15 us, so a
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
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from ..limits import GLOBAL_BASE_ALIGN
from ..plan import CopyOptions
from ..validate import check_base_address

if TYPE_CHECKING:
    import torch

Launcher = Callable[[Any, Any], None]
_ALIGNMENT_BITS = GLOBAL_BASE_ALIGN - 1  # the low address bits an aligned base has clear
# What a lookup reads off a copy's tensors, its first eight items: (src.shape, src.stride(),
# dst.shape, dst.stride(), src.dtype, dst.dtype, src.get_device(), dst.get_device(), ...).
TensorFacts = tuple
PlanLauncher = Callable[[Any, Any, CopyOptions, TensorFacts], Launcher]
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
    the lookup read off the tensors, `TensorFacts`) checks a new configuration in full and returns
    its launcher (a callable (src, dst); one whose
    `checks_arguments` is True may be tried first; one whose `moves_nothing` is True, an empty
    copy's, needs no aligned address). `check_tensors(dst, src)` raises the error that names what
    is wrong with arguments whose signature cannot be read (None: that read's own error). Shared
    by threads: a race costs a rejection at most."""

    MOST_SIGNATURES = 4096  # signatures remembered before the table starts again

    def __init__(self, plan_launcher: PlanLauncher, check_tensors: CheckTensors | None = None) -> None:
        self.plan_launcher = plan_launcher
        self.check_tensors = check_tensors
        self._launchers: dict[tuple, Launcher] = {}  # signature -> launcher
        self._streaks: dict[Hashable, Streak] = {}  # call key -> its streak
        self._tried_first: dict[Hashable, Launcher] = {}  # call key -> launcher (FAST)
        # call key -> (shape-generic launcher, the shape and strides it was checked for) (FAST)
        self._pinned: dict[Hashable, tuple] = {}
        self._options: dict[Hashable, CopyOptions] = {}  # call key -> its options, built once

    def copy_(
        self,
        dst: torch.Tensor,
        src: torch.Tensor,
        tile: tuple[int, int] | None,
        stages: int | None,
        options: dict[str, Any],
    ) -> torch.Tensor:
        """Copy `src` into `dst` with these options; returns `dst`. The tensors are only duck-typed
        (shape, stride(), dtype, get_device(), data_ptr()): the tests pass stand-ins."""
        key = (tile, stages, *options.items()) if options else (tile, stages)
        pinned = self._pinned.get(key)
        read = None  # [src shape, src strides, dst shape, dst strides], once read
        if pinned is not None:
            launcher, checked = pinned
            try:
                read = [src.shape, src.stride(), dst.shape, dst.stride()]
            except Exception:  # not tensors: the lookup below names what is wrong
                pass
            if read == checked:
                try:
                    launcher(src, dst)
                    return dst
                except (TypeError, ValueError):  # dtype, device or alignment: the lookup says
                    self._pinned.pop(key, None)
        launcher = self._tried_first.get(key)
        if launcher is not None:
            try:
                launcher(src, dst)
                return dst
            except (TypeError, ValueError):
                self._tried_first.pop(key, None)
                self._streaks[key].rejected()
        try:
            # get_device(): the device's index (-1 on the CPU), cheaper than building a torch.device
            if read is None:
                read = [src.shape, src.stride(), dst.shape, dst.stride()]
            shape, src_strides, dst_shape, dst_strides = read
            signature = (shape, src_strides, dst_shape, dst_strides, src.dtype, dst.dtype,
                         src.get_device(), dst.get_device(), key)  # fmt: skip
            launcher = self._launchers.get(signature)
        except Exception:  # not tensors, or tensors without strides (sparse)
            if self.check_tensors is not None:
                self.check_tensors(dst, src)  # raises the error naming what is wrong
            raise
        if launcher is None:
            copy_options = self._options.get(key)
            if copy_options is None:
                copy_options = self._options[key] = CopyOptions.of(tile=tile, stages=stages, **options)
            launcher = self.plan_launcher(dst, src, copy_options, signature)
            if len(self._launchers) >= self.MOST_SIGNATURES:
                self._launchers.clear()  # many shapes seen: forget them (their classes stay compiled)
            self._launchers[signature] = launcher
        misaligned = (src.data_ptr() | dst.data_ptr()) & _ALIGNMENT_BITS  # the rest is the signature's
        if misaligned and not getattr(launcher, "moves_nothing", False):
            check_base_address(src.data_ptr())
            check_base_address(dst.data_ptr())
        launcher(src, dst)
        if getattr(launcher, "shape_generic", False):
            self._pinned[key] = (launcher, read)
        elif getattr(launcher, "checks_arguments", False):
            self._pinned.pop(key, None)
            streak = self._streaks.setdefault(key, Streak())
            if streak.count(launcher):
                self._tried_first[key] = launcher
        return dst

    # -- what tests and tools may read ------------------------------------------------------------
    def tried_first(self) -> dict[Hashable, Launcher]:
        """Call key -> the launcher tried first (the keys in the FAST state), shape-generic ones
        pinned to a shape included."""
        return {**self._tried_first, **{key: pin[0] for key, pin in self._pinned.items()}}

    def streak(self, key: Hashable) -> Streak | None:
        """The streak of a call key, None before its first checked launch."""
        return self._streaks.get(key)

    def streaks(self) -> list[Streak]:
        return list(self._streaks.values())

    def launchers(self) -> list[Launcher]:
        """Every launcher found so far, one per signature."""
        return list(self._launchers.values())
