"""The kernel families, a line each: what the core and the front ends (the `tmakit` facade, the
torch ops, the bench, `plan` and `explain`) read a family through, so that no module outside a
family names it and every import points from a family to the core.

A family is a package whose `__init__` holds its `FAMILY` record (plain data: importing it loads
neither torch nor the DSL). Its parts are modules of fixed names, each with one role (checked by
`tests/test_architecture.py`); the record lists those it has:

    plan     its plans and route rules: pure Python, no torch, no DSL
    kernel   its CuTe DSL kernel: no torch
    launch   its compile (sm_90a, any machine) and the launcher around a compiled kernel;
             `LINT_VARIANTS`: the small plans of its kernels `tmakit lint --kernel` checks
    model    what its kernel moves, replayed on the CPU model (NumPy)
    api      its public functions: `__all__` is what `tmakit` exports
    op       its torch operators (`import tmakit.ops` imports it: that registers them)
    bench    its bench studies: `STUDIES`, read by `tmakit bench`
    explain  `tmakit plan`/`explain` of its `--kernel` names: `KERNELS`, `FLAGS` (the options only
             it reads), `WHAT` (for the help), `add_arguments(parser)`, `plan(args)`,
             `explain(args)`; a family with no `--kernel` of its own (KERNELS empty) explains a
             section of another's output, read by name
    check    its GPU experiments: its kernels run on position-hashed inputs, what they wrote
             compared with the reference (needs a GPU and torch)

A part other than `api` may name in `__all__` what the core reads from it by name
(`exporting(name, part)`): a study's rows the core's bench adds to others, a verification the
`verify` and `demo` commands run, a plan the commands draw. The family stays the one that defines
them; the core holds no import of it.

A new family is its package and its line in `PACKAGES` (and its page in the docs).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

# Each family by its package's name under tmakit (read relative to this package, so that a copy of
# the tree imported under another name reads its own families).
PACKAGES: tuple[str, ...] = (
    "copies",
    "rows",
    "many",
    "reduce",
    "patches",
    "load",
    "cluster",
    "moe",
)

PARTS = ("plan", "kernel", "launch", "model", "api", "op", "bench", "explain", "check")


@dataclass(frozen=True)
class FamilyRecord:
    """One family as the core reads it: its `name`, a line of `summary`, and which `PARTS` its
    package has (its modules of those names)."""

    name: str
    summary: str
    parts: frozenset[str]

    def __post_init__(self) -> None:
        unknown = sorted(self.parts - frozenset(PARTS))
        if unknown:
            raise ValueError(
                f"family {self.name!r}: no part is named {', '.join(unknown)}; the parts: {PARTS}"
            )


def family_record(package: str) -> FamilyRecord:
    """The `FAMILY` record of the family package `package` (a dotted name)."""
    record = getattr(importlib.import_module(package), "FAMILY", None)
    if not isinstance(record, FamilyRecord):
        raise TypeError(f"{package} is listed in tmakit.registry.PACKAGES but defines no FAMILY record")
    return record


@cache
def records() -> dict[str, FamilyRecord]:
    """Every family's record, by package (its dotted name), in `PACKAGES`' order."""
    return {f"{__package__}.{name}": family_record(f"{__package__}.{name}") for name in PACKAGES}


def parts(part: str) -> list[ModuleType]:
    """Every family's module of `part` (one of `PARTS`), imported, in `PACKAGES`' order: the
    families that have one."""
    if part not in PARTS:
        raise ValueError(f"no family part is named {part!r}; the parts: {', '.join(PARTS)}")
    return [importlib.import_module(f"{p}.{part}") for p, record in records().items() if part in record.parts]


def exporting(name: str, part: str = "api") -> ModuleType:
    """The family module of `part` whose `__all__` names `name`. For `api`, `name` is one of
    `tmakit`'s public names: what a core study that times a family's op beside torch's reads that
    op, and its building blocks, from. For another part, a name the core reads from it (a
    verification `tmakit verify` runs, a plan the commands draw). Only the families with that part
    are imported, one at a time until one names it."""
    if part not in PARTS:
        raise ValueError(f"no family part is named {part!r}; the parts: {', '.join(PARTS)}")
    for package, record in records().items():
        if part not in record.parts:
            continue
        module = importlib.import_module(f"{package}.{part}")
        if name in getattr(module, "__all__", ()):
            return module
    raise LookupError(f"no family's {part} exports {name!r}; the families: {', '.join(PACKAGES)}")


def bound_on_first_call(name: str, namespace: dict[str, Any]) -> Callable[..., Any]:
    """A stand-in for the public function `name` (of the family `exporting` names), to be kept as
    `namespace[name]` (a module's globals) by a family that calls another's function, which it may
    not import: the stand-in's first call reads the function through the registry, puts it in its
    own place and calls it. Every later call reads that global, the function itself: the call path
    pays what an imported name costs, one global read."""

    def first_call(*args: Any, **kwargs: Any) -> Any:
        function = getattr(exporting(name), name)
        namespace[name] = function
        return function(*args, **kwargs)

    first_call.__name__ = first_call.__qualname__ = name
    return first_call
