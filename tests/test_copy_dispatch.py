"""How `tmakit.copy_` finds its launcher, on a CPU: stand-in tensors and launchers.

Once a launcher has served two calls in a row with the same knobs, the next call tries it
first and reads nothing off the tensors; a launcher that rejects the tensors (as a TVM-FFI
function does, before it launches) sends the call to the full lookup, and each rejection doubles
the calls in a row needed next time, so callers who keep changing configurations soon stop
paying rejections. Only a launcher that checks its arguments is tried that way."""

from __future__ import annotations

import math

import pytest

from tmakit import TmaConfigError
from tmakit.runtime.dispatch import Dispatch
from tmakit.runtime.launch import Launcher


class StandInTensor:
    """What `copy_` reads off a torch tensor, with a count of the reads that build the key."""

    def __init__(self, shape: tuple[int, ...], address: int = 4096, dtype: str = "float16") -> None:
        self.shape, self.dtype, self.address, self.key_reads = shape, dtype, address, 0

    def stride(self) -> tuple[int, ...]:
        self.key_reads += 1
        return tuple(math.prod(self.shape[i + 1 :]) for i in range(len(self.shape)))

    def get_device(self) -> int:
        return 0

    def data_ptr(self) -> int:
        return self.address

    def element_size(self) -> int:
        return 2


class StandInLauncher:
    """Accepts only tensors of the shape it was copies.planned for, as a compiled TVM-FFI function does
    (it raises ValueError before launching otherwise)."""

    def __init__(self, shape: tuple[int, ...], checks_arguments: bool) -> None:
        self.shape, self.launches, self.rejections = shape, [], 0
        if checks_arguments:
            self.checks_arguments = True

    def __call__(self, dst: StandInTensor, src: StandInTensor) -> None:
        if getattr(self, "checks_arguments", False):
            if (src.shape, dst.shape) != (self.shape, self.shape):
                self.rejections += 1
                raise ValueError(f"Mismatched Tensor: expected shape {self.shape}")
            if (src.address | dst.address) % 16:
                self.rejections += 1
                raise ValueError("Misaligned Tensor data, expected data alignment=16 bytes")
        self.launches.append((src, dst))


class Copies:
    """A `Dispatch` whose planner makes stand-in launchers, and `copy_` called as the API calls it."""

    def __init__(self, checks_arguments: bool = True) -> None:
        self.planned: list[StandInLauncher] = []
        self.checks_arguments = checks_arguments
        self.dispatch = Dispatch(self.plan)

    def plan(self, dst, src, options, facts):
        self.planned.append(StandInLauncher(src.shape, self.checks_arguments))
        return Launcher(self.planned[-1], checks_arguments=self.checks_arguments)

    def copy_(self, dst, src, tile=None, stages=None, **options):
        return self.dispatch.call(dst, src, tile, stages, options)


@pytest.fixture
def copies():
    return Copies()


def pair(shape: tuple[int, ...]) -> tuple[StandInTensor, StandInTensor]:
    return StandInTensor(shape), StandInTensor(shape)


def test_a_repeated_copy_reads_no_key_off_the_tensors(copies):
    dst, src = pair((256, 512))
    copies.copy_(dst, src)
    copies.copy_(dst, src)  # the second call in a row: from now on its launcher is tried first
    reads = src.key_reads + dst.key_reads
    for _ in range(3):
        assert copies.copy_(dst, src) is dst
    assert len(copies.planned) == 1 and len(copies.planned[0].launches) == 5
    assert src.key_reads + dst.key_reads == reads  # the three repeats built no key


def test_a_rejected_launcher_falls_back_to_the_full_lookup(copies):
    small, large = pair((256, 512)), pair((512, 512))
    # small's launcher is tried first after 2 calls, rejects large (4 in a row needed now),
    # large's is tried first after 4 calls and rejects small; the lookup finds small's again.
    for tensors in (small, small, large, large, large, large, small):
        assert copies.copy_(*tensors) is tensors[0]
    assert len(copies.planned) == 2
    assert [len(p.launches) for p in copies.planned] == [3, 4]
    assert [p.rejections for p in copies.planned] == [1, 1]


def test_alternating_configurations_pay_no_rejection(copies):
    small, large = pair((256, 512)), pair((512, 512))
    for _ in range(4):
        copies.copy_(*small)
        copies.copy_(*large)
    assert [len(p.launches) for p in copies.planned] == [4, 4]
    assert [p.rejections for p in copies.planned] == [0, 0]


