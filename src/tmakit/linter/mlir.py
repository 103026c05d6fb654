"""What a kernel's MLIR (the DSL's module, kept with `CUTE_DSL_KEEP=ir`) says that its PTX does
not: the TMA atoms it takes as grid-constant arguments (each one's copy, element type, bytes per
instruction, box, tensor-map format, reduction and multicast factor) and its launch's facts (the
cluster shape). Pure Python.

The PTX passes each atom's tensor map as a `.param .align 64 .b8 NAME[128]`, in the order of the
atom arguments here: the n-th such parameter is the n-th atom.

A multicast copy comes two ways: a multicast atom the host built with its factor
(`num_multicast`), or a plain atom that the kernel's block-API copy multicasts (`cute.copy` with
`from_block_api` and a `multicast_layout`, as QuACK's GEMM loads): there the compiler splits the
atom's tile among the CTAs that share it, so it reads as a multicast atom of that many.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

_KERNEL = re.compile(r"cuda\.kernel @(\w+)\((.*?)\)\s+attributes\s*\{(.*)$", re.MULTILINE)
_ARGUMENT = re.compile(r",\s*(?=%arg\d+\s*:)")
_ATOM = re.compile(
    r"!cute_nvgpu\.atom\.non_exec_(tiled_tma_load|tiled_tma_store|tiled_tma_reduce|im2col_tma_load)"
    r"<(.*)>\s*(?:\{[^}]*\})?\s*$"
)
_COPY_BITS = re.compile(r"copy_bits\s*=\s*(\d+)")
_BOX = re.compile(r'tma_gbasis\s*=\s*<"([^"]*)">')
_FORMAT = re.compile(r"tma_format\s*=\s*(\w+)")
_LAUNCH_FACTS = re.compile(r"cutlass_launch_facts\s*=\s*\{([^}]*)\}")
_CLUSTER = re.compile(r"exact_cluster_dim\s*=\s*array<i64:\s*([\d,\s]+)>")
_CLUSTER_LAUNCH = re.compile(r"cluster_launch\s*=\s*(true|false)")
_MAKE = re.compile(
    r"(%[\w.#]+)\s*,\s*%[\w.#]+\s*=\s*cute_nvgpu\.atom\.make_non_exec_(?:tiled_tma_load|im2col_tma_load)"
    r"\([^)]*\)\s*<\{[^}]*?num_multicast\s*=\s*(\d+)"
)
_MAKE_ANY = re.compile(r"(%[\w.#]+)\s*,\s*%[\w.#]+\s*=\s*cute_nvgpu\.atom\.make_non_exec_\w+\(\s*(%[\w.#]+)")
_LAUNCH = re.compile(r"cuda\.launch_ex\s+@\w+::@(\w+)(?:<[^>]*>)?\s*\(([^)]*)\)")
_HOST = re.compile(
    r"^\s*func\.func\s+@\w+\((.*?)\)\s*(?:->[^{]*)?(?:attributes\s*\{[^}]*\})?\s*\{", re.MULTILINE
)
_DEFINITION = re.compile(r"^\s*(%[\w.#]+)(?:\s*,\s*%[\w.#]+)*\s*=\s*[\w.\"<>]+\(\s*(%[\w.#]+)", re.MULTILINE)
_BLOCK_COPY = re.compile(r"cute\.copy\(\s*(%[\w.#]+)[^\n]*\{([^}\n]*\bfrom_block_api\b[^}\n]*)\}")
_MULTICAST_LAYOUT = re.compile(r'multicast_layout\s*=\s*#cute\.layout<"\(([\d,]+)\):\(([\d,]+)\)">')

KINDS = {
    "tiled_tma_load": "load",
    "tiled_tma_store": "store",
    "tiled_tma_reduce": "reduce",
    "im2col_tma_load": "im2col",
}


@dataclass(frozen=True)
class Atom:
    """One TMA atom a kernel takes: its `position` among the kernel's atom (descriptor)
    arguments, `kind` (load, store, reduce, im2col), whether a multicast load, the `element`
    type as MLIR writes it (f16, i32: signless), `copy_bits` (one instruction's for a plain atom,
    the CTA tile's for a multicast one), the `box` (tma_gbasis), the tensor map's `tma_format`,
    the reduction (`reduce_op`, lower case), the host's multicast factor (`num_multicast`, where
    the module shows it) and, where the host's argument is known, its tensor's DSL element type
    (`dsl_element`: Int32, Uint32, Float16) and signedness (`signed`: None for floats or
    unknown)."""

    position: int
    kind: str
    multicast: bool
    element: str
    copy_bits: int | None
    box: str | None
    tma_format: str | None
    reduce_op: str | None
    type_text: str
    num_multicast: int | None = None
    signed: bool | None = None
    dsl_element: str | None = None

    @property
    def instruction_bytes(self) -> int | None:
        """The bytes one copy of this atom moves into (or out of) one CTA's shared memory: a
        multicast atom's tile divided among `num_multicast` CTAs; None where not known."""
        if self.copy_bits is None:
            return None
        tile = self.copy_bits // 8
        if not self.multicast:
            return tile
        if not self.num_multicast or tile % self.num_multicast:
            return None
        return tile // self.num_multicast


