"""Kernel families as data: the registry the bench command reads, and the proof that a new family
is three new files (a plan, a kernel, a record) and no edit elsewhere."""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

import pytest

import tmakit.families
from tmakit.cli import build_parser
from tmakit.families import Family, chosen, families, tabled_study

FIXTURES = Path(__file__).parent / "fixtures" / "toy_ring"
BUILT_IN = {"load", "copy", "transpose", "reduce", "im2col", "multicast", "cluster-dot"}


def kernel_choices() -> tuple[str, ...]:
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return tuple(commands.choices["bench"]._option_string_actions["--kernel"].choices)


def test_every_family_is_a_record_and_a_bench_kernel():
    found = families()
    assert BUILT_IN <= set(found)
    assert all(isinstance(family, Family) and family.name == name for name, family in found.items())
    assert set(kernel_choices()) == set(found)


@pytest.fixture
def toy_ring(tmp_path, monkeypatch):
    """The toy ring's three files in a temporary package directory: the plan and kernel modules
    importable, the record in a folder on `tmakit.families`'s path."""
    code, records = tmp_path / "toy", tmp_path / "families"
    code.mkdir()
    records.mkdir()
    shutil.copy(FIXTURES / "toy_ring_plan.py", code)
    shutil.copy(FIXTURES / "toy_ring_kernel.py", code)
    shutil.copy(FIXTURES / "toy_ring.py", records)
    monkeypatch.syspath_prepend(str(code))
    monkeypatch.setattr(tmakit.families, "__path__", [*tmakit.families.__path__, str(records)])
    return families()["toy-ring"]


def test_a_new_family_is_three_files(toy_ring):
    assert "toy-ring" in kernel_choices()
    ptx = toy_ring.compile(toy_ring.example(), keep_ptx=True).ptx
    assert re.search(r"cp\.async\.bulk\.tensor\.\dd\.shared::\w+\.global", ptx)  # a TMA load


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
