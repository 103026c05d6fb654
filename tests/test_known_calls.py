"""A repeated call skips its planning (`tmakit.runtime.dispatch.CallTable`), never the checks of
where its tensors lie, and an argument no key can be read off is planned in full, whose checks name it."""

import contextlib
from types import SimpleNamespace

import pytest

import tmakit
from tmakit import TmaConfigError
from tmakit.runtime import dispatch
from tmakit.validate import typed


def test_a_known_call_is_planned_once_and_the_table_stays_bounded(monkeypatch):
    table, plans = dispatch.CallTable(), []

    def plan(value):
        plans.append(value)
        return value * 2

    assert [table.known(lambda: ("k", 1), lambda: plan(1)) for _ in range(3)] == [2, 2, 2]
    assert plans == [1]
    assert table.known(lambda: ["unhashable"], lambda: plan(5)) == 10  # planned, not kept
    assert table.known(lambda: None.shape, lambda: plan(6)) == 12  # no key: planned in full
    assert len(table) == 1 and plans == [1, 5, 6]
    monkeypatch.setattr(dispatch, "MAX_KNOWN_CALLS", 3)
    for key in range(10):
        table.known(lambda key=key: key, lambda key=key: key)
    assert len(table) <= 3
    dispatch.forget_calls()
    assert not table
    assert typed((3.0, 3)) != typed((3, 3)) and typed(True) != typed(1)
    assert typed((3, (1, 2))) == typed((3, (1, 2)))


def test_a_repeated_load_tiles_skips_the_planning_not_the_address_check(monkeypatch):
    torch = pytest.importorskip("torch")
    from tmakit.api import tensors as api_tensors
    from tmakit.load import api as api_load

    compiles, launches = [], []
    compiled = SimpleNamespace(function=lambda tensor, out: launches.append(tensor.shape))
    monkeypatch.setattr(api_tensors, "check_on_gpu", lambda tensor, name: None)
    monkeypatch.setattr(api_load, "tvm_ffi_available", lambda: True)
    monkeypatch.setattr(api_load, "compile_tile_load", lambda *a, **k: compiles.append(a) or compiled)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    x = torch.zeros((256, 512), dtype=torch.float16)
    for _ in range(3):
        assert api_load.load_tiles(x, (64, 256)).shape == (256, 512)
    assert len(compiles) == 1 and len(launches) == 3
    with pytest.raises(TmaConfigError, match="tile"):
        api_load.load_tiles(x, (64.0, 256))  # floats: not the key of (64, 256); the checks name it
    storage = torch.zeros(256 * 512 + 1, dtype=torch.float16)
    with pytest.raises(TmaConfigError, match="16"):
        api_load.load_tiles(storage[1:].view(256, 512), (64, 256))  # the same key, misaligned
    assert len(launches) == 3


@pytest.mark.parametrize(
    "good, bad",
    [
        ({"stages": 4}, {"stages": 4.0}),
        ({"pdl": True}, {"pdl": 1}),
        ({"tile": (64, 64)}, {"tile": (64.0, 64)}),
    ],
    ids=["stages", "pdl", "tile"],
)
def test_an_option_of_the_wrong_type_is_refused_after_its_equal_was_served(good, bad):
    """The dispatch's call key holds each option's type: 4.0 does not find 4's launcher."""
    torch = pytest.importorskip("torch")
    dst, src = torch.zeros(64, 64), torch.ones(64, 64)
    for op in (tmakit.copy_, tmakit.add_):
        op(dst, src, **good)
        with pytest.raises(TmaConfigError, match="copy option"):
            op(dst, src, **bad)