@dataclass(frozen=True)
class LaunchFacts:
    """A kernel's launch as its module fixes it: whether it launches clusters and their shape
    (None where set only at launch)."""

    cluster_launch: bool | None = None
    cluster: tuple[int, ...] | None = None

    @property
    def cluster_size(self) -> int | None:
        """CTAs per cluster: 1 without clusters; None where not fixed."""
        if self.cluster is not None:
            size = 1
            for extent in self.cluster:
                size *= extent
            return size
        return 1 if self.cluster_launch is False else None


@dataclass(frozen=True)
class ModuleKernel:
    """One kernel of the module: its name, atoms and launch facts."""

    name: str
    atoms: tuple[Atom, ...]
    launch: LaunchFacts


def signedness(dsl_element: str | None) -> bool | None:
    """Whether a DSL element type (`Int32`, `Uint32`, `Float16`) is signed; None for floats."""
    if dsl_element is None:
        return None
    if dsl_element.startswith("Int"):
        return True
    if dsl_element.startswith("Uint"):
        return False
    return None


def parse_atom(position: int, text: str) -> Atom | None:
    """The atom an argument's type text describes, or None where it is not a TMA atom."""
    match = _ATOM.search(text.strip())
    if not match:
        return None
    kind, body = KINDS[match.group(1)], match.group(2)
    fields = [part.strip() for part in body.split(",")]
    multicast = bool(fields) and fields[0] == "sm_90_multicast"
    reduce_op = fields[0].lower() if kind == "reduce" and fields else None
    leading = 1 if kind in ("load", "im2col", "reduce") else 0
    element = fields[leading] if len(fields) > leading else "?"
    bits = _COPY_BITS.search(body)
    box = _BOX.search(body)
    tma_format = _FORMAT.search(body)
    type_text = text.strip().split(" {")[0].lstrip("!")
    return Atom(
        position,
        kind,
        multicast,
        element,
        int(bits.group(1)) if bits else None,
        box.group(1) if box else None,
        tma_format.group(1) if tma_format else None,
        reduce_op,
        type_text,
    )


def parse_module(mlir: str, tensor_elements: tuple[str | None, ...] = ()) -> list[ModuleKernel]:
    """Each `cuda.kernel` of the module: its atom arguments in order and its launch facts, each
    multicast atom with the factor its host built it with, and each atom with the element type
    of the host's tensor argument it was made from (`tensor_elements`: the DSL type of each of
    the host function's tensor arguments, in order), where the launch passes it directly."""
    launches = {m.group(1): [op.strip() for op in m.group(2).split(",")] for m in _LAUNCH.finditer(mlir)}
    factors = {m.group(1): int(m.group(2)) for m in _MAKE.finditer(mlir)}
    sources = {m.group(1): m.group(2) for m in _MAKE_ANY.finditer(mlir)}
    elements = _host_elements(mlir, tensor_elements)
    definitions = {m.group(1): m.group(2) for m in _DEFINITION.finditer(mlir)}
    kernels = []
    matches = list(_KERNEL.finditer(mlir))
    for number, match in enumerate(matches):
        name, arguments, attributes = match.groups()
        operands = launches.get(name, [])
        # The kernel's body: up to the next kernel or the host's function (whose values reuse
        # the kernel's names).
        ends = [matches[number + 1].start()] if number + 1 < len(matches) else []
        ends += [m.start() for m in _HOST.finditer(mlir, match.end())][:1]
        sharing = _block_multicast(mlir[match.end() : min(ends, default=len(mlir))])
        atoms = []
        for index, argument in enumerate(_ARGUMENT.split(arguments)):
            if "grid_constant" not in argument:
                continue
            atom = parse_atom(len(atoms), argument.split(":", 1)[1] if ":" in argument else argument)
            if atom is None:
                atom = Atom(len(atoms), "unknown", False, "?", None, None, None, None, argument.strip())
            operand = operands[index] if index < len(operands) else None
            shared = sharing.get(argument.split(":", 1)[0].strip(), 1)
            if shared != 1:
                atom = replace(atom, multicast=True, num_multicast=shared)
            elif operand in factors:
                atom = replace(atom, num_multicast=factors[operand])
            elif not atom.multicast:
                atom = replace(atom, num_multicast=1)
            element = elements.get(_root(sources.get(operand or ""), definitions) or "")
            if element is not None:
                atom = replace(atom, dsl_element=element, signed=signedness(element))
            atoms.append(atom)
        facts = _LAUNCH_FACTS.search(attributes)
        launch = LaunchFacts()
        if facts:
            cluster = _CLUSTER.search(facts.group(1))
            cluster_launch = _CLUSTER_LAUNCH.search(facts.group(1))
            launch = LaunchFacts(
                None if cluster_launch is None else cluster_launch.group(1) == "true",
                tuple(int(x) for x in cluster.group(1).split(",")) if cluster else None,
            )
        kernels.append(ModuleKernel(name, tuple(atoms), launch))
    return kernels


