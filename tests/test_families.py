"""Kernel families as data: the studies the bench command reads (a family package's, through the
registry, and those of the modules on `tmakit.families`'s path). That a new family is one package,
a registry line and its docs: tests/test_toy_family.py."""

from __future__ import annotations

import argparse
import sys

import tmakit.families
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
