"""Each wait's phase, found by running the kernel's PTX for one actor at a time: a warp's elected
lane (`program`), its registers holding linear forms of what the PTX does not fix (the thread's
index, the launch's parameters, what it loads). Pure Python.

A ring's stage index and phase bit are counters the PTX fixes once their start is known, so each
wait's barrier and parity come out as values: the third pass through a 4-stage ring waits on stage
2 at parity 0. What the PTX does not fix (a tile count, the warp's role) forks the run, each side
remembering what it assumed: a count tested against a loop's counter is bounded by each test, so
a warp that left an inner loop after 3 iterations leaves it after 3 on the next tile too. A loop's
head is passed at most `loop_bound` times on a run (enough for the largest ring the kernel
initialises barriers for to wrap twice); a run past that ends there, with what it saw.

Each event (a wait with its parity, an arrive, bytes declared or landed) is checked as the run
meets it (`observe`): parity flips on every wait of a barrier, a first wait at parity 1 is noted
(wrong on a barrier copies complete: `checks` decides, knowing them all), and no arrive of the
thread's own follows a wait in the phase it waits for. Branches whose two ways rejoin with no
barrier event between and nothing an event depends on are not forked (`regions`), and
a run that reaches a loop head in a state another reached there is followed no further
(`state_key`). A run that runs out of budget leaves the kernel's waits unchecked, never passed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from fractions import Fraction

from .program import IMMEDIATE, SAME_VALUE, SPECIAL, Form, Instruction, Kernel, address_parts, linear_result
from .regions import barrier_operands, is_tx, registers, skippable_branches

MAX_RUNS = 3000  # runs followed through a kernel before its waits are left unchecked
MAX_STEPS = 200_000  # instructions interpreted through a kernel, all runs together
MAX_BARRIERS = 128  # barriers a run tells apart
KEY_STEPS = 10  # what a loop head's state key costs, in instructions' time
MIN_LOOP_BOUND, MAX_LOOP_BOUND = 8, 40
INFINITY = float("inf")
MAX_SPLIT_TERMS = 2  # a sign split's value: at most this many leaves
MAX_TERMS = 6  # a value of more leaves is followed as one unknown

_COMPARISONS = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "lo": lambda a, b: a < b,
    "ls": lambda a, b: a <= b,
    "hi": lambda a, b: a > b,
    "hs": lambda a, b: a >= b,
}
_UNSIGNED_COMPARISONS = {"lo", "ls", "hi", "hs"}
# Opcodes whose value is their first source's: `program`'s, but for mapa (a run names a remote
# barrier apart from its own), and mov.
_SAME_VALUE = ("mov.", *(opcode for opcode in SAME_VALUE if opcode != "mapa."))


@dataclass(frozen=True)
class Event:
    """What one instruction did to a barrier on a run: `kind` wait (with its `parity`, None where
    not known), arrive, or tx (bytes declared or landed: the barrier counts transactions), at
    instruction `index`, on `barrier` (its address's form, None where not read)."""

    kind: str
    index: int
    barrier: Form | None
    parity: int | None = None


@dataclass(frozen=True)
class Condition:
    """A predicate the run could not decide: `left cmp right` (`key` for one it cannot bound)."""

    cmp: str
    unsigned: bool
    difference: Form
    key: str


@dataclass
class Run:
    """One path's state: registers, what it assumed, what it did on each barrier, loop heads
    passed."""

    registers: dict[str, object] = field(default_factory=dict)
    lows: dict[str, int] = field(default_factory=dict)  # a leaf -> its least value on this run
    highs: dict[str, int] = field(default_factory=dict)
    excluded: dict[str, frozenset[int]] = field(default_factory=dict)
    facts: dict[str, bool] = field(default_factory=dict)  # an undecidable test's key -> outcome
    passes: dict[int, int] = field(default_factory=dict)  # a loop head -> passes that forked
    forked_at: dict[int, int] = field(default_factory=dict)  # a loop head -> `forks` at its last pass
    forks: int = 0  # the times this run's path split on a value the PTX does not fix
    loads: int = 0  # values read so far (each a leaf of its own)
    barriers: dict[Form, Waits] = field(default_factory=dict)  # what the run did on each barrier
    pc: int = 0

    def fork(self) -> Run:
        return Run(
            dict(self.registers),
            dict(self.lows),
            dict(self.highs),
            dict(self.excluded),
            dict(self.facts),
            dict(self.passes),
            dict(self.forked_at),
            self.forks,
            self.loads,
            dict(self.barriers),
            self.pc,
        )


@dataclass(frozen=True)
class Waits:
    """A run's waits on one barrier so far: the last one's `parity` (None before the first) and
    instruction, how many (`count`: the phase the next waits for, from the thread's view),
    whether the thread arrived since (`arrived`), and a wait no arrive of its own preceded
    (`pending`: its instruction, until the thread's next arrive or wait shows which it was)."""

    parity: int | None = None
    last: int | None = None
    count: int = 0
    arrived: bool = False
    pending: int | None = None


@dataclass(frozen=True)
class WaitFinding:
    """A wait found wrong: the `check`, the wait's instruction `index`, its `barrier`, the
    `phase` (waits before it on the barrier), its `parity`, and the instruction that shows it
    (`other`: the earlier wait with the same parity, or the arrive after the wait)."""

    check: str
    index: int
    barrier: Form
    phase: int
    parity: int
    other: int | None = None


@dataclass
class Phases:
    """What following every run of a kernel found: the waits `reached`, those whose barrier or
    parity a run could not read (`unread`, why), the `findings`, whether every run was followed
    (`complete`; else `why`), and the loop bound used. A first wait at parity 1 is a finding
    only on a barrier copies complete (`transactions`): `checks` decides, from
    `first_at_one`."""

    reached: set[int]
    unread: dict[int, str]
    findings: dict[tuple[str, int], WaitFinding]
    first_at_one: dict[int, WaitFinding]
    transactions: set[Form]
    complete: bool
    loop_bound: int
    why: str | None = None


def _unknown(form: Form) -> tuple[str, int]:
    """A form's unknown part as one quantity and its scale: `2*a - 2*b + 3` is 2 * (a - b) + 3,
    so that bounds learnt of `a - b` apply wherever it appears."""
    divisor = math.gcd(*(c for _, c in form.terms))
    if form.terms[0][1] < 0:
        divisor = -divisor
    unit = Form(tuple((n, c // divisor) for n, c in form.terms))
    return str(unit), divisor


def _floor_shift(value: float, shift: int) -> float:
    """`value >> shift` rounding down, for a bound that may be infinite."""
    return value if abs(value) == INFINITY else int(value) >> shift


def _width(opcode: str) -> int:
    match = re.search(r"\.[bsu](8|16|32|64)\b", opcode)
    return int(match.group(1)) if match else 32


def _wrap(value: int, bits: int, signed: bool = True) -> int:
    value &= (1 << bits) - 1
    if signed and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


class Interpreter:
    """Follows every run of one kernel from its entry (`follow`)."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.instructions = kernel.instructions
        inits = sum(i.opcode.startswith("mbarrier.init") for i in self.instructions)
        self.loop_bound = max(MIN_LOOP_BOUND, min(MAX_LOOP_BOUND, 2 * inits + 2))
        self.heads = {kernel.blocks[head].start for _, head in kernel.back_edges}
        self.steps = 0
        self.skips, self.relevant = skippable_branches(kernel)
        self.names: dict[str, str] = {}  # a computation's text -> its leaf's short name
        self.definitions: dict[str, tuple[str, int]] = {}  # a leaf -> (the leaf it shifts, by)
        self.products: dict[str, tuple[Form, int, int]] = {}  # a mul.hi leaf -> (x, factor, bits)
        self.reached: set[int] = set()
        self.unread: dict[int, str] = {}
        self.findings: dict[tuple[str, int], WaitFinding] = {}
        self.first_at_one: dict[int, WaitFinding] = {}
        self.transactions: set[Form] = set()

    # -- values -------------------------------------------------------------------------------------
    def value(self, run: Run, operand: str) -> Form:
        operand = operand.strip()
        if IMMEDIATE.match(operand):
            return Form.of(int(operand.rstrip("U"), 0))
        if operand in run.registers:
            found = run.registers[operand]
            return found if isinstance(found, Form) else Form.leaf(f"?{operand}")
        if operand.startswith("%") and not SPECIAL.match(operand):
            return Form.leaf(f"{operand}@entry")
        return Form.leaf(operand)

    def address(self, run: Run, operand: str) -> Form | None:
        parts = address_parts(operand)
        return None if parts is None else self.value(run, parts[0]) + Form.of(parts[1])

    def _fresh(self, run: Run, name: str) -> Form:
        run.loads += 1
        return Form.leaf(f"{name}#{run.loads}")

    def _opaque(self, opcode: str, sources: list[Form]) -> Form:
        """A value the forms cannot express: a leaf named by what computed it, so that the same
        computation on the same values is the same leaf."""
        name = f"{opcode}({', '.join(str(s) for s in sources)})"
        return Form.leaf(self.names.setdefault(name, f"?{len(self.names)}"))

    def compute(self, run: Run, index: int) -> None:
        """Runs a non-branch instruction: its destination's new value, or its event."""
        instruction = self.instructions[index]
        opcode, operands = instruction.opcode, instruction.operands
        head = opcode.split(".")[0]
        if opcode.startswith(("mbarrier.try_wait", "mbarrier.test_wait")):
            barrier = self.address(run, operands[1]) if len(operands) > 1 else None
            parity = None
            if ".parity" in opcode and len(operands) > 2:
                value = self.value(run, operands[2]).constant
                parity = None if value is None else value & 1
            self.observe(run, Event("wait", index, barrier, parity))
            if operands and not operands[0].startswith("["):
                run.registers[operands[0].strip()] = True  # the wait ends with its phase complete
            return
        if opcode.startswith(("mbarrier.arrive", "cp.async.mbarrier.arrive")):
            brackets = instruction.brackets()
            barrier = self.address(run, brackets[0]) if brackets else None
            self.observe(run, Event("arrive", index, barrier))
            if "expect_tx" in opcode:
                self.observe(run, Event("tx", index, barrier))
            destination = operands[0].strip() if operands else ""
            if destination.startswith("%"):
                run.registers[destination] = self._fresh(run, "state")
            return
        if is_tx(instruction):
            brackets = instruction.brackets()
            position = 0 if opcode.startswith("mbarrier") else -1  # a copy names its barrier last
            barrier = self.address(run, brackets[position]) if brackets else None
            self.observe(run, Event("tx", index, barrier))
            return
        if opcode.startswith("elect.sync") and operands:
            names = [n.strip() for n in operands[0].split("|")]
            if names and names[0].startswith("%"):
                run.registers[names[0]] = self._fresh(run, "elected")
            if len(names) > 1:
                run.registers[names[1]] = True  # the elected lane's run
            return
        destination = instruction.destination
        if destination is None:
            return
        run.registers[destination] = self._result(run, instruction, head)

    def _result(self, run: Run, instruction: Instruction, head: str) -> object:
        """The value `instruction` writes: a form, a predicate's outcome or Condition."""
        opcode, sources = instruction.opcode, instruction.operands[1:]
        if head == "setp" and len(sources) == 2:
            parts = opcode.split(".")
            cmp = parts[1] if len(parts) > 1 else "eq"
            unsigned = cmp in _UNSIGNED_COMPARISONS or ".u" in opcode
            left, right = self.value(run, sources[0]), self.value(run, sources[1])
            return self.decide(run, cmp, unsigned, left, right, _width(opcode))
        if opcode.startswith(("not.pred",)) and len(sources) == 1:
            inner = self.predicate(run, sources[0])
            return (not inner) if isinstance(inner, bool) else ("not", inner)
        if opcode.startswith(("and.pred", "or.pred", "xor.pred")) and len(sources) == 2:
            a, b = self.predicate(run, sources[0]), self.predicate(run, sources[1])
            if isinstance(a, bool) and isinstance(b, bool):
                return {"and": a and b, "or": a or b, "xor": a != b}[head]
            if head == "and" and (a is False or b is False):
                return False
            if head == "or" and (a is True or b is True):
                return True
            return (head, a, b)
        if head == "selp" and len(sources) == 3:
            chosen = self.predicate(run, sources[2])
            a, b = self.value(run, sources[0]), self.value(run, sources[1])
            if isinstance(chosen, bool):
                return a if chosen else b
            if a == b:
                return a
            leaf = self._opaque("selp", [a, b, Form.leaf(str(chosen))])
            self._bound_result(run, leaf, "selp", [a, b], _width(opcode))
            return leaf
        if opcode == "mov.pred" and len(sources) == 1:
            constant = self.value(run, sources[0]).constant if IMMEDIATE.match(sources[0]) else None
            return bool(constant) if constant is not None else self.predicate(run, sources[0])
        if opcode.startswith(_SAME_VALUE) and len(sources) == 1:
            return self.value(run, sources[0])
        if opcode.startswith("shfl.sync.idx") and sources:
            return self.value(run, sources[0])
        values = [self.value(run, s) for s in sources]
        bits = _width(opcode)
        linear = linear_result(opcode, values)
        if linear is not None and len(linear.terms) > MAX_TERMS:
            return self._fresh(run, "sum")  # a value run-time counts keep adding to
        if linear is not None:
            constant = linear.constant
            return linear if constant is None else Form.of(_wrap(constant, bits))
        constants = [v.constant for v in values]
        if values and None not in constants:
            computed = self._arithmetic(head, opcode, constants, bits)
            if computed is not None:
                return Form.of(_wrap(computed, bits))
        if opcode.startswith(("ld.param", "ld.const")):
            return Form.leaf(f"{opcode}{sources[0] if sources else ''}")
        if head in ("ld", "atom", "shfl", "vote", "activemask", "mapa", "match", "redux", "tex", "suld"):
            return self._fresh(run, f"{head}@{instruction.line}")
        leaf = self._opaque(opcode, values)
        self._bound_result(run, leaf, opcode, values, bits)
        shift = values[1].constant if head == "shr" and len(values) == 2 else None
        source = values[0].terms
        if (
            shift is not None
            and 0 < shift < bits
            and len(source) == 1
            and source[0][1] == 1
            and not values[0].const
        ):
            # a shift of a value no run has seen negative (`tid.x >> 5`) rounds alike signed or not
            if run.lows.get(source[0][0], -1) >= 0:
                self.definitions.setdefault(leaf.terms[0][0], (source[0][0], shift))
        factor = values[1].constant if opcode.startswith("mul.hi.s") and len(values) == 2 else None
        if factor is not None and factor > 0:
            # a division by a constant's first step: monotone, and of its dividend's sign
            self.products.setdefault(leaf.terms[0][0], (values[0], factor, bits))
        return leaf

    @staticmethod
    def _arithmetic(head: str, opcode: str, values: list[int], bits: int) -> int | None:
        unsigned = ".u" in opcode or ".b" in opcode
        mask = (1 << bits) - 1
        a = values[0]
        b = values[1] if len(values) > 1 else None
        if head == "and" and b is not None:
            return a & b
        if head == "or" and b is not None:
            return a | b
        if head == "xor" and b is not None:
            return a ^ b
        if head == "not":
            return ~a
        if head == "shr" and b is not None:
            return ((a & mask) if unsigned else a) >> min(b, bits)
        if head in ("div", "rem") and b:
            left, right = ((a & mask), (b & mask)) if unsigned else (a, b)
            quotient = abs(left) // abs(right) * (1 if (left >= 0) == (right >= 0) else -1)
            return quotient if head == "div" else left - quotient * right
        if head == "min" and b is not None:
            return min(a, b)
        if head == "max" and b is not None:
            return max(a, b)
        if head == "mul" and ".hi" in opcode and b is not None:
            return (((a & mask) * (b & mask)) if unsigned else a * b) >> bits
        return None

    # -- predicates and what a run assumes ----------------------------------------------------------
    def predicate(self, run: Run, name: str) -> object:
        name = name.strip()
        negate = name.startswith("!")
        found = run.registers.get(name.lstrip("!"), ("unknown", name))
        if isinstance(found, bool):
            return found != negate
        return ("not", found) if negate else found

    def decide(self, run: Run, cmp: str, unsigned: bool, left: Form, right: Form, bits: int) -> object:
        """The comparison's outcome where the run's assumptions fix it, else the Condition."""
        test = _COMPARISONS.get(cmp)
        if test is None:
            return Condition(cmp, unsigned, left - right, f"{cmp}({left}, {right})")

        if left.constant is not None and right.constant is not None:
            a, b = left.constant, right.constant
            if unsigned:
                a, b = a & ((1 << bits) - 1), b & ((1 << bits) - 1)
            return test(a, b)
        difference = left - right
        condition = Condition(cmp, unsigned, difference, f"{cmp}({left}, {right})")
        known = self._bounded(run, condition)
        if known is not None:
            return known
        return run.facts.get(condition.key, condition)

    def range(self, run: Run, form: Form) -> tuple[float, float]:
        """The least and most `form` may be on this run, from what bounds its leaves."""
        least = most = form.const
        for name, coefficient in form.terms:
            low, high = self._leaf_range(run, name)
            ends = (coefficient * low, coefficient * high)
            least, most = least + min(ends), most + max(ends)
        return least, most

    def _leaf_range(self, run: Run, name: str, depth: int = 0) -> tuple[float, float]:
        """A leaf's bounds: what the run learnt of it, and, for a leaf shifted or divided from
        another (`tid.x >> 7`, a warp group), what that one's bounds give now."""
        low, high = run.lows.get(name, -INFINITY), run.highs.get(name, INFINITY)
        definition = self.definitions.get(name)
        if definition is not None and depth < 8:
            source, shift = definition
            source_low, source_high = self._leaf_range(run, source, depth + 1)
            low = max(low, _floor_shift(source_low, shift))
            high = min(high, _floor_shift(source_high, shift))
        product = self.products.get(name)
        if product is not None and depth < 8:
            form, factor, bits = product
            ends = [
                e if abs(e) == INFINITY else _floor_shift(e * factor, bits) for e in self.range(run, form)
            ]
            low, high = max(low, ends[0]), min(high, ends[1])
        return low, high

    def _propagate(self, run: Run, name: str) -> bool:
        """Carries a leaf's new bounds back to the leaf it is shifted from (a warp's index bounds
        the thread's); False where the run's bounds then disagree."""
        for _ in range(8):
            definition = self.definitions.get(name)
            if definition is None:
                return True
            source, shift = definition
            low, high = run.lows.get(name), run.highs.get(name)
            if low is not None and low != -INFINITY:
                run.lows[source] = max(run.lows.get(source, -INFINITY), int(low) << shift)
            if high is not None and high != INFINITY:
                run.highs[source] = min(run.highs.get(source, INFINITY), ((int(high) + 1) << shift) - 1)
            if run.lows.get(source, -INFINITY) > run.highs.get(source, INFINITY):
                return False
            name = source
        return True

    def _bound_result(self, run: Run, leaf: Form, opcode: str, values: list[Form], bits: int) -> None:
        """Bounds an opaque result from its operands' ranges, for the operations a kernel's index
        arithmetic uses (a tile count from the block's index divides by a constant): what lets a
        run see that a loop cannot pass its ring's length."""
        head = opcode.split(".")[0]
        ranges = [self.range(run, v) for v in values]
        constants = [v.constant for v in values]
        unsigned = ".u" in opcode or ".b" in opcode
        found: tuple[float, float] | None = None
        if head == "selp" and len(ranges) >= 2:
            found = (min(ranges[0][0], ranges[1][0]), max(ranges[0][1], ranges[1][1]))
        elif head in ("min", "max") and len(ranges) == 2:
            pick = min if head == "min" else max
            found = (pick(ranges[0][0], ranges[1][0]), pick(ranges[0][1], ranges[1][1]))
        elif len(ranges) == 2 and constants[1] is not None:
            (low, high), c = ranges[0], constants[1]
            if unsigned and low < 0:
                low, high = (0, (1 << bits) - 1) if head in ("shr", "div", "rem", "mul") else (low, high)
            if head == "shr" and 0 <= c < bits:
                found = (_floor_shift(low, c), _floor_shift(high, c))
                if unsigned and ranges[0][0] < 0:
                    found = (0, (1 << (bits - c)) - 1)
            elif head == "and" and c >= 0:
                found = (0, c if low < 0 else min(c, high))
            elif head == "div" and c > 0 and low >= 0:
                found = (low // c, high // c if high != INFINITY else INFINITY)
            elif head == "rem" and c > 0:
                found = (0, c - 1) if low >= 0 else (-(c - 1), c - 1)
            elif head == "mul" and ".hi" in opcode:
                factor = c & ((1 << bits) - 1) if unsigned else c
                ends = [
                    _floor_shift(end * factor, bits) if abs(end) != INFINITY else end * factor
                    for end in (low, high)
                ]
                found = (min(ends), max(ends)) if factor else (0, 0)
        if found is None:
            return
        name = leaf.terms[0][0]
        if found[0] != -INFINITY:
            run.lows[name] = max(run.lows.get(name, -INFINITY), found[0])
        if found[1] != INFINITY:
            run.highs[name] = min(run.highs.get(name, INFINITY), found[1])

    def _bounded(self, run: Run, condition: Condition) -> bool | None:
        """A comparison's outcome over the values its one leaf may still take on this run, where
        they all give one (counters are read as signed: no wrap)."""
        difference = condition.difference
        if not difference.terms:
            return None
        leaf, scale = _unknown(difference)
        low, high = run.lows.get(leaf, -INFINITY), run.highs.get(leaf, INFINITY)
        ends = (scale * low + difference.const, scale * high + difference.const)
        least, most = self.range(run, difference)
        least, most = max(least, min(ends)), min(most, max(ends))
        cmp = condition.cmp
        if cmp in ("eq", "ne"):
            root = Fraction(-difference.const, scale)
            equal = None
            if least == most == 0:
                equal = True
            elif least > 0 or most < 0 or root in run.excluded.get(leaf, ()):
                equal = False
            return equal if equal is None or cmp == "eq" else not equal
        below = {"lt": most < 0, "lo": most < 0, "le": most <= 0, "ls": most <= 0}
        above = {"gt": least > 0, "hi": least > 0, "ge": least >= 0, "hs": least >= 0}
        if cmp in below:
            if below[cmp]:
                return True
            return False if (least >= 0 if cmp in ("lt", "lo") else least > 0) else None
        if cmp in above:
            if above[cmp]:
                return True
            return False if (most <= 0 if cmp in ("gt", "hi") else most < 0) else None
        return None

    def assume(self, run: Run, value: object, outcome: bool) -> bool:
        """Records that `value` came out `outcome` on this run; False where the run's earlier
        assumptions rule that out."""
        if isinstance(value, bool):
            return value == outcome
        if isinstance(value, tuple):
            if value[0] == "not":
                return self.assume(run, value[1], not outcome)
            key = repr(value)
            if run.facts.get(key, outcome) != outcome:
                return False
            run.facts[key] = outcome
            if value[0] == "and" and outcome:
                return self.assume(run, value[1], True) and self.assume(run, value[2], True)
            if value[0] == "or" and not outcome:
                return self.assume(run, value[1], False) and self.assume(run, value[2], False)
            return True
        if not isinstance(value, Condition):
            return True
        known = self._bounded(run, value)
        if known is not None:
            return known == outcome
        if run.facts.get(value.key, outcome) != outcome:
            return False
        run.facts[value.key] = outcome
        difference = value.difference
        if not difference.terms:
            return True
        leaf, scale = _unknown(difference)
        if scale not in (1, -1):
            return True
        cmp = value.cmp if outcome else _NEGATION[value.cmp]
        if scale == -1:  # -x + c cmp 0  <=>  x - c (mirrored cmp) 0
            cmp = _MIRROR[cmp]
        root = -difference.const * scale  # x cmp root
        low, high = run.lows.get(leaf), run.highs.get(leaf)
        if cmp == "eq":
            low, high = root, root
        elif cmp == "ne":
            run.excluded[leaf] = run.excluded.get(leaf, frozenset()) | {root}
        elif cmp in ("lt", "lo"):
            high = root - 1 if high is None else min(high, root - 1)
        elif cmp in ("le", "ls"):
            high = root if high is None else min(high, root)
        elif cmp in ("gt", "hi"):
            low = root + 1 if low is None else max(low, root + 1)
        elif cmp in ("ge", "hs"):
            low = root if low is None else max(low, root)
        excluded = run.excluded.get(leaf, frozenset())
        while low is not None and low in excluded:
            low += 1
        while high is not None and high in excluded:
            high -= 1
        if low is not None:
            run.lows[leaf] = low
        if high is not None:
            run.highs[leaf] = high
        if low is not None and high is not None and low > high:
            return False
        return self._propagate(run, leaf)

    # -- what runs do on barriers ----------------------------------------------------------------
    def observe(self, run: Run, event: Event) -> None:
        """Checks an event against the run's waits on its barrier so far: a wait's parity flips
        from the last, a first wait at parity 1 is noted (wrong on a barrier copies complete), and
        a wait the thread's own arrive follows in its phase is one that waits for itself."""
        barrier = event.barrier
        if barrier is not None and not all(_FIXED.match(name) for name, _ in barrier.terms):
            barrier = None  # an address of values the run does not know: no barrier it can name
        if barrier is not None and barrier not in run.barriers and len(run.barriers) >= MAX_BARRIERS:
            barrier = None  # past any kernel's count: an address that keeps moving
        if event.kind == "tx":
            if barrier is not None:
                self.transactions.add(barrier)
            return
        if event.kind == "arrive":
            if barrier is None:
                return
            state = run.barriers.get(barrier, Waits())
            if state.pending is not None:
                self._found(
                    WaitFinding(
                        "wait-order", state.pending, barrier, state.count - 1, state.parity or 0, event.index
                    )
                )
            run.barriers[barrier] = replace(state, arrived=True, pending=None)
            return
        self.reached.add(event.index)
        if barrier is None or event.parity is None:
            why = "its barrier's address is not read" if barrier is None else "its parity is set at run time"
            self.unread.setdefault(event.index, why)
            return
        state = run.barriers.get(barrier, Waits())
        parity = event.parity
        if state.parity is not None and state.parity == parity:
            self._found(WaitFinding("wait-parity", event.index, barrier, state.count, parity, state.last))
        elif state.parity is None and parity == 1:
            self.first_at_one.setdefault(event.index, WaitFinding("wait-parity", event.index, barrier, 0, 1))
        passes_at_once = state.parity is None and parity == 1
        pending = None if state.arrived or passes_at_once else event.index
        run.barriers[barrier] = Waits(parity, event.index, state.count + 1, False, pending)

    def _found(self, finding: WaitFinding) -> None:
        self.findings.setdefault((finding.check, finding.index), finding)

    def state_key(self, run: Run) -> tuple:
        """What decides the run's future at a loop head: the registers barrier events depend on,
        what bounds their leaves, its assumptions and its waits so far, with the leaves it read
        (named by when) renamed in order of appearance, so that two runs that reach one state
        are followed once."""
        names: dict[str, str] = {}

        def canon(text: str) -> str:
            if "#" not in text:
                return text
            return _FRESH.sub(lambda m: names.setdefault(m.group(0), f"#{len(names)}"), text)

        def known(text: str) -> str | None:
            """`text` renamed, or None where it names a value read at run time that the
            registers do not hold (the future does not see it)."""
            if "#" not in text:
                return text
            if any(name not in names for name in _FRESH.findall(text)):
                return None
            return canon(text)

        values, leaves = [], set()
        for register in sorted(self.relevant):
            if register in run.registers:
                value = run.registers[register]
                values.append((register, canon(str(value))))
                leaves |= _leaves(value)
        waits = tuple(
            sorted(
                (name, state)
                for barrier, state in run.barriers.items()
                if (name := known(str(barrier))) is not None
            )
        )
        facts = tuple(
            sorted((k, o) for k, o in ((known(key), outcome) for key, outcome in run.facts.items()) if k)
        )
        for leaf in list(leaves):  # what bounds a leaf: the leaves it is computed from
            while leaf in self.definitions:
                leaf = self.definitions[leaf][0]
                leaves.add(leaf)
        bounds = tuple(
            sorted(
                (name, run.lows.get(leaf), run.highs.get(leaf), tuple(sorted(run.excluded.get(leaf, ()))))
                for leaf in leaves
                if (name := known(leaf)) is not None
            )
        )
        return (run.pc, tuple(values), bounds, facts, waits)

    # -- runs -------------------------------------------------------------------------------------
    def follow(self) -> Phases:
        """Every run from the entry, each to its exit, its loop bound, or the budget's end; a run
        reaching a loop head in a state another run reached there is followed no further."""
        finished = 0
        pending = [Run(lows=dict(_SPECIAL_LOWS), highs=dict(_SPECIAL_HIGHS))]
        seen: set[tuple] = set()
        complete, why = True, None
        while pending:
            run = pending.pop()
            state = "go"
            while state == "go":
                if finished + len(pending) >= MAX_RUNS or self.steps >= MAX_STEPS:
                    why = f"more than {MAX_RUNS} paths" if self.steps < MAX_STEPS else "too many steps"
                    complete, pending = False, []
                    break
                if run.pc >= len(self.instructions):
                    state = "end"
                elif run.pc in self.heads:
                    self.steps += KEY_STEPS
                    key = self.state_key(run)
                    if key in seen:
                        state = "merged"
                    elif not self.pass_head(run):
                        state = "end"  # the loop bound: the run ends with what it saw
                    else:
                        seen.add(key)
                        state, forks = self.step(run)
                        pending.extend(forks)
                else:
                    state, forks = self.step(run)
                    pending.extend(forks)
            finished += state == "end"
        return Phases(
            self.reached,
            self.unread,
            self.findings,
            self.first_at_one,
            self.transactions,
            complete,
            self.loop_bound,
            why,
        )

    def pass_head(self, run: Run) -> bool:
        """Counts a pass of the loop head at `run.pc` where the run forked since its last pass (a
        loop whose count the PTX fixes runs to its end); False past the loop bound."""
        if run.forks != run.forked_at.get(run.pc, -1):
            run.forked_at[run.pc] = run.forks
            run.passes[run.pc] = run.passes.get(run.pc, 0) + 1
        return run.passes.get(run.pc, 0) <= self.loop_bound

    def step(self, run: Run) -> tuple[str, list[Run]]:
        """Runs the instruction at `run.pc`, moving it on: whether the run goes on ("go"), ended
        at an exit ("end") or cannot happen ("dead": its assumptions disagree), and the runs it
        forked (a guard the run could not decide: the one skipping the instruction)."""
        self.steps += 1
        index = run.pc
        instruction = self.instructions[index]
        head = instruction.opcode.split(".")[0]
        forks: list[Run] = []
        if instruction.inline and head == "bra":  # the DSL's wait loop: the wait is one event
            run.pc = index + 1
            return "go", forks
        if index in self.skips:  # both ways rejoin with no barrier event and nothing it reads
            target, written, bytes_ = self.skips[index]
            for at in bytes_:
                if not registers(barrier_operands(self.instructions[at])) & written:
                    self.compute(run, at)
            for register in written:
                run.registers[register] = self._fresh(run, f"{register}@join")
            run.pc = target
            return "go", forks
        if instruction.guard is not None:
            guard = self.predicate(run, instruction.guard)
            if instruction.negated:
                guard = (not guard) if isinstance(guard, bool) else ("not", guard)
            if not isinstance(guard, bool):
                skipped = run.fork()
                if self.assume(skipped, guard, False):
                    skipped.pc = index + 1
                    forks.append(skipped)
                if not self.assume(run, guard, True):
                    return "dead", forks
                if forks:
                    run.forks += 1
                    skipped.forks += 1
            elif not guard:
                run.pc = index + 1
                return "go", forks
        if head in ("ret", "exit", "trap"):
            return "end", forks
        if head == "bra":
            target = self.kernel.labels.get(instruction.operands[0] if instruction.operands else "")
            if target is None:
                return "end", forks
            run.pc = target
            return "go", forks
        sign = self._sign_split(run, instruction)
        if sign is not None:
            negative = run.fork()
            if self.assume(negative, sign, True):
                self.compute(negative, index)
                negative.pc = index + 1
                negative.forks += 1
                run.forks += 1
                forks.append(negative)
            if not self.assume(run, sign, False):
                return "dead", forks
        self.compute(run, index)
        run.pc = index + 1
        return "go", forks

    def _sign_split(self, run: Run, instruction: Instruction) -> Condition | None:
        """`x < 0` where `instruction` takes the sign bit of an `x` the run has not fixed the sign
        of, and what it writes decides a barrier event: the idiom of a division by a constant
        rounds toward zero by adding it, and the run follows each sign apart so that the quotient's
        bounds stay exact (a loop's count from a block's index)."""
        if not instruction.opcode.startswith("shr.") or len(instruction.operands) != 3:
            return None
        bits = _width(instruction.opcode)
        if self.value(run, instruction.operands[2]).constant != bits - 1:
            return None
        if instruction.destination not in self.relevant:
            return None
        source = self.value(run, instruction.operands[1])
        if source.constant is not None:
            return None
        if len(source.terms) == 1 and source.terms[0][1] == 1 and not source.const:
            product = self.products.get(source.terms[0][0])
            if product is not None:
                source = product[0]  # the dividend's sign is the quotient's
        if len(source.terms) > MAX_SPLIT_TERMS:
            return None  # a value run-time counts keep adding to (a stage advanced by a tile's k)
        least, most = self.range(run, source)
        if least >= 0 or most < 0:
            return None
        return Condition("lt", False, source, f"lt({source}, 0)")


# What the hardware fixes of its special registers' values.
_SPECIAL_LOWS = {
    name: 0
    for name in (
        *(f"%{r}.{a}" for r in ("tid", "ctaid", "cluster_ctaid", "clusterid") for a in "xyz"),
        "%laneid",
        "%warpid",
        "%cluster_ctarank",
    )
} | {f"%{r}.{a}": 1 for r in ("ntid", "nctaid", "cluster_nctaid", "nclusterid") for a in "xyz"}
_SPECIAL_HIGHS = {"%laneid": 31, "%tid.x": 1023, "%tid.y": 1023, "%tid.z": 63, "%cluster_ctarank": 15}

# The leaves a barrier's address may hold for a run to name it: symbols (the shared memory's
# base), the thread's and the cluster's special registers; not values it computed or read.
_FIXED = re.compile(r"^(?:[A-Za-z_$][\w$]*|%(?:tid|ctaid|cluster_\w+|clusterid)[\w.]*)$")
_FRESH = re.compile(r"[\w.@%]+#\d+")  # a value read at run time, named by when


def _leaves(value: object) -> set[str]:
    """The leaves a register's value (a form, a condition, a predicate's tuple) is made of."""
    if isinstance(value, Form):
        return {name for name, _ in value.terms}
    if isinstance(value, Condition):
        return {name for name, _ in value.difference.terms}
    if isinstance(value, tuple):
        return set().union(*(_leaves(part) for part in value))
    return set()


_NEGATION = {
    "eq": "ne",
    "ne": "eq",
    "lt": "ge",
    "ge": "lt",
    "le": "gt",
    "gt": "le",
    "lo": "hs",
    "hs": "lo",
    "ls": "hi",
    "hi": "ls",
}
_MIRROR = {
    "eq": "eq",
    "ne": "ne",
    "lt": "gt",
    "gt": "lt",
    "le": "ge",
    "ge": "le",
    "lo": "hi",
    "hi": "lo",
    "ls": "hs",
    "hs": "ls",
}


def follow(kernel: Kernel) -> Phases:
    """Every run of `kernel`'s elected lanes from its entry (see the module's docstring)."""
    return Interpreter(kernel).follow()
