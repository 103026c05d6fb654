"""docs/reference.md is `scripts/api_reference.py`'s output for the current source, and every
public function documents its arguments, what it returns and what it raises."""

from __future__ import annotations

import importlib.util
import inspect

import pytest

import tmakit
from entry_point import ROOT


def test_every_public_function_has_args_returns_and_raises():
    missing = [
        f"{name}: {section}"
        for name in tmakit.__all__
        if inspect.isfunction(getattr(tmakit, name))
        for section in ("Args:", "Returns:", "Raises:")
        if section not in (inspect.getdoc(getattr(tmakit, name)) or "")
    ]
    assert missing == []


def test_the_reference_page_is_current():
    pytest.importorskip("torch", reason="the page lists the torch ops")
    spec = importlib.util.spec_from_file_location("api_reference", ROOT / "scripts" / "api_reference.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert (ROOT / "docs" / "reference.md").read_text() == script.page(), (
        "docs/reference.md is stale: run python scripts/api_reference.py"
    )
