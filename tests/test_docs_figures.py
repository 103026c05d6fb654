"""The drop-in and host-cost figures the READMEs quote are their results files', as rounded there
(a figure written by hand drifts from the file it came from)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def span(values: list[float], digits: int = 2) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}x"


def test_the_drop_in_figures_are_the_studys():
    rows = json.loads((RESULTS / "dropin.json").read_text())["rows"]

    def ratios(prefix: str, key: str = "device_vs_faster_peer") -> list[float]:
        return [row[key] for row in rows if row["case"].startswith(prefix)]

    layers = [row for row in rows if row["case"].startswith("im2col") and "3x3" in row["case"]]
    stem = next(row for row in rows if "7x7" in row["case"])
    add_1 = next(row for row in rows if row["case"].startswith("add 1 MiB"))
    readme = " ".join((ROOT / "README.md").read_text().split())
    large_transposes = [
        row for row in rows if row["case"].startswith("transpose ") and "1 MiB" not in row["case"]
    ]
    assert (
        f"transposing copies {span(ratios('transpose '))}, im2col on ResNet-50's 3x3 layers "
        f"{span([row['device_vs_faster_peer'] for row in layers])}, "
        f"same-layout copies {span(ratios('copy '))}, "
        f"`add_` {add_1['device_vs_faster_peer']:.2f}x at 1 MiB"
    ) in readme
    assert f"is {span([row['eager_vs_torch'] for row in large_transposes])} torch's `copy_`" in readme
    assert f"ran {span([row['device_vs_faster_peer'] for row in layers])} faster" in readme
    assert (
        f"{span([row['eager_vs_torch'] for row in layers], 1)} faster than that expression eagerly" in readme
    )
    assert f"the 7x7 stem {stem['device_vs_faster_peer']:.2f}x inductor" in readme
    figures = (ROOT / "benchmarks" / "README.md").read_text()
    assert (
        f"copy {span(ratios('copy '))}, transposing {span(ratios('transpose '))}, "
        f"`add_` {add_1['device_vs_faster_peer']:.2f}x at 1 MiB"
    ) in figures
    assert f"im2col {span([row['device_vs_faster_peer'] for row in layers])} on the 3x3 layers" in figures
    assert f"and {stem['device_vs_faster_peer']:.2f}x on the 7x7 stem" in figures
    assert f"eagerly against torch {span([row['eager_vs_torch'] for row in rows])}" in figures


def test_the_host_cost_figures_are_the_studys():
    rows = json.loads((RESULTS / "host-cost.json").read_text())["rows"]
    copy = {row["key"]: row["us"] for row in rows if row["group"] == "copy"}
    new_shape = {row["key"]: row["us"] for row in rows if row["group"] == "new_shape"}
    figures = (ROOT / "benchmarks" / "README.md").read_text()
    assert (
        f"{copy['tmakit_copy_call_us']:.2f} us against torch's {copy['torch_copy_call_us']:.2f}; "
        f"a new shape {new_shape['new_shape_call_us']:.1f} us; the op {copy['tmakit_copy_op_call_us']:.2f} us"
    ) in figures