@pytest.mark.parametrize("run", [2, 3, 5])
def test_changing_configurations_soon_stop_paying_rejections(copies, run):
    """Runs of `run` calls of one configuration between calls of another: rejections stop once
    the calls needed in a row have doubled past the run."""
    small, large = pair((256, 512)), pair((512, 512))
    for _ in range(20):
        for _ in range(run):
            copies.copy_(*small)
        copies.copy_(*large)
    rejections = sum(p.rejections for p in copies.planned)
    assert 1 <= rejections <= run.bit_length()  # 2 -> 1, 3 -> 1, 5 -> 2 (needed 2, 4, 8)
    assert [len(p.launches) for p in copies.planned] == [20 * run, 20]


def test_knobs_have_their_own_launchers(copies):
    dst, src = pair((256, 512))
    for knobs in ({}, {}, {"stages": 4}, {"stages": 4}, {}, {"stages": 4}):
        copies.copy_(dst, src, **knobs)
    assert len(copies.planned) == 2 and [len(p.launches) for p in copies.planned] == [3, 3]
    assert [p.rejections for p in copies.planned] == [0, 0]


def test_a_launcher_that_does_not_check_is_never_tried_first():
    copies = Copies(checks_arguments=False)
    dst, src = pair((256, 512))
    for _ in range(3):
        copies.copy_(dst, src)
    reads = src.key_reads
    copies.copy_(dst, src)
    assert src.key_reads > reads  # the key was built: the plain launch path checks nothing
    assert copies.dispatch.tried_first() == {}


@pytest.mark.parametrize("primed", [False, True])
def test_a_misaligned_pointer_is_refused_before_any_launch(copies, primed):
    """On the full lookup, and after the launcher tried first rejected it."""
    src, dst = pair((256, 512))
    for _ in range(3 if primed else 0):
        copies.copy_(dst, src)
    assert bool(copies.dispatch.tried_first()) is primed
    with pytest.raises(TmaConfigError, match="16"):
        copies.copy_(StandInTensor((256, 512), address=4096 + (1 << 20) + 2), src)
    if not primed:  # refused before anything is planned (compiled)
        assert copies.planned == []
        return
    assert len(copies.planned) == 1 and len(copies.planned[0].launches) == 3
    assert copies.planned[0].rejections == 1


# -- shape-generic launchers: pinned to the shape they were checked for ---------------------------
class GenericLauncher(StandInLauncher):
    """One launcher for every shape of its class: it takes any shape, as a shape-generic compiled
    function does, so the dispatch must never try it on a shape its checks did not see."""

    def __init__(self) -> None:
        super().__init__((), checks_arguments=True)

    def __call__(self, dst: StandInTensor, src: StandInTensor) -> None:
        self.launches.append((src, dst))


class GenericCopies(Copies):
    """A planner whose every configuration is one class: the checks run once per new shape."""

    def __init__(self) -> None:
        super().__init__()
        self.launcher = GenericLauncher()
        self.record = Launcher(self.launcher, checks_arguments=True, shape_generic=True)
        self.checked: list[tuple[int, ...]] = []

    def plan(self, dst, src, options, facts):
        self.checked.append(src.shape)
        return self.record


def test_a_shape_generic_launcher_is_tried_first_only_for_the_shape_it_was_checked_for():
    copies = GenericCopies()
    small, large = pair((256, 512)), pair((512, 512))
    for tensors in (small, small, small, large, large, small):
        assert copies.copy_(*tensors) is tensors[0]
    # Each new shape was planned (checked) once; a shape seen before is found in the table; the
    # repeats of the last shape were launched without a lookup.
    assert copies.checked == [(256, 512), (512, 512)]
    assert len(copies.launcher.launches) == 6
    assert copies.dispatch.tried_first()[(None, None)] is copies.record


