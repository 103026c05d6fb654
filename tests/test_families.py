"""Kernel families as data: the studies the bench command reads (a family package's, through the
registry, and those of the modules on `tmakit.families`'s path). That a new family is one package,
a registry line and its docs: tests/test_toy_family.py."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

import tmakit.families
from tmakit import registry
from tmakit.cli import build_parser
from tmakit.families import Family, chosen, families, tabled_study

BUILT_IN = {"load", "copy", "transpose", "reduce", "im2col", "multicast", "cluster-dot"}


def kernel_choices() -> tuple[str, ...]:
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return tuple(commands.choices["bench"]._option_string_actions["--kernel"].choices)


def test_every_family_is_a_record_and_a_bench_kernel():
    found = families()
    assert BUILT_IN <= set(found)
    assert all(isinstance(family, Family) and family.name == name for name, family in found.items())
    assert set(kernel_choices()) == set(found)


def test_a_module_on_the_package_path_adds_its_studies(tmp_path, monkeypatch):
    """A study is found, not listed: a module of a folder added to `tmakit.families`'s path that
    defines `STUDIES` is read too."""
    (tmp_path / "found_study.py").write_text(
        "from tmakit.families import Family\n\n"
        "STUDIES = (Family('found', 'a study on the path', 'found', list, list, list),)\n"
    )
    monkeypatch.setattr(tmakit.families, "__path__", [*tmakit.families.__path__, str(tmp_path)])
    try:
        assert families()["found"].summary == "a study on the path"
    finally:
        sys.modules.pop("tmakit.families.found_study", None)


def test_only_chooses_parts_by_the_start_of_their_names():
    parts = ["copy 1 MiB", "copy 16 MiB", "add 1 MiB", "im2col"]
    assert chosen(argparse.Namespace(only=None), parts, str) == parts
    assert chosen(argparse.Namespace(only="copy 1 ,im2col"), parts, str) == ["copy 1 MiB", "im2col"]
    assert chosen(argparse.Namespace(only="copy 1"), parts, str) == ["copy 1 MiB", "copy 16 MiB"]
    assert chosen(argparse.Namespace(only="nothing"), parts, str) == []


def test_a_tabled_study_is_one_row_a_part_under_its_context():
    row = lambda part, rows: {"part": part, "rows": len(rows)}  # noqa: E731
    study = tabled_study("toy", "what it times", row, extra=1)
    document = study([("a", [1, 2]), ("b", [])], {"device": "x"})
    assert list(document) == ["study", "what", "extra", "context", "rows"]
    assert document["rows"] == [{"part": "a", "rows": 2}, {"part": "b", "rows": 0}]


def test_every_name_the_core_reads_from_a_family_is_there():
    """The core runs a family's piece by name (`registry.exporting(name, part)`: `verify` the load
    family's verifications, `explain --cluster` the cluster family's section, the bench the rows of
    --pipeline and --cluster): each name the source reads is in its part's `__all__`, so a rename
    fails here on a CPU rather than on the GPU paths that read it."""
    source = Path(tmakit.families.__file__).parents[1]
    read = {
        (name, part or "api")
        for path in source.rglob("*.py")
        for name, part in re.findall(r'registry\.exporting\("(\w+)"(?:, "(\w+)")?\)', path.read_text())
    }
    assert {("check_on_gpu", "check"), ("cluster_section", "explain"), ("pipeline_rows", "bench")} <= read
    for name, part in sorted(read):
        module = registry.exporting(name, part)
        assert callable(getattr(module, name)) or name.isupper(), (name, part)


def test_a_name_no_family_part_exports_is_refused():
    with pytest.raises(LookupError, match="no family's check exports 'compile_tile_load'"):
        registry.exporting("compile_tile_load", "check")  # the load family's launch part has it
    with pytest.raises(ValueError, match="no family part is named 'checks'"):
        registry.exporting("check_on_gpu", "checks")
