"""A family calls another family's function without importing it (`tmakit.registry`): the name it
calls is bound through the registry at its first call, and from then on is the function itself,
so the call path pays one global read, what an imported name costs."""

from __future__ import annotations

import importlib

import pytest

import tmakit
from tmakit import registry


def test_a_bound_name_becomes_the_function_at_its_first_call():
    torch = pytest.importorskip("torch")
    namespace: dict = {}
    namespace["copy_path"] = stand_in = registry.bound_on_first_call("copy_path", namespace)
    assert stand_in is not tmakit.copy_path and stand_in.__name__ == "copy_path"
    x = torch.zeros(4, 4)
    assert stand_in(torch.empty_like(x), x) == tmakit.copy_path(torch.empty_like(x), x)
    assert namespace["copy_path"] is tmakit.copy_path  # later calls: one global read


def test_the_families_that_call_the_copy_hold_its_functions_after_a_first_call():
    torch = pytest.importorskip("torch")
    x = torch.zeros(4, 4)
    many_call = importlib.import_module("tmakit.many.call")
    im2col_api = importlib.import_module("tmakit.patches.api")  # the module: tmakit.im2col is the function
    for module, name in ((many_call, "copy_path"), (many_call, "copy_"), (im2col_api, "copy_")):
        getattr(module, name)(torch.empty_like(x), x)
        assert getattr(module, name) is getattr(tmakit, name), (module.__name__, name)


def test_a_name_no_family_exports_is_refused_at_the_first_call():
    namespace: dict = {}
    namespace["no_such_op"] = registry.bound_on_first_call("no_such_op", namespace)
    with pytest.raises(LookupError, match="no family's api exports 'no_such_op'"):
        namespace["no_such_op"]()
