"""Statements the README and docs make about the code, each read from the code it describes (the
measured figures are tests/test_docs_figures.py's)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import pkgutil
import re

import pytest

from entry_point import ROOT
from tmakit.errors import TmaConfigError
from tmakit.plan import CopyOptions


def text(*parts: str) -> str:
    return " ".join((ROOT.joinpath(*parts)).read_text().split())


def test_the_options_reduce_into_refuses_are_the_ones_the_docs_name():
    """`reduce_into_` takes every `CopyOptions` field but the ones it refuses set (a reduce
    stores through the tensors' own tensor maps); the README and docs/api.md name exactly those."""
    from tmakit.reduce.call import reduce_options

    def refused(field: dataclasses.Field) -> bool:
        try:
            reduce_options(None, None, {field.name: True})
        except TmaConfigError:
            return True
        return False

    flags = [f for f in dataclasses.fields(CopyOptions) if f.type in ("bool", bool) and f.default is False]
    names = [f.name for f in flags if refused(f)]
    assert names == ["as_rows", "bulk"]
    assert "refuses `as_rows=True` and `bulk=True`" in text("README.md")
    assert "but `as_rows` and `bulk`, which it refuses" in text("docs", "api.md")
    assert "refuses `as_rows=True` and `bulk=True`, as the function does" in text("docs", "api.md")


def test_the_software_the_readme_says_the_gpu_checks_ran_is_gpu_checks():
    """The README's requirements name the DSL, driver, CUDA and torch the committed GPU check ran."""
    context = json.loads((ROOT / "benchmarks" / "results" / "gpu-check.json").read_text())["context"]
    torch = ".".join(context["torch"].split("+")[0].split(".")[:2])
    readme = text("README.md")
    assert f"the GPU checks ran {context['nvidia_cutlass_dsl']}" in readme
    driver = context["driver"].split(".")[0]
    assert f"(driver {driver}, CUDA {context['cuda_runtime']}, torch {torch})" in readme


FILE_SUFFIXES = {"py", "json", "md", "png", "log", "csv", "tgz", "sh", "txt"}  # a file's name, not a module's


def test_every_module_and_name_the_docs_cite_exists():
    """A dotted name in backticks that starts at a tmakit module (`patches.route.im2col_call`,
    `tmakit.plan.tuning`) is one: a module renamed or a name moved fails here, not in a reader's
    hands."""
    pytest.importorskip("torch", reason="some of the cited modules import torch")
    import tmakit

    packages = {module.name for module in pkgutil.iter_modules(tmakit.__path__)} | {"tmakit", *tmakit.__all__}

    def exists(dotted: str) -> bool:
        parts = dotted.split(".")
        parts = parts if parts[0] == "tmakit" else ["tmakit", *parts]
        for cut in range(len(parts), 0, -1):
            try:
                found = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            for name in parts[cut:]:
                if not hasattr(found, name):
                    return False
                found = getattr(found, name)
            return True
        return False

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]
    cited = {
        (page.name, name)
        for page in pages
        for name in re.findall(r"`([a-z_]\w*(?:\.\w+)+)`", page.read_text())
        if name.split(".")[0] in packages and name.rpartition(".")[2] not in FILE_SUFFIXES
    }
    assert len(cited) > 30
    missing = sorted(f"{page}: {name}" for page, name in cited if not exists(name))
    assert missing == [], "\n".join(missing)
