"""A kernel's PTX read as a program: its instructions (each with its line), basic blocks and
control-flow graph, and the values of its registers where the PTX alone fixes them. Pure Python.

Values are linear forms: a constant plus integer multiples of leaves (a register whose value the
PTX does not fix, a special register, a symbol such as the dynamic shared memory's base or a
parameter's name). `[%r4]` and `[%r1+131072]` name the same barrier when their forms agree,
whichever registers computed them; an `expect_tx` register and a bulk copy's size register hold
the same bytes when their forms agree, though neither is known before the kernel runs.

The warp is read as one actor: a branch taken only by the lanes `elect.sync` did not elect (or
only by the lane it did elect, its fall-through then) is the other lanes' path, not the one the
barrier's bookkeeping follows, so the graph drops it. Inline assembly in braces (the DSL's wait
loops) is read as straight-line code: its local labels and branches stay inside it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

from ..errors import TmaConfigError

_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+(\w+)")
_PARAM = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+(\w+)(?:\[(\d+)\])?")
_LABEL = re.compile(r"^\s*([$\w]+):\s*$")
_GUARD = re.compile(r"^@(!?)(%?\w+)\s+")
IMMEDIATE = re.compile(r"^-?(?:0[xX][0-9a-fA-F]+|\d+)U?$")
_SYMBOL = re.compile(r"^[A-Za-z_$][\w$]*$")
SPECIAL = re.compile(r"^%(?:tid|ntid|ctaid|nctaid|laneid|warpid|cluster_\w+|clusterid|nclusterid)\b[\w.]*$")
_ADDRESS = re.compile(r"^\[\s*([^\]+\-\s]+)\s*(?:([+-])\s*(-?\w+))?\s*\]$")

# Opcodes (prefixes) whose first operand is read, not written: they define no register.
_NO_DESTINATION = (
    "st.",
    "bar.",
    "barrier.",
    "fence.",
    "cp.",
    "mbarrier.init",
    "mbarrier.expect_tx",
    "mbarrier.inval",
    "bra",
    "ret",
    "exit",
    "trap",
    "prefetch",
    "red.",
    "membar",
    "griddepcontrol",
    "setmaxnreg",
    "elect.sync",  # handled apart: it writes two registers
    "call",
    "tensormap.",
)
# Opcodes whose result is a function of their operands alone (no memory, no other lane).
_PURE = (
    "add.",
    "sub.",
    "mul.",
    "mad.",
    "shl.",
    "shr.",
    "and.",
    "or.",
    "xor.",
    "not.",
    "neg.",
    "min.",
    "max.",
    "mov.",
    "cvt.",
    "selp.",
    "setp.",
)
# Opcodes that pass their source's value on, as far as which barrier or buffer it names goes:
# address-space conversions and a warp's broadcast of a uniform value.
SAME_VALUE = ("cvta.", "cvt.u32.u64", "cvt.u64.u32", "cvt.s64.s32", "cvt.u64.u16", "cvt.u32.u16", "mapa.")


@dataclass(frozen=True)
class Form:
    """A linear form: `const` + the sum of coefficient * leaf over `terms` (leaf, coefficient)
    pairs, sorted, no zero coefficient."""

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    @staticmethod
    def leaf(name: str) -> Form:
        return Form(((name, 1),), 0)

    @staticmethod
    def of(const: int) -> Form:
        return Form((), const)

    @property
    def constant(self) -> int | None:
        """The value when no leaf is left, else None."""
        return None if self.terms else self.const

    def __add__(self, other: Form) -> Form:
        merged = dict(self.terms)
        for name, coefficient in other.terms:
            merged[name] = merged.get(name, 0) + coefficient
        return Form(tuple(sorted((n, c) for n, c in merged.items() if c)), self.const + other.const)

    def __sub__(self, other: Form) -> Form:
        return self + other.scaled(-1)

    def scaled(self, factor: int) -> Form:
        if factor == 0:
            return Form()
        return Form(tuple((n, c * factor) for n, c in self.terms), self.const * factor)

    def __str__(self) -> str:
        parts = [(name if c == 1 else f"{c}*{name}") for name, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")


@dataclass(frozen=True)
class Instruction:
    """One PTX instruction: its 1-based `line` in the PTX text, the `text` (stripped, no
    comment), its guard predicate (`guard`, `negated`), `opcode` and `operands` (split at the
    top-level commas), and whether it sits in an inline-assembly scope (`inline`)."""

    line: int
    text: str
    opcode: str
    operands: tuple[str, ...]
    guard: str | None = None
    negated: bool = False
    inline: bool = False

    @property
    def destination(self) -> str | None:
        """The register this instruction writes (its first operand), or None."""
        if not self.operands or self.opcode.startswith(_NO_DESTINATION):
            return None
        first = self.operands[0].split("|")[0].strip()
        return first if first.startswith("%") else None

    def brackets(self) -> list[str]:
        """The operands in brackets (`[%r4]`, `[%rd9, {%r1, %r2}]`), in order."""
        return [operand for operand in self.operands if operand.startswith("[")]


@dataclass
class Block:
    """A basic block: its label (None for the entry's or a fall-through's), its instructions'
    indices into `Kernel.instructions`, and its successors' block indices."""

    index: int
    label: str | None
    start: int
    end: int  # one past the last instruction
    successors: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its name, PTX type, alignment and byte size (arrays)."""

    name: str
    ptx_type: str
    align: int | None
    size: int | None

    @property
    def is_descriptor(self) -> bool:
        """A TMA descriptor passed by value: `.param .align 64 .b8 NAME[128]`."""
        return self.align == 64 and self.size == 128


def split_operands(text: str) -> tuple[str, ...]:
    """`text`'s operands, split at the commas outside brackets and braces."""
    operands, depth, current = [], 0, []
    for character in text:
        if character in "[{":
            depth += 1
        elif character in "]}":
            depth -= 1
        if character == "," and depth == 0:
            operands.append("".join(current).strip())
            current = []
        else:
            current.append(character)
    if "".join(current).strip():
        operands.append("".join(current).strip())
    return tuple(operands)


