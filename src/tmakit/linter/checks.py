"""The checks `tmakit.lint` runs on a kernel's PTX, with the atoms and launch facts its MLIR gives
and the signedness its tensors' element types give. Pure Python.

Each check visits its sites (an expect_tx, a copy, an mbarrier.init, a bulk store, a multicast
copy, a reduce store, a wait) and proves the site right, finds it wrong, or leaves it unchecked
where the answer depends on a value known only at run time. What the checks assume:

- The warp is one actor (`program`): what one elected lane declares and copies is followed along
  one path; the lanes `elect.sync` did not elect take no part.
- An expect_tx's phase is what follows it on each path up to the next expect_tx or wait on the
  same barrier, the kernel's exit, or its loop's back edge: a copy of that phase is issued after
  its expect_tx, by the same warp.
- A multicast copy is issued alike by every CTA its mask names (the kernel is the same program in
  each): each CTA's barrier receives one slice from each of them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..config import DTYPES
from ..errors import TmaConfigError
from ..validate import type_name
from . import phases
from .mlir import Atom, LaunchFacts, kernel_for, parse_module
from .program import Form, Kernel, parse_kernels
from .report import Finding, LintReport, Unchecked

# The reductions PTX names in a reduce store's opcode.
REDUCE_OPS = ("add", "min", "max", "inc", "dec", "and", "or", "xor")
# cp.reduce.async.bulk (no tensor map): the PTX ISA's types of each reduction.
BULK_REDUCE_TYPES = {
    "add": ("u32", "s32", "u64", "f32", "f64", "f16", "bf16"),
    "min": ("u32", "s32", "u64", "s64", "f16", "bf16"),
    "max": ("u32", "s32", "u64", "s64", "f16", "bf16"),
    "inc": ("u32",),
    "dec": ("u32",),
    "and": ("b32", "b64"),
    "or": ("b32", "b64"),
    "xor": ("b32", "b64"),
}
# The PTX type a bulk reduce of (op, dtype) must name: min and max compare as the dtype's
# signedness says; add wraps alike signed or not (no s64 add: u64 serves int64); bitwise ops name
# the width. Written from the PTX ISA, not read from `plan.reduce_ops` (which the rows kernel
# generates its instruction from): the lint would otherwise check that table against itself.
_WIDTHS = {"int32": 32, "uint32": 32, "int64": 64, "uint64": 64}
_ORDERED_TYPES = {
    "int32": "s32",
    "uint32": "u32",
    "int64": "s64",
    "uint64": "u64",
    "fp16": "f16",
    "bf16": "bf16",
}
_ADD_TYPES = {
    "int32": ("s32", "u32"),
    "uint32": ("u32",),
    "int64": ("u64",),
    "uint64": ("u64",),
    "fp32": ("f32",),
    "fp16": ("f16",),
    "bf16": ("bf16",),
}
# cp.reduce.async.bulk.tensor takes its type from the tensor map; the element types (MLIR's
# signless names) the PTX ISA lists for each reduction.
TENSOR_REDUCE_ELEMENTS = {
    "add": ("i32", "i64", "f32", "f16", "bf16"),
    "min": ("i32", "i64", "f16", "bf16"),
    "max": ("i32", "i64", "f16", "bf16"),
    "inc": ("i32",),
    "dec": ("i32",),
    "and": ("i32", "i64"),
    "or": ("i32", "i64"),
    "xor": ("i32", "i64"),
}
MAX_PATHS = 64  # distinct byte sums followed from one expect_tx before it is left unchecked


def bulk_reduce_types(op: str, dtype: str) -> tuple[str, ...]:
    """The PTX types a bulk reduce of `op` on `dtype` (a tmakit dtype name) may name; () where
    the PTX ISA has no such reduction."""
    if op in ("min", "max"):
        return (_ORDERED_TYPES[dtype],) if dtype in _ORDERED_TYPES else ()
    if op == "add":
        return _ADD_TYPES.get(dtype, ())
    if op in ("inc", "dec"):
        return ("u32",) if dtype == "uint32" else ()
    if op in ("and", "or", "xor"):
        return (f"b{_WIDTHS[dtype]}",) if dtype in _WIDTHS else ()
    return ()


@dataclass(frozen=True)
class Site:
    """A classified instruction: its index in `Kernel.instructions`, its `kind` (init, fence,
    expect, arrive, wait, copy, store, commit, wait-group, exit), the barrier it names, and the
    bytes it declares (expect) or lands in this CTA (copy; None where not known, `why`)."""

    index: int
    kind: str
    barrier: Form | None = None
    bytes: Form | None = None
    why: str | None = None


class KernelLint:
    """The checks of one PTX kernel: `run()` adds its findings, unchecked sites and tallies to
    `report`."""

    def __init__(
        self,
        kernel: Kernel,
        atoms: tuple[Atom, ...],
        launch: LaunchFacts,
        report: LintReport,
        reduce_dtype: str | None = None,
    ) -> None:
        self.kernel = kernel
        descriptors = sum(param.is_descriptor for param in kernel.params)
        # The n-th descriptor parameter is the n-th atom; a count that disagrees names none.
        self.atoms = atoms if len(atoms) == descriptors else ()
        self.atoms_known = bool(atoms) and len(atoms) == descriptors
        self.launch = launch
        self.report = report
        self.reduce_dtype = reduce_dtype
        self.sites = [self._classify(i) for i in range(len(kernel.instructions))]

    # -- what each instruction is -----------------------------------------------------------------
    def _text(self, index: int) -> str:
        return self.kernel.instructions[index].text

    def _barrier(self, operand: str | None) -> Form | None:
        return None if operand is None else self.kernel.address(operand)

    def _classify(self, index: int) -> Site | None:
        instruction = self.kernel.instructions[index]
        opcode, brackets = instruction.opcode, instruction.brackets()
        first = brackets[0] if brackets else None
        if self.kernel.is_exit(index):
            return Site(index, "exit")
        if opcode.startswith("mbarrier.init"):
            return Site(index, "init", self._barrier(first))
        if opcode.startswith(("fence.mbarrier_init", "fence.proxy.async")):
            return Site(index, "fence")
        if re.match(r"mbarrier\.(arrive(_drop)?\.)?expect_tx", opcode):
            return Site(index, "expect", self._barrier(first), self.kernel.value(instruction.operands[-1]))
        if opcode.startswith("mbarrier.arrive"):
            return Site(index, "arrive", self._barrier(first))
        if opcode.startswith(("mbarrier.try_wait", "mbarrier.test_wait")):
            return Site(index, "wait", self._barrier(first))
        if opcode.startswith("cp.async.bulk") and "mbarrier::complete_tx::bytes" in opcode:
            barrier = self._barrier(brackets[2]) if len(brackets) >= 3 else None
            landed, why = self._landed_bytes(index)
            return Site(index, "copy", barrier, landed, why)
        if opcode.startswith("st.async") and "mbarrier::complete_tx::bytes" in opcode and len(brackets) >= 2:
            return Site(index, "copy", self._barrier(brackets[-1]), *self._stored_bytes(opcode))
        if opcode.startswith(("cp.async.bulk", "cp.reduce.async.bulk")) and ".bulk_group" in opcode:
            return Site(index, "store")
        if opcode.startswith("cp.async.bulk.commit_group"):
            return Site(index, "commit")
        if opcode.startswith("cp.async.bulk.wait_group"):
            return Site(index, "wait-group", bytes=self.kernel.value(instruction.operands[0]))
        return None

    @staticmethod
    def _stored_bytes(opcode: str) -> tuple[Form | None, str | None]:
        """The bytes an `st.async` lands on its (remote) barrier: its vector's count of its type's
        size (`.v4.s32`: 16)."""
        match = re.search(r"(?:\.v(\d+))?\.[bsuf](8|16|32|64)$", opcode)
        if not match:
            return None, f"the store's type ({opcode}) is not read"
        return Form.of(int(match.group(1) or 1) * int(match.group(2)) // 8), None

    def atom_of(self, index: int) -> Atom | None:
        """The atom whose tensor map a TMA tensor copy at `index` reads (its operand
        `[%rd9, {coordinates}]`), where known."""
        if not self.atoms_known:
            return None
        brackets = self.kernel.instructions[index].brackets()
        source = next((operand for operand in brackets if "{" in operand), None)
        position = None if source is None else self.kernel.descriptor(source)
        return self.atoms[position] if position is not None and position < len(self.atoms) else None

    def mask(self, index: int) -> Form | None:
        """A multicast copy's CTA mask: the first operand after its barrier that is no brace
        list (an im2col copy's offsets come first)."""
        instruction = self.kernel.instructions[index]
        if ".multicast::cluster" not in instruction.opcode:
            return None
        operands = list(instruction.operands)
        barrier = [i for i, operand in enumerate(operands) if operand.startswith("[")][2]
        for operand in operands[barrier + 1 :]:
            if not operand.startswith("{"):
                return self.kernel.value(operand)
        return None

    def _destinations(self, index: int) -> tuple[int | None, str | None]:
        """How many CTAs' barriers a copy at `index` completes on (this one's included): 1 for a
        plain copy, the mask's CTAs of the cluster for a multicast one."""
        mask = self.mask(index)
        if mask is None:
            return 1, None
        value, size = mask.constant, self.launch.cluster_size
        if value is None:
            return None, "its multicast mask is computed at run time"
        if size is None:
            return None, "its cluster's shape is set at launch"
        return bin(value & ((1 << size) - 1)).count("1"), None

    def _landed_bytes(self, index: int) -> tuple[Form | None, str | None]:
        """The bytes a copy at `index` lands on each barrier it completes on: one slice from each
        CTA its multicast mask names (`destinations`), a slice being the atom's instruction bytes
        (a tensor copy) or the size operand (a bulk copy)."""
        instruction = self.kernel.instructions[index]
        if ".tensor" in instruction.opcode:
            atom = self.atom_of(index)
            if atom is None:
                why = "its tensor map is not one of the kernel's atoms the MLIR names"
                return None, why if self.atoms_known else "no MLIR atoms to size its tensor map"
            if atom.instruction_bytes is None:
                return None, f"atom {atom.position}'s bytes per copy are not known (multicast factor)"
            piece = Form.of(atom.instruction_bytes)
        else:
            piece = self.kernel.value(instruction.operands[2])
        count, why = self._destinations(index)
        if count is None:
            return None, why
        return piece.scaled(count), None

    # -- the checks -------------------------------------------------------------------------------
    def run(self) -> None:
        self.check_expect_tx()
        self.check_init_fence()
        self.check_store_groups()
        self.check_multicast_masks()
        self.check_reduce_types()
        self.check_waits()

    def _find(self, check: str, index: int, message: str, **fields: str | None) -> None:
        self.report.findings.append(
            Finding(
                check,
                self.kernel.instructions[index].line,
                self._text(index),
                message,
                self.kernel.name,
                **fields,
            )
        )
        self.report.tallies[check].found += 1

    def _leave(self, check: str, index: int, reason: str) -> None:
        line = self.kernel.instructions[index].line
        self.report.unchecked.append(Unchecked(check, line, self._text(index), reason, self.kernel.name))
        self.report.tallies[check].unchecked += 1

    def _prove(self, check: str) -> None:
        self.report.tallies[check].proven += 1

    def runs(self, index: int) -> bool:
        """Whether instruction `index` runs on the path the checks follow: unguarded, or guarded
        by the elected lane's predicate. Another guard may leave it out, so a fence or a wait
        under one is not counted on (a copy under one is left unchecked)."""
        instruction = self.kernel.instructions[index]
        if instruction.guard is None:
            return True
        elected = self.kernel.elected(instruction.guard)
        return elected is not None and elected != instruction.negated

    def _sites(self, *kinds: str) -> Iterable[Site]:
        return (site for site in self.sites if site is not None and site.kind in kinds)

    def barrier_name(self, barrier: Form | None) -> str | None:
        """A barrier's address for a message: the dynamic shared memory's base as `smem`, then
        the offset, then the registers that pick a stage (`smem+131072+8*%r82`)."""
        if barrier is None:
            return None
        bases = [name for name, c in barrier.terms if name.startswith("__dynamic_shmem") and c == 1]
        parts = ["smem"] if bases else []
        parts.append(str(barrier.const))
        for name, coefficient in barrier.terms:
            if name in bases:
                continue
            parts.append(name if coefficient == 1 else f"{coefficient}*{name}")
        return "+".join(parts).replace("+-", "-")

    def phase_of(self, index: int) -> str:
        """The phase an instruction at `index` acts in: 0 outside loops, each one inside."""
        return "every (in a loop)" if self.kernel.loops_around(index) else "0"

    # expect_tx ---------------------------------------------------------------------------------
    def check_expect_tx(self) -> None:
        """Each expect_tx's bytes against the copies completing on its barrier after it, on every
        path up to the phase's end; then each copy no expect_tx's path reached."""
        reached: set[int] = set()
        for site in self._sites("expect"):
            self._check_one_expect(site, reached)
        for site in self._sites("copy"):
            if site.index in reached:
                self._prove("orphan-copy")
            elif site.barrier is None:
                self._leave("orphan-copy", site.index, "its barrier's address is not read")
            else:
                self._find(
                    "orphan-copy",
                    site.index,
                    "no expect_tx on this barrier precedes the copy on its path: its bytes are "
                    "declared by no one (the phase completes early, or the tx-count underflows)",
                    barrier=self.barrier_name(site.barrier),
                    phase=self.phase_of(site.index),
                )

    def _check_one_expect(self, expect: Site, reached: set[int]) -> None:
        check = "expect-tx"
        if expect.barrier is None:
            self._leave(check, expect.index, "its barrier's address is not read")
            return
        sums = self._sums(expect, reached)
        declared = expect.bytes
        assert declared is not None
        unknown = [why for form, why in sums if form is None]
        wrong = [form for form, _ in sums if form is not None and form != declared]
        fields = {"barrier": self.barrier_name(expect.barrier), "phase": self.phase_of(expect.index)}
        decided_wrong = [f for f in wrong if f.constant is not None and declared.constant is not None]
        if decided_wrong:
            actual = decided_wrong[0]
            paths = "" if len(sums) == 1 else f" on one of its {len(sums)} paths"
            if actual.const < declared.const:
                outcome = "the phase never completes (a hang)"
            else:
                outcome = "the phase completes before every copy has landed (a race)"
            self._find(
                check,
                expect.index,
                f"the phase's copies land {actual} bytes{paths}, expect_tx declares {declared}: {outcome}",
                expected=str(declared),
                actual=str(actual),
                **fields,
            )
        elif unknown:
            self._leave(check, expect.index, f"a copy's bytes are not known: {unknown[0]}")
        elif wrong:
            first = wrong[0]
            self._leave(
                check, expect.index, f"declares {declared} bytes; a path lands {first} (run-time values)"
            )
        else:
            self._prove(check)

    def _sums(self, expect: Site, reached: set[int]) -> list[tuple[Form | None, str | None]]:
        """The bytes landing on `expect`'s barrier on each path from it to the end of its phase:
        (form, None), or (None, why) where a copy's bytes are not known."""
        kernel = self.kernel
        memo: dict[tuple[int, frozenset], frozenset[tuple[Form | None, str | None]]] = {}
        loops = kernel.loops_around(expect.index)

        def walk(block: int, start: int, facts: frozenset) -> frozenset[tuple[Form | None, str | None]]:
            whole = start == kernel.blocks[block].start
            if whole and (block, facts) in memo:
                return memo[block, facts]
            landed, why = Form(), None
            stopped = False
            for index in range(start, kernel.blocks[block].end):
                site = self.sites[index]
                if site is None:
                    continue
                if site.kind == "exit" and kernel.instructions[index].guard is None:
                    stopped = True
                    break
                if site.barrier != expect.barrier or index == expect.index:
                    continue
                if site.kind in ("expect", "wait"):
                    stopped = True
                    break
                if site.kind == "copy":
                    reached.add(index)
                    if not self.runs(index):
                        why = why or "the copy is predicated on a condition known only at run time"
                    elif not kernel.loops_around(index) <= loops:
                        why = (
                            why or "the copy repeats in a loop its expect_tx is outside of (a run-time count)"
                        )
                    elif site.bytes is None:
                        why = why or site.why
                    else:
                        landed = landed + site.bytes
            mine = (None, why) if why else (landed, None)
            successors = [] if stopped else kernel.edges(block, facts, forward=True)
            if not successors:
                found = frozenset({mine})
            else:
                combined = set()
                for successor, known in successors:
                    for form, later_why in walk(successor, kernel.blocks[successor].start, known):
                        if mine[0] is None or form is None:
                            combined.add((None, mine[1] or later_why))
                        else:
                            combined.add((mine[0] + form, None))
                if len(combined) > MAX_PATHS:
                    combined = {(None, f"more than {MAX_PATHS} paths end its phase")}
                found = frozenset(combined)
            if whole:
                memo[block, facts] = found
            return found

        block = kernel.block_of[expect.index]
        sums: set[tuple[Form | None, str | None]] = set()
        for facts in kernel.facts_at(expect.index):
            sums |= walk(block, expect.index, facts)
        return sorted(sums, key=lambda item: str(item))

    # mbarrier.init -> fence -----------------------------------------------------------------------
    def check_init_fence(self) -> None:
        """Each mbarrier.init against the uses that can follow it before a fence, on any path."""
        check = "init-fence"
        unfenced_at_use: dict[int, int] = {}  # an init -> the first use it reached unfenced

        def transfer(block: int, state: frozenset[int]) -> frozenset[int]:
            pending = set(state)
            for index in range(self.kernel.blocks[block].start, self.kernel.blocks[block].end):
                site = self.sites[index]
                if site is None:
                    continue
                if site.kind == "init":
                    pending.add(index)
                elif site.kind == "fence" and self.runs(index):
                    pending.clear()
                elif site.kind in ("expect", "arrive", "wait", "copy"):
                    for init in pending:
                        unfenced_at_use.setdefault(init, index)
            return frozenset(pending)

        self._flow(transfer)
        for site in self._sites("init"):
            use = unfenced_at_use.get(site.index)
            if use is None:
                self._prove(check)
                continue
            self._find(
                check,
                site.index,
                f"the barrier is used at line {self.kernel.instructions[use].line} ({self._text(use)}) "
                "before a fence.mbarrier_init makes its initialisation visible to the async proxy",
                barrier=self.barrier_name(site.barrier),
                expected="fence.mbarrier_init (or fence.proxy.async) before the first use",
                actual="no fence on the path",
            )

    def _flow(self, transfer: Callable[[int, frozenset[int]], frozenset[int]]) -> None:
        """Runs a forward may-analysis from the entry to its fixed point: `transfer(block,
        state)` gives the state at a block's end (from the one at its start); states meet by
        union, the entry's is empty."""
        blocks = self.kernel.blocks
        if not blocks:
            return
        entry: dict[int, frozenset[int]] = {0: frozenset()}
        work = [0]
        while work:
            block = work.pop()
            out = transfer(block, entry[block])
            for successor in blocks[block].successors:
                merged = out if successor not in entry else entry[successor] | out
                if successor not in entry or merged != entry[successor]:
                    entry[successor] = merged
                    work.append(successor)

    # bulk store groups ----------------------------------------------------------------------------
    def check_store_groups(self) -> None:
        """Each bulk store (or reduce store) committed and waited for before the kernel exits."""
        check = "store-groups"
        for site in self._sites("store"):
            problem = self._store_exit(site.index)
            if problem is None:
                self._prove(check)
                continue
            self._find(
                check,
                site.index,
                f"on a path to the kernel's exit the store's group is {problem}: the shared memory it "
                "reads is freed while the copy may still read it",
                expected="commit_group, then wait_group 0, before exit",
                actual=problem,
            )

    def _store_exit(self, store: int) -> str | None:
        """How the store at `store` may reach the kernel's exit unfinished (never committed, or
        committed and never waited for), on a path from the kernel's entry whose branches agree
        with one another; None where every path commits and waits first. A path's state: 0 no
        group of the store pending, 1 issued and not committed, 2 committed, not waited for."""
        kernel = self.kernel
        seen, work = set(), [(0, 0, 0, frozenset())]
        while work:
            block, position, state, facts = work.pop()
            for index in range(position, kernel.blocks[block].end):
                site = self.sites[index]
                if index == store:
                    state = 1
                elif site is None:
                    continue
                elif site.kind == "commit" and state == 1 and self.runs(index):
                    state = 2
                elif (
                    site.kind == "wait-group"
                    and state == 2
                    and site.bytes is not None
                    and site.bytes.constant == 0
                    and self.runs(index)
                ):
                    state = 0
                elif site.kind == "exit" and state and kernel.instructions[index].guard is None:
                    return "never committed" if state == 1 else "committed but not waited for (wait_group 0)"
            for successor, known in kernel.edges(block, facts):
                key = (successor, state, known)
                if key not in seen:
                    seen.add(key)
                    work.append((successor, kernel.blocks[successor].start, state, known))
        return None

    # multicast masks ------------------------------------------------------------------------------
    def check_multicast_masks(self) -> None:
        """Each multicast copy's constant mask against the cluster's size."""
        check = "multicast-mask"
        for site in self._sites("copy"):
            mask = self.mask(site.index)
            if mask is None:
                continue
            size = self.launch.cluster_size
            if mask.constant is None:
                self._leave(check, site.index, "the mask is computed at run time")
            elif size is None:
                self._leave(check, site.index, "the cluster's shape is set at launch")
            elif mask.constant == 0 or mask.constant >> size:
                outside = mask.constant >> size
                self._find(
                    check,
                    site.index,
                    "the mask names no CTA"
                    if mask.constant == 0
                    else f"the mask names CTA rank(s) "
                    f"{', '.join(str(size + b) for b in range(outside.bit_length()) if outside >> b & 1)} "
                    f"outside the cluster of {size}: the copy faults or lands in no CTA's barrier",
                    barrier=self.barrier_name(site.barrier),
                    expected=f"a mask within {(1 << size) - 1:#x} (a cluster of {size} CTAs)",
                    actual=f"{mask.constant:#x}",
                )
            else:
                self._prove(check)

    # reduce stores ---------------------------------------------------------------------------------
    def check_reduce_types(self) -> None:
        """Each reduce store's op and type against its atom (a tensor reduce) or the dtype given
        (a bulk reduce)."""
        for site in self._sites("store"):
            instruction = self.kernel.instructions[site.index]
            if not instruction.opcode.startswith("cp.reduce"):
                continue
            parts = instruction.opcode.split(".")
            op = next((part for part in parts if part in REDUCE_OPS), None)
            if ".tensor" in instruction.opcode:
                self._check_tensor_reduce(site.index, op)
            else:
                self._check_bulk_reduce(site.index, op, parts[-1])

    def _check_tensor_reduce(self, index: int, op: str | None) -> None:
        check = "reduce-type"
        atom = self.atom_of(index)
        if atom is None:
            self._leave(check, index, "its tensor map is not one of the atoms the MLIR names")
            return
        if atom.kind != "reduce" or atom.reduce_op != op:
            wanted = f".{atom.reduce_op}" if atom.kind == "reduce" else f"no reduce (a {atom.kind} atom)"
            self._find(
                check,
                index,
                f"the instruction reduces with .{op} but its atom was built for {wanted}: the tensor "
                "receives another reduction than the one asked for",
                expected=wanted,
                actual=f".{op}",
            )
            return
        if atom.element not in TENSOR_REDUCE_ELEMENTS.get(op, ()):
            self._find(
                check,
                index,
                f".{op} does not reduce {atom.element} tensors (the PTX ISA's types of "
                f"cp.reduce.async.bulk.tensor .{op}: {', '.join(TENSOR_REDUCE_ELEMENTS.get(op, ()))})",
                expected=" or ".join(TENSOR_REDUCE_ELEMENTS.get(op, ())),
                actual=atom.element,
            )
            return
        ordered = op in ("min", "max") and atom.element in ("i32", "i64")
        if not ordered:
            self._prove(check)
            return
        unsigned_map = (atom.tma_format or "").startswith("U")
        if atom.signed is None:
            self._leave(check, index, f"the {atom.element} tensor's signedness is not known (no trace)")
        elif atom.signed and unsigned_map:
            self._find(
                check,
                index,
                f"a signed {atom.dsl_element} tensor is reduced with .{op} through a tensor map of "
                f"format {atom.tma_format}: negative values compare as large unsigned ones",
                expected=f"tma_format S{atom.element[1:]}",
                actual=f"tma_format {atom.tma_format}",
            )
        elif atom.signed is False and not unsigned_map and atom.tma_format is not None:
            self._find(
                check,
                index,
                f"an unsigned {atom.dsl_element} tensor is reduced with .{op} through a signed tensor "
                f"map ({atom.tma_format})",
                expected=f"tma_format U{atom.element[1:]}",
                actual=f"tma_format {atom.tma_format}",
            )
        else:
            self._prove(check)

    def _check_bulk_reduce(self, index: int, op: str | None, ptx_type: str) -> None:
        check = "reduce-type"
        if op is None:
            self._find(
                check,
                index,
                "the bulk reduce names no reduction: the PTX ISA has none without one",
                expected=f"one of {', '.join(f'.{name}' for name in REDUCE_OPS)}",
                actual="none",
            )
            return
        if ptx_type not in BULK_REDUCE_TYPES[op]:
            self._find(
                check,
                index,
                f"the PTX ISA has no bulk reduce .{op} of .{ptx_type}",
                expected=" or ".join(f".{t}" for t in BULK_REDUCE_TYPES[op]),
                actual=f".{ptx_type}",
            )
            return
        if self.reduce_dtype is None:
            self._leave(check, index, "the tensor's dtype is not in the PTX (lint's reduce_dtype names it)")
            return
        allowed = bulk_reduce_types(op, self.reduce_dtype)
        if ptx_type in allowed:
            self._prove(check)
            return
        self._find(
            check,
            index,
            f"a tensor of {self.reduce_dtype} reduced with .{op}.{ptx_type}"
            + (": the comparison ignores the sign" if op in ("min", "max") and ptx_type[0] in "us" else "")
            + ("" if allowed else f" (no .{op} of {self.reduce_dtype} exists)"),
            expected=" or ".join(f".{op}.{t}" for t in allowed) or f"no .{op} of {self.reduce_dtype}",
            actual=f".{op}.{ptx_type}",
        )

    # waits -------------------------------------------------------------------------------------------
    def check_waits(self) -> None:
        """Each wait's parity and its place among its thread's arrives, on every run `phases`
        follows: the parity flips from the thread's last wait on the barrier; a first wait on a
        barrier that copies complete waits for phase 0 (parity 1 would pass at once, before any
        byte lands); no arrive of the thread's own follows a wait in the phase it waits for."""
        sites = [site.index for site in self._sites("wait")]
        if not sites:
            return
        followed = phases.follow(self.kernel)
        found = dict(followed.findings)
        for index, first in followed.first_at_one.items():
            if first.barrier in followed.transactions:
                found.setdefault(("wait-parity", index), first)
        for check in ("wait-parity", "wait-order"):
            for index in sites:
                if (check, index) in found:
                    self._find_wait(found[(check, index)])
                elif not followed.complete:
                    self._leave(check, index, f"its kernel's paths were not all followed ({followed.why})")
                elif index not in followed.reached:
                    self._leave(check, index, "no path followed reaches it")
                elif index in followed.unread:
                    self._leave(check, index, followed.unread[index])
                else:
                    self._prove(check)

    def _find_wait(self, finding: phases.WaitFinding) -> None:
        other = None if finding.other is None else self.kernel.instructions[finding.other].line
        fields = {"barrier": self.barrier_name(finding.barrier), "phase": str(finding.phase)}
        if finding.check == "wait-order":
            message = (
                f"this thread waits before its own arrive (line {other}) on the barrier: the phase "
                "cannot complete without that arrive, so the warp hangs"
            )
            self._find(
                finding.check,
                finding.index,
                message,
                expected="its arrive, then the wait",
                actual="the wait first",
                **fields,
            )
        elif finding.other is None:
            message = (
                "the first wait on a barrier copies complete waits at parity 1: it passes at once, "
                "before any byte lands (phase 0's parity is 0)"
            )
            self._find(
                finding.check, finding.index, message, expected="parity 0", actual="parity 1", **fields
            )
        else:
            message = (
                f"the parity did not flip since this thread's last wait on the barrier (line {other}): "
                "that phase has completed, so the wait passes at once and reads what it left"
            )
            self._find(
                finding.check,
                finding.index,
                message,
                expected=f"parity {1 - finding.parity}",
                actual=f"parity {finding.parity}",
                **fields,
            )


def check_reduce_dtype(reduce_dtype: object) -> None:
    """TmaConfigError unless `reduce_dtype` is None or a dtype tmakit knows."""
    if reduce_dtype is not None and (not isinstance(reduce_dtype, str) or reduce_dtype not in DTYPES):
        raise TmaConfigError(f"reduce_dtype is {reduce_dtype!r}; give None or one of {', '.join(DTYPES)}")


def check_inputs(ptx: object, mlir: object, tensor_elements: object, reduce_dtype: object) -> None:
    """TmaConfigError naming the first of `lint_text`'s arguments of a wrong type."""
    if not isinstance(ptx, str):
        raise TmaConfigError(f"ptx is {type_name(ptx)}; give the PTX text (a str)")
    if mlir is not None and not isinstance(mlir, str):
        raise TmaConfigError(f"mlir is {type_name(mlir)}; give the MLIR module's text (a str) or None")
    if not isinstance(tensor_elements, (tuple, list)) or not all(
        element is None or isinstance(element, str) for element in tensor_elements
    ):
        raise TmaConfigError(
            f"tensor_elements is {tensor_elements!r}; give a tuple of DSL element type names "
            "(Int32, Float16, ...; None where not a tensor)"
        )
    check_reduce_dtype(reduce_dtype)


def lint_text(
    ptx: str,
    mlir: str | None = None,
    tensor_elements: tuple[str | None, ...] = (),
    reduce_dtype: str | None = None,
) -> LintReport:
    """Lint captured text: every kernel (`.entry`) of `ptx`, with the atoms and launch facts of
    the DSL's `mlir` module (its text, as `CUTE_DSL_KEEP=ir` keeps it). Without `mlir`, tensor
    copies' bytes and multicast masks are unchecked.

    Args:
        ptx: the PTX text of the compiled function.
        mlir: the DSL's MLIR module text, or None.
        tensor_elements: the DSL element type (Int32, Uint32, Float16, ...) of each tensor the
            host function was compiled against, in order: a reduce atom's signedness, which the
            MLIR's signless types do not carry; () where not known.
        reduce_dtype: the dtype (a tmakit dtype name, "int32", "bf16", ...) the kernels' bulk
            reduce stores combine, where their tensors reach them as bytes; None leaves those
            stores' types unchecked.

    Returns:
        The LintReport of every kernel in `ptx`.

    Raises:
        TmaConfigError: `ptx` holds no kernel, or `reduce_dtype` is not a dtype tmakit knows.
    """
    check_inputs(ptx, mlir, tensor_elements, reduce_dtype)
    kernels = parse_kernels(ptx)
    module = parse_module(mlir, tuple(tensor_elements)) if mlir else []
    report = LintReport()
    for kernel in kernels:
        report.kernels.append(kernel.name)
        found = kernel_for(kernel.name, module)
        atoms = found.atoms if found else ()
        launch = found.launch if found else LaunchFacts()
        KernelLint(kernel, atoms, launch, report, reduce_dtype).run()
    return report
