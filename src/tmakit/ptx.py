"""Read the TMA and mbarrier instructions out of a kernel's PTX. Pure Python."""

from __future__ import annotations

import re
from dataclasses import dataclass

# The instructions the seed's schedule compiles to, in the order a reader meets them.
TMA_INSTRUCTIONS = {
    "mbarrier.init": "barrier initialised with its arrival count",
    "fence.mbarrier_init": "initialisation made visible",
    "mbarrier.arrive.expect_tx": "one arrival + the bytes this phase expects",
    "cp.async.bulk.tensor": "the TMA tile copy, completing bytes on the barrier",
    "mbarrier.try_wait.parity": "wait for the phase with the given parity",
    "elect.sync": "one thread of the warp elected",
}

_OPCODE = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z_][\w.:]*)", re.MULTILINE)


@dataclass(frozen=True)
class PtxInstruction:
    opcode: str  # the full opcode, e.g. cp.async.bulk.tensor.2d.shared::cta.global.tile...
    count: int


def find_instructions(ptx: str) -> dict[str, PtxInstruction]:
    """For each prefix in TMA_INSTRUCTIONS present in `ptx`: its full opcode and how many times
    it appears in the code (static count, not executions)."""
    found: dict[str, PtxInstruction] = {}
    for opcode in _OPCODE.findall(ptx):
        for prefix in TMA_INSTRUCTIONS:
            if opcode.startswith(prefix):
                previous = found.get(prefix)
                found[prefix] = PtxInstruction(opcode, 1 + (previous.count if previous else 0))
    return found


def expect_tx_byte_counts(ptx: str) -> list[int]:
    """The byte count of each `mbarrier.arrive.expect_tx` (or `mbarrier.expect_tx`), following a
    register operand back to the `mov` that set it."""
    lines = ptx.splitlines()
    counts = []
    for i, line in enumerate(lines):
        match = re.search(r"mbarrier\.(?:arrive\.)?expect_tx\S*\s+([^;]*);", line)
        if not match:
            continue
        operand = match.group(1).split(",")[-1].strip()
        if re.fullmatch(r"\d+", operand):
            counts.append(int(operand))
            continue
        setter = re.compile(rf"mov\.[bus]32\s+{re.escape(operand)},\s*(\d+);")
        for previous in reversed(lines[:i]):
            set_match = setter.search(previous)
            if set_match:
                counts.append(int(set_match.group(1)))
                break
    return counts
