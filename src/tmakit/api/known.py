"""The calls an op has planned, by what defines them, so that a repeated call skips its planning.

A key holds what a call's plan is a function of (shapes, strides, dtypes, devices, the arguments
with their types, so that 3.0 does not find 3's plan); what it cannot hold, where the tensors lie,
the op checks on every call. Reading a key off an argument that is not a dense torch tensor fails
(AttributeError, TypeError for an unhashable value, RuntimeError for a nested or sparse tensor):
such a call is planned in full, and its checks name what is wrong."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

Known = TypeVar("Known")
KEY_ERRORS = (AttributeError, TypeError, RuntimeError)  # an argument a key cannot be read off
MAX_KNOWN_CALLS = 1024  # a caller of ever new shapes does not grow a table without bound
_TABLES: list = []  # every table of known calls, and what `forgotten_with_calls` names


def calls_table() -> dict:
    """A new, empty table of known calls for one op (`forget_calls` empties them all)."""
    table: dict = {}
    _TABLES.append(table)
    return table


def forgotten_with_calls(known: Known) -> Known:
    """`known` (anything with a `clear()`: a dispatch's state), emptied with the tables by
    `forget_calls`."""
    _TABLES.append(known)
    return known


def forget_calls() -> None:
    """Empty every op's table: the next call of each is planned in full (tests that stand in for
    the GPU use it, so that nothing one planned is found by the next)."""
    for table in _TABLES:
        table.clear()


def known_call(table: dict[Hashable, Known], key: Callable[[], Hashable], plan: Callable[[], Known]) -> Known:
    """`table`'s entry for the call whose key `key()` reads, else `plan()` (kept under it)."""
    try:
        found = key()
        known = table.get(found)
    except KEY_ERRORS:
        return plan()
    if known is None:
        known = plan()
        if len(table) >= MAX_KNOWN_CALLS:
            table.clear()
        table[found] = known
    return known