def _block_multicast(body: str) -> dict[str, int | None]:
    """The kernel arguments (`%argN`) whose plain atom a block-API copy in `body` multicasts, each
    with the count of CTAs that share one tile: the product of the extents its
    `multicast_layout` maps to stride 0 (a CTA's slice lands in each of them). None where the
    layout is not a flat one or the atom's copies share their tiles differently; an atom whose
    copies share with no other CTA is left out."""
    definitions = [(m.start(), m.group(1), m.group(2)) for m in _DEFINITION.finditer(body)]
    shared: dict[str, set[int | None]] = {}
    for copy in _BLOCK_COPY.finditer(body):
        layout = _MULTICAST_LAYOUT.search(copy.group(2))
        count: int | None = None
        if layout:
            extents, strides = (part.split(",") for part in layout.groups())
            count = 1
            for extent, stride in zip(extents, strides, strict=False):
                count *= int(extent) if stride == "0" else 1
        # Nested regions reuse names: each value is the one defined last before its use.
        before = {name: operand for start, name, operand in definitions if start < copy.start()}
        root = _root(copy.group(1), before)
        if root is not None:
            shared.setdefault(root, set()).add(count)
    found = {root: counts.pop() if len(counts) == 1 else None for root, counts in shared.items()}
    return {root: count for root, count in found.items() if count != 1}


def _root(value: str | None, definitions: dict[str, str]) -> str | None:
    """The host argument (`%argN`) a value is made from, following each operation's first
    operand back (a view of an argument's pointer: `make_view(get_iter(%arg1), ...)`)."""
    for _ in range(32):
        if value is None or re.fullmatch(r"%arg\d+", value):
            return value
        value = definitions.get(value)
    return None


def _host_elements(mlir: str, tensor_elements: tuple[str | None, ...]) -> dict[str, str]:
    """The host function's tensor arguments (`%argN` of a memref type), each with the DSL
    element type `tensor_elements` gives in order; {} where the counts disagree."""
    for host in _HOST.finditer(mlir):
        arguments = _ARGUMENT.split(host.group(1))
        tensors = [a.split(":")[0].strip() for a in arguments if "memref" in a.split(":", 1)[-1]]
        if tensors and len(tensors) == len(tensor_elements):
            return {name: element for name, element in zip(tensors, tensor_elements, strict=True) if element}
    return {}


def kernel_for(ptx_name: str, kernels: list[ModuleKernel]) -> ModuleKernel | None:
    """The module's kernel that a PTX entry compiles: the only one, else the one whose name
    shares the longest start with the entry's (the PTX mangles the same name with more
    underscores, and shortens it)."""
    if len(kernels) <= 1:
        return kernels[0] if kernels else None

    def shared(name: str) -> int:
        a, b = ptx_name.replace("_", ""), name.replace("_", "")
        count = 0
        while count < min(len(a), len(b)) and a[count] == b[count]:
            count += 1
        return count

    return max(kernels, key=lambda kernel: shared(kernel.name))
