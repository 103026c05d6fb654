"""The rows study's cases and the calls it times, on the CPU."""

from __future__ import annotations

import pytest

from tmakit.families import family_named
from tmakit.rows import api
from tmakit.rows.bench import ROW_SIZES, RULE, calls, cases


def test_the_sweep_runs_strict_then_as_a_user_calls_both_from_16_bytes():
    every = cases()
    names = [case.name for case in every]
    assert len(set(names)) == len(names)
    strict = [c for c in every if c.strict and not c.label]
    rule = [c for c in every if not c.strict]
    assert {c.row_bytes for c in strict} == set(ROW_SIZES)
    assert all(c.label == RULE and c.name.startswith(f"{RULE}: ") for c in rule)
    for op in ("gather", "scatter", "add", "max"):
        assert [c.row_bytes for c in rule if c.op == op] == list(ROW_SIZES)
    assert min(ROW_SIZES) == 16


def test_only_rule_picks_the_rules_cases():
    class Options:
        only = "rule: gather"

    chosen = family_named("rows").plans(Options())
    assert [c.row_bytes for c in chosen] == list(ROW_SIZES)
    assert all(c.op == "gather" and not c.strict for c in chosen)


@pytest.mark.parametrize(
    "op, name",
    [
        ("gather", "gather_rows"),
        ("scatter", "scatter_rows_"),
        ("add", "index_add_"),
        ("max", "index_reduce_"),
    ],
)
def test_each_case_calls_tmakit_strict_or_not_as_it_says(monkeypatch, op, name):
    seen = []
    monkeypatch.setattr(api, name, lambda *args, **kwargs: seen.append(kwargs))
    for strict in (True, False):
        case = next(c for c in cases() if c.op == op and c.strict is strict)
        ours, _ = calls(case)
        ours("table", "index", "compact")
    assert [kwargs["strict"] for kwargs in seen] == [True, False]
    assert all(kwargs["check_index"] is False for kwargs in seen)
