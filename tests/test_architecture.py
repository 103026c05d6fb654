"""The architecture docs/architecture.md states, checked on the source text (CPU only: no torch,
no GPU, no DSL).

Every module under src/tmakit is parsed with `ast`; nothing of tmakit is imported except in the one
subprocess test at the end. tmakit is a shared core (the layers below) and kernel families, each a
package listed in `tmakit.registry.PACKAGES`. The rules:

1. tmakit's own modules form no import cycle.
2. The pure layers (limits, errors, config, registry, validate, ptx, plan, model, the linter's
   analysis) and each family's
   pure parts (`plan`, `model`) import neither torch nor the DSL, nor any tmakit module that does,
   at any level; a family's `kernel` imports no torch; its record (`__init__`) only the registry.
3. The core imports no family: the core and the front ends read the families through the
   registry. A family imports the core and its own modules, never another family.
4. In the core, dependencies point down: a module imports only modules of its own layer or of
   lower ones.
5. Imports inside functions are kept for the heavy optional dependencies and the modules that load
   the DSL, so that `import tmakit` stays fast; everything else is imported at module level.
6. `import tmakit` and `import tmakit.cli` load neither cutlass nor torch.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# The tree checked: this checkout's `src`, or the one $TMAKIT_ARCHITECTURE_SRC names (its docs/ beside
# it), as tests/test_toy_family.py checks the tree a new family grows.
SRC = Path(os.environ.get("TMAKIT_ARCHITECTURE_SRC") or Path(__file__).resolve().parents[1] / "src")
PACKAGE = SRC / "tmakit"
ROOT = "tmakit"

# Layers, bottom-up. An entry names a module, or a package together with everything under it; the
# root package `tmakit` (the public facade, src/tmakit/__init__.py) matches only itself.
LAYERS: list[tuple[str, ...]] = [
    ("tmakit.errors", "tmakit.limits"),
    ("tmakit.config", "tmakit.registry"),
    ("tmakit.validate",),
    ("tmakit.ptx",),
    ("tmakit.plan",),
    ("tmakit.model",),
    ("tmakit.kernels",),
    ("tmakit.runtime",),
    ("tmakit.linter",),
    ("tmakit.api",),
    ("tmakit",),
    ("tmakit.ops", "tmakit.ops_base", "tmakit.overrides"),
    ("tmakit.check",),
    ("tmakit.bench",),
    ("tmakit.families",),
    ("tmakit.explain",),
    ("tmakit.demo",),
    ("tmakit.cli",),
    ("tmakit.__main__",),
]

PURE = (
    "tmakit.limits",
    "tmakit.errors",
    "tmakit.config",
    "tmakit.registry",
    "tmakit.validate",
    "tmakit.ptx",
    "tmakit.plan",
    "tmakit.model",
    "tmakit.linter.program",
    "tmakit.linter.mlir",
    "tmakit.linter.checks",
    "tmakit.linter.phases",
    "tmakit.linter.regions",
    "tmakit.linter.report",
)
DSL_AND_TORCH = ("torch", "cutlass", "cuda", "tvm_ffi", "triton")
IMPURE_TMAKIT = (
    "tmakit.kernels",
    "tmakit.runtime",
    "tmakit.api",
    "tmakit.check",
    "tmakit.bench",
    "tmakit.families",
    "tmakit.cli",
    "tmakit.demo",
    "tmakit.explain",
    "tmakit.ops",
    "tmakit.ops_base",
    "tmakit.overrides",
    "tmakit.linter.capture",
    "tmakit.linter.kernels",
)
PURE_PARTS = ("plan", "model")  # a family's parts that are pure Python, as the pure layers
# What a function may import: heavy optional dependencies (numpy is not one: it is a dependency and
# cheap), tmakit's kernel modules, which load the DSL when they are imported, and tmakit.ops, which
# imports torch and registers its operators (the host-cost study measures the op path with it).
LAZY_ALLOWED = (
    "torch",
    "cutlass",
    "cuda",
    "tvm_ffi",
    "triton",
    "matplotlib",
    "tmakit.kernels",
    "tmakit.ops",
)


@dataclass(frozen=True)
class Import:
    """One imported module, as written at one place in tmakit's source."""

    module: str  # the module that imports
    target: str  # the imported module, absolute
    path: Path
    line: int
    in_function: bool
    type_checking: bool

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(SRC.parent)}:{self.line}"


def within(name: str, prefix: str) -> bool:
    """`name` is `prefix` or lies under it (`tmakit.plan.ring` is within `tmakit.plan`)."""
    return name == prefix or name.startswith(prefix + ".")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def is_package(module: str) -> bool:
    return modules()[module].name == "__init__.py"


def resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute name of the module a `from` import reads from (`from ..plan import x` in
    `tmakit.kernels.tile_ring` reads from `tmakit.plan`)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package(module):
        base.pop()  # a module's level-1 base is its package
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules one import statement loads: `from . import x` loads the module `x` when `x` is
    one, and `from .plan import LoadPlan` the package `tmakit.plan`."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = resolve(module, node)
    if base == "__future__":
        return []
    found = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules()]
    return found if len(found) == len(node.names) else [base, *found]


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def walk_imports(node: ast.AST, in_function=False, type_checking=False):
    """Every import statement under `node`, with whether it sits in a function and whether in an
    `if TYPE_CHECKING:` block (such imports never run)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function, type_checking
        elif isinstance(child, ast.If) and is_type_checking(child.test):
            yield from walk_imports(ast.Module(child.body, []), in_function, True)
            yield from walk_imports(ast.Module(child.orelse, []), in_function, type_checking)
        else:
            function = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            yield from walk_imports(child, in_function or function, type_checking)


@cache
def imports() -> tuple[Import, ...]:
    """Every import of every module, module-level and in functions alike."""
    found = []
    for module, path in modules().items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node, in_function, type_checking in walk_imports(tree):
            for target in targets(module, node):
                found.append(Import(module, target, path, node.lineno, in_function, type_checking))
    return tuple(found)


def own_dependencies(entry: Import) -> list[str]:
    """The tmakit modules one import loads: the target itself, and the packages above it, whose
    `__init__` runs first. Packages that hold the importer are not counted as implied: Python has
    started them before the importer runs (`tmakit.plan.copy` importing `.load` does not make
    `tmakit.plan` depend on itself). Naming such a package explicitly does count."""
    if not within(entry.target, ROOT):
        return []
    parts = entry.target.split(".")
    parents = [".".join(parts[:i]) for i in range(1, len(parts))]
    implied = [p for p in parents if p in modules() and not within(entry.module, p)]
    return implied + ([entry.target] if entry.target in modules() else [])


@cache
def graph() -> dict[str, set[str]]:
    """tmakit's import graph: module -> the tmakit modules it imports."""
    edges: dict[str, set[str]] = {module: set() for module in modules()}
    for entry in imports():
        edges[entry.module].update(own_dependencies(entry))
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a closed path [a, b, ..., a], or None."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" after
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for successor in sorted(edges[node]):
            if state.get(successor) == "open":
                return path[path.index(successor) :] + [successor]
            if successor not in state and (cycle := visit(successor)):
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def layer_of(module: str) -> int | None:
    """The index in LAYERS of the most specific entry that holds `module`."""
    best = None
    for index, entries in enumerate(LAYERS):
        for entry in entries:
            holds = module == entry if entry == ROOT else within(module, entry)
            if holds and (best is None or len(entry) > len(best[1])):
                best = (index, entry)
    return best[0] if best else None