def parse_instruction(line: int, text: str, inline: bool) -> Instruction | None:
    """One statement (without its `;`) as an Instruction; None for a directive. Its text keeps
    one space where the DSL put tabs: an instruction reads as one line."""
    text = " ".join(text.split())
    if not text or text.startswith("."):
        return None
    guard, negated, body = None, False, text
    match = _GUARD.match(text)
    if match:
        negated, guard, body = bool(match.group(1)), match.group(2), text[match.end() :]
    opcode, _, rest = body.partition(" ")
    return Instruction(line, text, opcode, split_operands(rest), guard, negated, inline)


@dataclass
class Kernel:
    """One `.entry` of a PTX module: its name, parameters, instructions, blocks and graph."""

    name: str
    params: list[Param]
    instructions: list[Instruction]
    labels: dict[str, int]  # a label -> the index of the instruction it marks
    blocks: list[Block] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._values: dict[str, Form] = {}  # each register's form, once worked out
        self._working: set[str] = set()  # the registers whose forms are being worked out
        self._build_blocks()

    # -- the graph ------------------------------------------------------------------------------
    def _build_blocks(self) -> None:
        starts = {0}
        for index, instruction in enumerate(self.instructions):
            if not instruction.inline and instruction.opcode.split(".")[0] in ("bra", "ret", "exit", "trap"):
                starts.add(index + 1)
        starts |= set(self.labels.values())
        ordered = sorted(s for s in starts if s <= len(self.instructions))
        if not ordered or ordered[-1] != len(self.instructions):
            ordered.append(len(self.instructions))
        label_at = {index: label for label, index in self.labels.items()}
        blocks = []
        for start, end in zip(ordered, ordered[1:], strict=False):
            if start < end or start in label_at:
                blocks.append(Block(len(blocks), label_at.get(start), start, end))
        block_of_start = {block.start: block.index for block in blocks}
        for block in blocks:
            block.successors = self._successors(block, block_of_start)
        self.blocks = blocks

    def _successors(self, block: Block, block_of_start: dict[int, int]) -> list[int]:
        following = block_of_start.get(block.end)
        if block.start == block.end:
            return [following] if following is not None else []
        last = self.instructions[block.end - 1]
        head = last.opcode.split(".")[0]
        if last.inline or head not in ("bra", "ret", "exit", "trap"):
            return [following] if following is not None else []
        if head in ("ret", "exit", "trap"):
            return [] if last.guard is None or following is None else [following]
        target_label = last.operands[0] if last.operands else ""
        target = block_of_start.get(self.labels.get(target_label, -1))
        if last.guard is None:
            return [target] if target is not None else []
        taken, falls = True, True
        elected = self.elected(last.guard)
        if elected is not None:
            elected ^= last.negated
            # Branching when elected: the other lanes fall through; when not: they branch.
            taken, falls = (True, False) if elected else (False, True)
        found = []
        if taken and target is not None:
            found.append(target)
        if falls and following is not None and following not in found:
            found.append(following)
        return found

    def elected(self, predicate: str) -> bool | None:
        """True where `predicate` holds only in the lane `elect.sync` elected, False where only in
        the others, None where it says neither (or is written more than once)."""
        writers = self.writers.get(predicate, [])
        if len(writers) != 1:
            return None
        instruction = self.instructions[writers[0]]
        if instruction.opcode.startswith("elect.sync"):
            return True
        if instruction.opcode == "not.pred" and len(instruction.operands) == 2:
            inner = self.elected(instruction.operands[1])
            return None if inner is None else not inner
        return None

    @cached_property
    def writers(self) -> dict[str, list[int]]:
        """Each register -> the indices of the instructions that write it."""
        found: dict[str, list[int]] = {}
        for index, instruction in enumerate(self.instructions):
            if instruction.opcode.startswith("elect.sync") and instruction.operands:
                for register in instruction.operands[0].split("|"):
                    found.setdefault(register.strip(), []).append(index)
                continue
            destination = instruction.destination
            if destination is not None:
                found.setdefault(destination, []).append(index)
        return found

    @cached_property
    def block_of(self) -> list[int]:
        """Each instruction's block index."""
        owner = [0] * len(self.instructions)
        for block in self.blocks:
            for index in range(block.start, block.end):
                owner[index] = block.index
        return owner

    @cached_property
    def back_edges(self) -> frozenset[tuple[int, int]]:
        """The edges (from, to) that close a loop: to a block on the depth-first path from the
        entry."""
        found, state = set(), {}
        if not self.blocks:
            return frozenset()
        stack: list[tuple[int, Iterator[int]]] = [(0, iter(self.blocks[0].successors))]
        state[0] = "open"
        while stack:
            node, successors = stack[-1]
            advanced = False
            for successor in successors:
                if state.get(successor) == "open":
                    found.add((node, successor))
                elif successor not in state:
                    state[successor] = "open"
                    stack.append((successor, iter(self.blocks[successor].successors)))
                    advanced = True
                    break
            if not advanced:
                state[node] = "done"
                stack.pop()
        return frozenset(found)

    @cached_property
    def loops(self) -> list[frozenset[int]]:
        """The natural loop of each back edge: its header and every block that reaches the edge's
        source without passing the header."""
        predecessors: dict[int, list[int]] = {block.index: [] for block in self.blocks}
        for block in self.blocks:
            for successor in block.successors:
                predecessors[successor].append(block.index)
        found = []
        for source, header in sorted(self.back_edges):
            body, work = {header, source}, [] if source == header else [source]
            while work:
                node = work.pop()
                for predecessor in predecessors[node]:
                    if predecessor not in body:
                        body.add(predecessor)
                        work.append(predecessor)
            found.append(frozenset(body))
        return found

    def loops_around(self, index: int) -> frozenset[frozenset[int]]:
        """The loops holding instruction `index`."""
        block = self.block_of[index]
        return frozenset(loop for loop in self.loops if block in loop)

    def forward_successors(self, block: int) -> list[int]:
        """A block's successors less its loops' back edges."""
        return [s for s in self.blocks[block].successors if (block, s) not in self.back_edges]

    @cached_property
    def in_loop(self) -> frozenset[int]:
        """The blocks inside some loop."""
        return frozenset(block for loop in self.loops for block in loop)

    def invariant(self, form: Form) -> bool:
        """Whether `form` holds one value for the whole run of a thread: each leaf a symbol, a
        special register, or a register written once, outside every loop or (inside one) by an
        arithmetic instruction of such values (`or.b32 %r206, %r5, 4` of a warp's index)."""
        return all(self._invariant_register(name, 0) for name, _ in form.terms)

    def _invariant_register(self, name: str, depth: int) -> bool:
        if not name.startswith("%") or SPECIAL.match(name):
            return True
        writers = self.writers.get(name, [])
        if len(writers) != 1 or depth > 8:
            return False
        instruction = self.instructions[writers[0]]
        if self.block_of[writers[0]] not in self.in_loop:
            return True
        if instruction.guard is not None or not instruction.opcode.startswith(_PURE):
            return False
        sources = [operand for operand in instruction.operands[1:] if operand.startswith("%")]
        return all(self._invariant_register(source, depth + 1) for source in sources)

    def condition(self, predicate: str) -> tuple[tuple, bool] | None:
        """What a predicate register tests, as a key two predicates testing the same thing share,
        and whether it is that test's negation; None where its value may change during the run
        (written more than once, or from values a loop changes) or is not a comparison."""
        writers = self.writers.get(predicate, [])
        if len(writers) != 1:
            return None
        instruction = self.instructions[writers[0]]
        if instruction.guard is not None:
            return None
        if instruction.opcode == "not.pred" and len(instruction.operands) == 2:
            inner = self.condition(instruction.operands[1])
            return None if inner is None else (inner[0], not inner[1])
        if instruction.opcode.startswith("setp.") and len(instruction.operands) == 3:
            left, right = self.value(instruction.operands[1]), self.value(instruction.operands[2])
            if self.invariant(left) and self.invariant(right):
                return (instruction.opcode, str(left), str(right)), False
        return None

    def edges(self, block: int, facts: frozenset, forward: bool = False) -> list[tuple[int, frozenset]]:
        """A block's successors, each with the facts (tested conditions and their values) known
        on that edge: a branch on a condition already known takes the one edge it allows.
        `forward`: less the loops' back edges."""
        successors = self.forward_successors(block) if forward else list(self.blocks[block].successors)
        if not successors or self.blocks[block].start == self.blocks[block].end:
            return [(s, facts) for s in successors]
        last = self.instructions[self.blocks[block].end - 1]
        if last.guard is None or last.inline or not last.opcode.startswith("bra"):
            return [(s, facts) for s in successors]
        condition = self.condition(last.guard)
        if condition is None:
            return [(s, facts) for s in successors]
        key, negated = condition
        target = self.labels.get(last.operands[0] if last.operands else "", -1)
        known = dict(facts)
        found = []
        for successor in successors:
            start = self.blocks[successor].start
            if start == target and start == self.blocks[block].end:  # both ways lead here
                found.append((successor, facts))
                continue
            holds = (start == target) != (last.negated ^ negated)  # the key's value on this edge
            if known.get(key, holds) != holds:
                continue
            found.append((successor, facts | {(key, holds)}))
        return found

    def facts_at(self, index: int, limit: int = 16) -> list[frozenset]:
        """The sets of facts (`edges`) paths from the entry know on reaching instruction `index`:
        the conditions its branches tested; [frozenset()] (nothing known) past `limit` sets."""
        target = self.block_of[index] if self.instructions else 0
        seen = {(0, frozenset())}
        work = [(0, frozenset())]
        found: set[frozenset] = set()
        while work:
            block, facts = work.pop()
            if block == target:
                found.add(facts)
                if len(found) > limit:
                    return [frozenset()]
            for successor, known in self.edges(block, facts):
                if (successor, known) not in seen:
                    seen.add((successor, known))
                    work.append((successor, known))
        return sorted(found, key=len) or [frozenset()]

    # -- values ---------------------------------------------------------------------------------
    def value(self, operand: str, depth: int = 0) -> Form:
        """The linear form of an operand: an immediate, a register (followed back through the one
        instruction that writes it, where it has one), a special register or a symbol."""
        operand = operand.strip()
        if IMMEDIATE.match(operand):
            return Form.of(int(operand.rstrip("U"), 0))
        if operand.startswith("%"):
            if SPECIAL.match(operand):
                return Form.leaf(operand)
            return self._register(operand, depth)
        if _SYMBOL.match(operand):
            return Form.leaf(operand)
        return Form.leaf(operand)

    def _register(self, register: str, depth: int) -> Form:
        """A register's form, once per register: a register met again while its own form is being
        worked out (a loop's counter, written from itself) is a leaf."""
        known = self._values.get(register)
        if known is not None:
            return known
        if register in self._working or depth > 40:
            return Form.leaf(register)
        self._working.add(register)
        try:
            writers = self.writers.get(register, [])
            if len(writers) == 1:
                found = self._written(self.instructions[writers[0]], register, depth)
            else:
                values = {self._written(self.instructions[w], register, depth) for w in writers}
                constant = next(iter(values)) if len(values) == 1 else None
                found = (
                    constant
                    if constant is not None and constant.constant is not None
                    else Form.leaf(register)
                )
        finally:
            self._working.discard(register)
        if not self._working:  # a form worked out inside another's may have cut a cycle short
            self._values[register] = found
        return found

    def _written(self, instruction: Instruction, register: str, depth: int) -> Form:
        """The form `instruction` writes into `register` (a leaf where not linear)."""
        if instruction.guard is not None:
            return Form.leaf(register)  # written on some paths only
        opcode, operands = instruction.opcode, instruction.operands[1:]
        head = opcode.split(".")[0]
        try:
            if head == "mov" and len(operands) == 1:
                return self.value(operands[0], depth + 1)
            if opcode.startswith(SAME_VALUE) and operands:
                return self.value(operands[0], depth + 1)
            if opcode.startswith("shfl.sync.idx") and operands:
                return self.value(operands[0], depth + 1)
            if head in LINEAR_HEADS:
                linear = linear_result(opcode, [self.value(operand, depth + 1) for operand in operands])
                if linear is not None:
                    return linear
        except RecursionError:  # pragma: no cover - a pathological chain
            return Form.leaf(register)
        return Form.leaf(register)

    def address(self, operand: str) -> Form | None:
        """The form of a bracketed address operand (`[%r1+131072]`, `[%r4]`); None otherwise."""
        parts = address_parts(operand)
        return None if parts is None else self.value(parts[0]) + Form.of(parts[1])

    def descriptor(self, operand: str) -> int | None:
        """The position among the descriptor parameters (`.param .align 64 .b8 X[128]`) of the
        tensor map a TMA copy's `[%rd9, {...}]` operand names, or None where the PTX does not
        name one (a map in global memory, or written on the device)."""
        inner = operand.strip()[1:-1].split(",")[0].strip()
        form = self.value(inner)
        if len(form.terms) != 1 or form.terms[0][1] != 1 or form.const:
            return None
        name = form.terms[0][0]
        descriptors = [param.name for param in self.params if param.is_descriptor]
        return descriptors.index(name) if name in descriptors else None

    def is_exit(self, index: int) -> bool:
        head = self.instructions[index].opcode.split(".")[0]
        return head in ("ret", "exit") and not self.instructions[index].inline


