"""How `tmakit.copy_` finds its launcher, on a CPU: stand-in tensors and launchers.

A repeated call first tries the launcher of the last call with the same knobs and reads nothing
off the tensors; a launcher that rejects the tensors (as a TVM-FFI function does, before it
launches) sends the call to the full lookup, and only a launcher that checks its arguments is
tried that way."""

from __future__ import annotations

import math

import pytest

from tmakit import api


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


class StandInLauncher:
    """Accepts only tensors of the shape it was planned for, as a compiled TVM-FFI function does
    (it raises ValueError before launching otherwise)."""

    def __init__(self, shape: tuple[int, ...], checks_arguments: bool) -> None:
        self.shape, self.launches = shape, []
        if checks_arguments:
            self.checks_arguments = True

    def __call__(self, src: StandInTensor, dst: StandInTensor) -> None:
        if getattr(self, "checks_arguments", False) and (src.shape, dst.shape) != (self.shape, self.shape):
            raise ValueError(f"Mismatched Tensor: expected shape {self.shape}")
        self.launches.append((src, dst))


@pytest.fixture
def planned(monkeypatch):
    """Replace planning/compiling by stand-in launchers; returns the list of launchers planned."""
    planned: list[StandInLauncher] = []

    def plan(dst, src, *knobs, checks_arguments=True):
        planned.append(StandInLauncher(src.shape, checks_arguments))
        return planned[-1]

    monkeypatch.setattr(api, "_copy_launchers", {})
    monkeypatch.setattr(api, "_last_checked_launcher", {})
    monkeypatch.setattr(api, "_plan_copy", plan)
    return planned


def test_a_repeated_copy_reads_no_key_off_the_tensors(planned):
    src, dst = StandInTensor((256, 512)), StandInTensor((256, 512))
    api.copy_(dst, src)
    reads = src.key_reads + dst.key_reads
    for _ in range(3):
        assert api.copy_(dst, src) is dst
    assert len(planned) == 1 and len(planned[0].launches) == 4
    assert src.key_reads + dst.key_reads == reads  # the three repeats built no key


def test_a_rejected_launcher_falls_back_to_the_full_lookup(planned):
    small = (StandInTensor((256, 512)), StandInTensor((256, 512)))
    large = (StandInTensor((512, 512)), StandInTensor((512, 512)))
    api.copy_(*small)
    api.copy_(*large)  # the last launcher rejects it: planned anew
    api.copy_(*small)  # rejected by the large one's launcher: the lookup finds the first again
    assert len(planned) == 2
    assert [len(p.launches) for p in planned] == [2, 1]
    assert api.copy_(*small) is small[0] and len(planned[0].launches) == 3


def test_knobs_have_their_own_last_launcher(planned):
    src, dst = StandInTensor((256, 512)), StandInTensor((256, 512))
    api.copy_(dst, src)
    api.copy_(dst, src, stages=4)
    api.copy_(dst, src)
    assert len(planned) == 2 and [len(p.launches) for p in planned] == [2, 1]


def test_a_launcher_that_does_not_check_is_never_tried_first(planned, monkeypatch):
    def unchecked(dst, src, *knobs):
        planned.append(StandInLauncher(src.shape, checks_arguments=False))
        return planned[-1]

    monkeypatch.setattr(api, "_plan_copy", unchecked)
    src, dst = StandInTensor((256, 512)), StandInTensor((256, 512))
    api.copy_(dst, src)
    reads = src.key_reads
    api.copy_(dst, src)
    assert src.key_reads > reads  # the key was built: the plain launch path checks nothing
    assert api._last_checked_launcher == {}


def test_a_misaligned_pointer_is_refused_on_the_full_lookup(planned):
    src, dst = StandInTensor((256, 512)), StandInTensor((256, 512), address=4096 + 2)
    with pytest.raises(api.TmaConfigError, match="16"):
        api.copy_(dst, src)
    assert planned[0].launches == []
