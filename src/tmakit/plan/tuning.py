"""The measured thresholds: every number a measurement chose that decides which kernel, or torch's
op, serves a call, or how a default kernel is shaped. Pure Python. Each is a record (`Tuned`) of
its value, what it decides, why this value, the module that reads it, and the committed results
(`benchmarks/results/FILE`, a key path inside it) that justify it; the records are a table of
data, the package's data/tuning.json, read here once. tests/test_tuning.py resolves every key path
and checks that each module reads its value from here.

A new run of a study that moves a threshold changes its entry in data/tuning.json, and nothing
else. A default that no committed results compare stays in its module, saying so, until a run
does (benchmarks/probes/copy_defaults.py measures the copy's and the rows ring's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class BeyondL2:
    """A row of the measured rule tables: calls that move more than `share_of_l2` of the L2 in
    bytes, for the torch dtypes measured (`dtypes`; None: every dtype)."""

    share_of_l2: float
    dtypes: tuple[str, ...] | None = None

    def covers(self, dtype: str, moved_bytes: int, l2_bytes: int | None) -> bool:
        """Whether a call on `dtype` (torch's name) moving `moved_bytes` falls under the row (never
        without an L2 size: a pure plan, a strict call)."""
        if l2_bytes is None or (self.dtypes is not None and dtype not in self.dtypes):
            return False
        return moved_bytes > self.share_of_l2 * l2_bytes


@dataclass(frozen=True)
class Results:
    """Where a threshold's measurement lies: a file under benchmarks/results/ and the key path of
    the part inside it (dict keys, outermost first)."""

    file: str
    key: tuple[str, ...]


@dataclass(frozen=True)
class Tuned:
    """One measured threshold: its `value`, what it `decides`, `why` the measurement chose this
    value, the module that reads it (`used_by`, under the same name as the table's) and the
    results that justify it (`results`)."""

    value: Any
    decides: str
    why: str
    used_by: str
    results: tuple[Results, ...]


def _value(node: Any) -> Any:
    """A threshold's value as its module reads it, from the table's JSON: arrays as tuples (spans,
    tiles), an object with a `share_of_l2` as a `BeyondL2` row, keys of digits as ints (element
    sizes)."""
    if isinstance(node, list):
        return tuple(map(_value, node))
    if isinstance(node, dict) and "share_of_l2" in node:
        return BeyondL2(**{key: _value(item) for key, item in node.items()})
    if isinstance(node, dict):
        return {int(key) if key.isdigit() else key: _value(item) for key, item in node.items()}
    return node


def _tuned(entry: dict[str, Any]) -> Tuned:
    results = tuple(Results(part["file"], tuple(part["key"])) for part in entry["results"])
    return Tuned(_value(entry["value"]), entry["decides"], entry["why"], entry["used_by"], results)


# Read beside this module, not by the name `tmakit`: a copied tree (scripts/ab_bench.py) reads its own.
_TABLE = json.loads((Path(__file__).parent.parent / "data" / "tuning.json").read_text())
TUNING: dict[str, Tuned] = {name: _tuned(entry) for name, entry in _TABLE.items() if name != "about"}
