"""Which of a kernel's branches a run of `phases` must follow: the static part of following its
waits. Pure Python.

A branch whose two ways rejoin (at its immediate post-dominator) with no barrier event between,
and nothing written there that a barrier event depends on (through values or other branches), is
one a run may jump over: a kernel's branches on its data (a row's index in range) would
otherwise double its runs at each.
"""

from __future__ import annotations

import re

from .program import Instruction, Kernel

_REGISTER = re.compile(r"%[a-z]+\d+")


def registers(operands: list[str] | tuple[str, ...]) -> set[str]:
    """The registers named in `operands`."""
    return set(_REGISTER.findall(" ".join(operands)))


def is_tx(instruction: Instruction) -> bool:
    """Bytes declared on a barrier or landing on it (no arrive)."""
    opcode = instruction.opcode
    return opcode.startswith("mbarrier.expect_tx") or (
        opcode.startswith(("cp.", "st.async")) and "mbarrier::complete_tx" in opcode
    )


def _is_event(instruction: Instruction) -> bool:
    """What a run's order of events holds: a wait, an arrive, an exit (bytes are apart: which
    barriers take them is all the checks read of them)."""
    opcode = instruction.opcode
    return (
        opcode.startswith(("mbarrier.", "cp.async.mbarrier.arrive"))
        and not opcode.startswith(("mbarrier.init", "mbarrier.expect_tx"))
        or opcode.split(".")[0] in ("ret", "exit", "trap")
    )


def barrier_operands(instruction: Instruction) -> list[str]:
    """The operands naming a barrier event's barrier and parity (none for other instructions)."""
    brackets = instruction.brackets()
    if instruction.opcode.startswith(("mbarrier.try_wait", "mbarrier.test_wait")):
        return list(instruction.operands[1:3])
    if is_tx(instruction) and not instruction.opcode.startswith("mbarrier"):
        return brackets[-1:]
    if _is_event(instruction) or is_tx(instruction):
        return brackets[:1]
    return []


def _post_dominators(kernel: Kernel) -> list[set[int]]:
    """Each block's post-dominators (the blocks every path from it to an exit passes)."""
    every = set(range(len(kernel.blocks)))
    found = [set(every) for _ in kernel.blocks]
    changed = True
    while changed:
        changed = False
        for block in reversed(kernel.blocks):
            successors = block.successors
            new = {block.index} | (set.intersection(*(found[s] for s in successors)) if successors else set())
            if new != found[block.index]:
                found[block.index], changed = new, True
    return found


def _written(instruction: Instruction) -> set[str]:
    """The registers an instruction writes (elect.sync writes two)."""
    if not instruction.operands or not (instruction.destination or instruction.opcode.startswith("elect")):
        return set()
    return registers(instruction.operands[:1])


def skippable_branches(
    kernel: Kernel,
) -> tuple[dict[int, tuple[int, frozenset[str], tuple[int, ...]]], set[str]]:
    """The branches whose two ways rejoin with no barrier event between and nothing written that
    a barrier event depends on (through values or branches): each branch's instruction -> the
    instruction where its ways rejoin, the registers they write and the instructions declaring or
    landing bytes between (a run records those whose barrier it knows). A run need not fork
    there: a kernel's branches on its data (a row's index in range) would otherwise double its
    runs at each. And the registers barrier events depend on."""
    instructions = kernel.instructions
    pdom = _post_dominators(kernel)
    # Each two-way branch -> (the block where its ways rejoin, the instructions between, whether
    # it closes a loop). A loop's branch is never skipped itself, but may be inside a skipped one.
    regions: dict[int, tuple[int, set[int], bool]] = {}
    for block in kernel.blocks:
        last = instructions[block.end - 1] if block.end > block.start else None
        if last is None or last.inline or last.guard is None or not last.opcode.startswith("bra"):
            continue
        if len(block.successors) < 2:
            continue  # the elected lane's way only (`program`)
        strict = pdom[block.index] - {block.index}
        join = next((d for d in strict if strict <= pdom[d]), None)
        if join is None:
            continue
        seen, work = set(), [s for s in block.successors if s != join]
        while work:
            node = work.pop()
            if node not in seen and node != join:
                seen.add(node)
                work.extend(kernel.blocks[node].successors)
        inside = {i for node in seen for i in range(kernel.blocks[node].start, kernel.blocks[node].end)}
        regions[block.end - 1] = (join, inside, block.index in seen)
    relevant: set[str] = set()
    for instruction in instructions:
        relevant |= registers(barrier_operands(instruction))
    kept: set[int] = set()  # the branches a run must follow
    changed = True
    while changed:
        changed = False
        for instruction in instructions:
            if _written(instruction) & relevant:
                sources = registers(instruction.operands[1:])
                if instruction.guard:
                    sources.add(instruction.guard)
                if not sources <= relevant:
                    relevant |= sources
                    changed = True
        for index, (_, inside, _) in regions.items():
            if index not in kept and any(
                _is_event(instructions[i]) or _written(instructions[i]) & relevant for i in inside
            ):
                kept.add(index)
                relevant.add(instructions[index].guard)
                changed = True
    skips = {}
    for index, (join, inside, loop) in regions.items():
        if index in kept or loop:
            continue
        written = frozenset(register for i in inside for register in _written(instructions[i]))
        tx = tuple(sorted(i for i in inside if is_tx(instructions[i])))
        skips[index] = (kernel.blocks[join].start, written, tx)
    return skips, relevant