LINEAR_HEADS = ("add", "sub", "neg", "shl", "mul", "mad")


def linear_result(opcode: str, values: list[Form]) -> Form | None:
    """What an integer instruction computes of its sources' forms where that is linear in them
    (add, sub, neg, shl by a constant, mul.lo/mul.wide and mad.lo/mad.wide by a constant); None
    for any other, whose value is then a leaf of its own."""
    head = opcode.split(".")[0]
    if ".f" in opcode:
        return None
    if head == "add" and len(values) == 2:
        return values[0] + values[1]
    if head == "sub" and len(values) == 2:
        return values[0] - values[1]
    if head == "neg" and len(values) == 1:
        return values[0].scaled(-1)
    if head == "shl" and len(values) == 2 and values[1].constant is not None:
        if 0 <= values[1].constant < 64:
            return values[0].scaled(1 << values[1].constant)
    if opcode.startswith(("mul.lo", "mul.wide", "mad.lo", "mad.wide")) and len(values) >= 2:
        a, b = values[0], values[1]
        product = b.scaled(a.constant) if a.constant is not None else None
        if product is None and b.constant is not None:
            product = a.scaled(b.constant)
        if product is None:
            return None
        return product + values[2] if head == "mad" and len(values) == 3 else product
    return None


def address_parts(operand: str) -> tuple[str, int] | None:
    """A bracketed address operand's base and byte offset (`[%r1+131072]`: ("%r1", 131072));
    None for another operand."""
    match = _ADDRESS.match(operand.strip())
    if not match:
        return None
    offset = int(match.group(3), 0) if match.group(2) else 0
    return match.group(1), -offset if match.group(2) == "-" else offset