# -- the guarded default call: one C++ check of both tensors instead of Python's reads -------------
def test_a_guarded_call_launches_only_for_tensors_as_the_checked_ones():
    """Once the default call's checking launcher is tried first, `guarded` launches it for tensors
    that pass torch's tensor guard (dtype, device, shape, strides, requires_grad, lazily applied
    bits) and whose addresses meet no more than before; anything else is left to the full path
    (False, nothing launched), and a launcher that refuses its tensors is guarded no more."""
    torch = pytest.importorskip("torch")
    from tmakit.api.tensors import pair_guard

    planned = []

    def plan(dst, src, options, facts):
        def launch(d, s):
            if s.data_ptr() % 16 or d.data_ptr() % 16:
                raise ValueError("Misaligned Tensor data, expected data alignment=16 bytes")
            launches.append((s, d))

        planned.append(Launcher(launch, checks_arguments=True, shape_generic=True))
        return planned[-1]

    launches: list = []
    dispatch = Dispatch(plan, guard_of=pair_guard)
    src, dst = torch.arange(64.0).view(8, 8), torch.zeros(8, 8)
    assert not dispatch.guarded(dst, src)  # nothing checked yet
    dispatch.call(dst, src, None, None, {})
    assert len(planned) == 1 and len(launches) == 1
    assert dispatch.guarded(dst, src) and len(launches) == 2 and len(planned) == 1
    assert dispatch.guarded(torch.zeros(8, 8), torch.ones(8, 8))  # other tensors of the same layout
    unlike = {
        "another shape": (torch.zeros(4, 16), torch.ones(4, 16)),
        "another dtype": (torch.zeros(8, 8, dtype=torch.float64), torch.ones(8, 8, dtype=torch.float64)),
        "transposed": (torch.zeros(8, 8).t(), torch.ones(8, 8)),
        "requires grad": (torch.zeros(8, 8), torch.ones(8, 8, requires_grad=True)),
        "a negative view": (torch.zeros(8, 8), torch.ones(8, 8)._neg_view()),
        "not a tensor": (torch.zeros(8, 8), [[1.0] * 8] * 8),
    }
    for what, (d, s) in unlike.items():
        count = len(launches)
        assert not dispatch.guarded(d, s) and len(launches) == count, what
    memory = torch.zeros(80)
    assert not dispatch.guarded(memory[:64].view(8, 8), memory[8:72].view(8, 8))  # partly the same bytes
    unaligned = torch.zeros(65)[1:].view(8, 8)
    assert not dispatch.guarded(unaligned, src) and dispatch._guarded is None  # refused: guarded no more
    assert not dispatch.guarded(dst, src)


def test_only_the_default_call_with_a_checking_launcher_is_guarded():
    """A call with options, a launcher that does not check its own arguments (its addresses are
    checked on every call) and a dispatch without guard_of never take the guarded path."""
    torch = pytest.importorskip("torch")
    from tmakit.api.tensors import pair_guard

    def plan_with(checks: bool):
        def plan(dst, src, options, facts):
            return Launcher(lambda d, s: None, checks_arguments=checks, shape_generic=checks)

        return plan

    src, dst = torch.ones(8, 8), torch.zeros(8, 8)
    for dispatch, options in (
        (Dispatch(plan_with(True), guard_of=pair_guard), {"store_depth": 2}),
        (Dispatch(plan_with(False), guard_of=pair_guard), {}),
        (Dispatch(plan_with(True)), {}),
    ):
        for _ in range(3):
            dispatch.call(dst, src, None, None, options)
        assert not dispatch.guarded(dst, src)


def test_the_guarded_launcher_is_tried_first_after_its_pin_is_dropped():
    """A pinned launcher that refuses a destination of another dtype loses its pin, yet keeps
    serving the default call guarded: `tried_first` names it (what tools and tests read)."""
    torch = pytest.importorskip("torch")
    from tmakit.api.tensors import pair_guard

    def plan(dst, src, options, facts):
        same = src.dtype == dst.dtype  # else a fallback's launcher, which takes anything

        def launch(d, s):
            if same and s.dtype != d.dtype:
                raise TypeError("Mismatched Tensor: dtype")

        return Launcher(launch, checks_arguments=same, shape_generic=same)

    dispatch = Dispatch(plan, guard_of=pair_guard)
    src, dst = torch.ones(8, 8), torch.zeros(8, 8)
    dispatch.call(dst, src, None, None, {})
    first = dispatch.tried_first()[(None, None)]
    dispatch.call(torch.zeros(8, 8, dtype=torch.float64), src, None, None, {})  # drops the pin
    assert dispatch.guarded(dst, src) and dispatch.tried_first()[(None, None)] is first