@cache
def family_packages() -> tuple[str, ...]:
    """The family packages `tmakit.registry.PACKAGES` lists, read from its source."""
    tree = ast.parse((PACKAGE / "registry.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "PACKAGES":
            return tuple(f"{ROOT}.{name}" for name in ast.literal_eval(node.value))
    raise AssertionError("tmakit/registry.py assigns no PACKAGES")


def family_of(module: str) -> str | None:
    """The family package that holds `module`, or None for the core."""
    return next((package for package in family_packages() if within(module, package)), None)


def part_of(module: str) -> str | None:
    """A family module's part: `plan` for `tmakit.rows.plan`, `__init__` for the record."""
    family = family_of(module)
    if family is None:
        return None
    return "__init__" if module == family else module[len(family) + 1 :].split(".")[0]


def is_impure(target: str) -> bool:
    """Whether importing `target` may load torch or the DSL: those, an impure core layer, or a
    family's part that is neither pure nor its record."""
    if any(within(target, name) for name in DSL_AND_TORCH + IMPURE_TMAKIT):
        return True
    return family_of(target) is not None and part_of(target) not in (*PURE_PARTS, "__init__")


def lazy_allowed(target: str) -> bool:
    """What a function may import: LAZY_ALLOWED, and a family's kernel (it loads the DSL)."""
    return any(within(target, name) for name in LAZY_ALLOWED) or part_of(target) == "kernel"


# -- the tests ----------------------------------------------------------------------------------
def test_the_source_is_found_and_parsed():
    """Guards the other tests against passing vacuously on an empty or misread tree."""
    assert {"tmakit", "tmakit.cli", "tmakit.plan.ring", "tmakit.kernels.tma"} <= set(modules())
    assert any(e.target == "tmakit.plan.ring" and e.module == "tmakit.kernels.tile_ring" for e in imports())
    assert "tmakit.check.reference" in graph()["tmakit.check.run"]  # `from . import reference`
    assert "tmakit.plan" in graph()["tmakit.runtime.launch"]  # `from ..plan.ring import ...`
    assert family_packages() and all(package in modules() for package in family_packages())
    assert part_of("tmakit.rows.plan") == "plan" and family_of("tmakit.plan.ring") is None


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle():
    """A cycle makes import order matter and a module half-initialised when its partner reads it."""
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_pure_layers_import_neither_torch_nor_the_dsl():
    """The pure layers and a family's plan and model run in CI and on machines without a GPU; they
    may not need torch or the DSL, directly or through a tmakit module that loads them."""
    wrong = [
        f"{e.where}: {e.module} imports {e.target}"
        for e in imports()
        if (any(within(e.module, pure) for pure in PURE) or part_of(e.module) in PURE_PARTS)
        and is_impure(e.target)
    ]
    assert not wrong, "\n".join(wrong)


def test_family_parts_keep_their_roles():
    """A family's kernel imports no torch (the DSL alone; its launch bridges to torch's tensors),
    and its record (`__init__`) imports only the registry, so that reading the records loads no
    family's code."""
    wrong = []
    for entry in imports():
        part = part_of(entry.module)
        if part == "kernel" and within(entry.target, "torch"):
            wrong.append(f"{entry.where}: the kernel {entry.module} imports torch")
        if part == "__init__" and entry.target not in ("tmakit.registry", "__future__"):
            wrong.append(f"{entry.where}: the record {entry.module} imports {entry.target}")
    assert not wrong, "\n".join(wrong)


def test_the_core_reads_the_families_through_the_registry():
    """No core module imports a family (the facade, the ops, the bench, `plan` and `explain` read
    them through `tmakit.registry`), and no family imports another: arrows point from a family to
    the core only."""
    wrong = []
    for entry in imports():
        for target in own_dependencies(entry):
            theirs, own = family_of(target), family_of(entry.module)
            if theirs is not None and theirs != own:
                wrong.append(f"{entry.where}: {entry.module} imports {target} (of the family {theirs})")
    assert not wrong, "\n".join(wrong)


def test_every_module_has_a_home():
    """A new module must be placed in LAYERS or in a family package, or these tests would not see it."""
    assert [m for m in modules() if layer_of(m) is None and family_of(m) is None] == []


def test_dependencies_point_down():
    """In the core, a module imports only modules of its own layer or below (docs/architecture.md's
    order); a family may import any of the core (its own modules form no cycle, as all do)."""
    wrong = []
    for entry in imports():
        if family_of(entry.module) is not None:
            continue
        for target in own_dependencies(entry):
            if family_of(target) is not None:
                continue  # a family in the core: the test above
            own, theirs = layer_of(entry.module), layer_of(target)
            if theirs > own:
                wrong.append(f"{entry.where}: {entry.module} (layer {own}) imports {target} (layer {theirs})")
    assert not wrong, "\n".join(wrong)


def test_function_level_imports_are_only_the_heavy_ones():
    """Imports are module-level so that a missing or broken dependency fails at import time and
    each module's dependencies are read at its top. The exceptions keep `import tmakit` fast and
    torch optional: torch, the DSL, Triton, matplotlib, tmakit's kernel modules and tmakit.ops."""
    wrong = [
        f"{e.where}: {e.module} imports {e.target} inside a function"
        for e in imports()
        if e.in_function and not e.type_checking and not lazy_allowed(e.target)
    ]
    assert not wrong, "\n".join(wrong)


def test_import_tmakit_loads_neither_cutlass_nor_torch():
    """Plans, the CPU model and the CLI's parser work without a GPU; loading the DSL takes seconds."""
    code = (
        "import sys, tmakit, tmakit.cli\n"
        "loaded = sorted(m for m in ('cutlass', 'torch') if m in sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=SRC, timeout=120)
    assert run.returncode == 0, run.stderr


def test_the_layout_names_every_module_and_nothing_else():
    """docs/architecture.md's "Layout of the code" block names each module of src/tmakit: a line
    per top-level module (`name.py ...`) or per package (`package/` then its modules' `name.py`)."""
    text = (SRC.parent / "docs" / "architecture.md").read_text()
    block = text.split("## Layout of the code", 1)[1].split("```", 2)[1]
    listed = set()
    for line in block.strip().splitlines()[1:]:  # after "src/tmakit/"
        first = line.split()[0]
        prefix = first if first.endswith("/") else ""
        listed |= {prefix + name for name in re.findall(r"\b\w+\.py\b", line)}
    tree = {
        path.relative_to(SRC / ROOT).as_posix()
        for path in (SRC / ROOT).rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
    }
    assert tree == listed, (
        f"in the tree only: {sorted(tree - listed)}; in docs/architecture.md only: {sorted(listed - tree)}"
    )