def parse_kernels(ptx: str) -> list[Kernel]:
    """Every `.entry` of `ptx`, parsed. TmaConfigError where `ptx` holds none."""
    lines = ptx.splitlines()
    kernels = []
    index = 0
    while index < len(lines):
        match = _ENTRY.match(lines[index])
        if not match:
            index += 1
            continue
        name = match.group(1)
        params: list[Param] = []
        # The parameter list, up to the body's opening brace.
        while index < len(lines) and not lines[index].strip().startswith("{"):
            for param in _PARAM.finditer(lines[index]):
                align, ptx_type, param_name, size = param.groups()
                params.append(
                    Param(param_name, ptx_type, int(align) if align else None, int(size) if size else None)
                )
            index += 1
        index, instructions, labels = _body(lines, index)
        kernels.append(Kernel(name, params, instructions, labels))
    if not kernels:
        raise TmaConfigError("the PTX holds no kernel (.entry): give the PTX of a compiled kernel")
    return kernels


def _body(lines: list[str], index: int) -> tuple[int, list[Instruction], dict[str, int]]:
    """The statements from the body's `{` (at `index`) to its matching `}`: the index after it,
    the instructions and the outer labels."""
    instructions: list[Instruction] = []
    labels: dict[str, int] = {}
    depth = 0
    pending = ""  # a statement spread over lines
    pending_line = 0
    while index < len(lines):
        raw = lines[index].split("//", 1)[0]
        stripped = raw.strip()
        index += 1
        if not stripped:
            continue
        if stripped == "{" or stripped.endswith("{") and not pending and ";" not in stripped:
            depth += 1
            continue
        if stripped == "}":
            depth -= 1
            if depth == 0:
                break
            continue
        label = _LABEL.match(stripped)
        if label and not pending:
            if depth == 1:
                labels[label.group(1)] = len(instructions)
            continue
        if not pending:
            pending_line = index  # 1-based: `index` was advanced past this line
        pending = f"{pending} {stripped}".strip()
        while ";" in pending:
            statement, _, pending = pending.partition(";")
            instruction = parse_instruction(pending_line, statement, inline=depth > 1)
            if instruction is not None:
                instructions.append(instruction)
            pending = pending.strip()
            pending_line = index
    return index, instructions, labels
