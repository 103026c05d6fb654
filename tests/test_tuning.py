"""The measured thresholds' table (`tmakit.plan.tuning`): every entry names committed results that
exist, and every module that decides by a threshold reads the table's own object; the probe that
would measure the defaults the table does not hold plans its cases on the CPU."""

import importlib
import json
import os
import subprocess
import sys

import pytest

from entry_point import ROOT
from tmakit.plan.tuning import TUNING

RESULTS = ROOT / "benchmarks" / "results"


@pytest.mark.parametrize("name", sorted(TUNING))
def test_each_threshold_names_a_results_part_that_exists(name):
    """A renamed results file, or a part or key moved inside it, fails here."""
    entry = TUNING[name]
    assert entry.results, f"{name} names no results"
    for results in entry.results:
        path = RESULTS / results.file
        assert path.is_file(), f"{name}: benchmarks/results/{results.file} does not exist"
        node = json.loads(path.read_text())
        for depth, key in enumerate(results.key):
            assert isinstance(node, dict) and key in node, (
                f"{name}: {results.file} has no key {'.'.join(results.key[: depth + 1])}"
            )
            node = node[key]
        assert node, f"{name}: {results.file} {'.'.join(results.key)} is empty"


@pytest.mark.parametrize("name", sorted(TUNING))
def test_each_threshold_is_what_its_module_reads(name):
    """The module named reads the table's value under the table's name: the object, not a copy."""
    entry = TUNING[name]
    module = importlib.import_module(entry.used_by)
    assert getattr(module, name) is entry.value


@pytest.mark.parametrize("name", sorted(TUNING))
def test_each_threshold_says_what_it_decides_and_why(name):
    entry = TUNING[name]
    assert entry.decides.strip() and entry.why.strip()


def test_the_defaults_probe_plans_its_cases_on_the_cpu():
    """benchmarks/probes/copy_defaults.py, which measures the defaults no committed results compare,
    as the lead runs it: its dry run resolves every default it studies (a renamed one fails here)
    and lists every group."""
    probe = ROOT / "benchmarks" / "probes" / "copy_defaults.py"
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, str(probe), "--dry-run"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for group in ("copy-tile-fp16", "transpose-ring", "rows-view-small", "rows-ring"):
        assert f"\n{group}: " in done.stdout
    assert "tmakit.rows.plan.DEFAULT_ROW_STAGES = " in done.stdout
