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


def test_the_reference_page_has_every_op_and_every_constructor():
    """Every op `import tmakit.ops` registers (each family's, each overload) with the schema torch
    holds, and each public class's constructor."""
    torch = pytest.importorskip("torch", reason="the page lists the torch ops")
    import tmakit.ops  # noqa: F401

    page = (ROOT / "docs" / "reference.md").read_text()
    ops = sorted(
        n.removeprefix("tmakit::") for n in torch._C._dispatch_get_all_op_names() if n.startswith("tmakit::")
    )
    assert {"gather_rows", "index_reduce_", "copy_many_", "pack", "unpack_", "moe_combine_grad"} <= set(ops)
    for name in ops:
        op, _, overload = name.partition(".")
        schema = getattr(getattr(torch.ops.tmakit, op), overload or "default")._schema
        assert f"#### torch.ops.tmakit.{op}.{overload or 'default'}\n\n```text\n{schema}\n```" in page
    classes = [name for name in tmakit.__all__ if inspect.isclass(getattr(tmakit, name))]
    assert classes and all(f"\n```text\ntmakit.{name}(" in page for name in classes)
