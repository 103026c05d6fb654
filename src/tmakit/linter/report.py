"""What `tmakit.lint` found: each finding (the check, the PTX line and instruction, the barrier,
the phase, what was expected and what the kernel does), and each check's count of the sites it
proved, left unchecked (a value known only at run time) or found wrong. Pure Python."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# The checks, in the order a report lists them, each with what it proves of a site.
CHECKS: dict[str, str] = {
    "expect-tx": "each expect_tx's bytes equal the bytes of the TMA copies completing on its barrier "
    "in that phase, on every path (a multicast copy counted in each CTA it reaches)",
    "orphan-copy": "each TMA copy completes on a barrier an expect_tx declares bytes on, on its path",
    "init-fence": "each mbarrier.init is fenced (fence.mbarrier_init or fence.proxy.async) before the "
    "barrier's first use by a copy, arrive or wait",
    "store-groups": "each bulk store (or reduce) is committed to a group and waited for (wait_group 0) "
    "before the kernel exits",
    "multicast-mask": "each multicast copy's mask names CTAs of the cluster only",
    "reduce-type": "each reduce store's op and type match its tensor's dtype and signedness",
    "wait-parity": "each wait's parity flips from its thread's last wait on the barrier, and a first wait "
    "on a barrier copies complete waits for phase 0, on every path followed (loops to a bound)",
    "wait-order": "a thread that arrives on a barrier arrives before each of its waits there (its wait "
    "would wait for its own arrive)",
}


@dataclass(frozen=True)
class Finding:
    """One problem: the `check` that found it, the PTX `line` (1-based) and `instruction`, the
    `barrier` (its address as a form of the dynamic shared memory's base, stage registers and
    offset) and `phase` where they apply, `expected` and `actual` (what the check wanted and
    what the kernel does), and a `message` saying why it matters. `kernel` is the PTX entry."""

    check: str
    line: int
    instruction: str
    message: str
    kernel: str = ""
    barrier: str | None = None
    phase: str | None = None
    expected: str | None = None
    actual: str | None = None

    def __str__(self) -> str:
        where = [f"line {self.line}"]
        if self.barrier:
            where.append(f"barrier {self.barrier}")
        if self.phase:
            where.append(f"phase {self.phase}")
        text = f"{self.check}: {', '.join(where)}: {self.message}"
        if self.expected is not None or self.actual is not None:
            text += f" (expected {self.expected}, actual {self.actual})"
        return f"{text}\n    {self.instruction}"


@dataclass(frozen=True)
class Unchecked:
    """A site a check could not decide: the `check`, PTX `line`, `instruction` and `reason`."""

    check: str
    line: int
    instruction: str
    reason: str
    kernel: str = ""


@dataclass
class Tally:
    """One check's sites: `proven` right, `unchecked` (undecided) and `found` wrong."""

    proven: int = 0
    unchecked: int = 0
    found: int = 0

    @property
    def sites(self) -> int:
        return self.proven + self.unchecked + self.found

    @property
    def proven_share(self) -> float:
        """The share of the sites proven right (1.0 with no site)."""
        return self.proven / self.sites if self.sites else 1.0

    @property
    def unchecked_share(self) -> float:
        return self.unchecked / self.sites if self.sites else 0.0


@dataclass
class LintReport:
    """What `tmakit.lint` found in one compiled function: its `kernels` (PTX entries), every
    `findings`, the sites left `unchecked` and why, and each check's `tallies`."""

    kernels: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    unchecked: list[Unchecked] = field(default_factory=list)
    tallies: dict[str, Tally] = field(default_factory=lambda: {check: Tally() for check in CHECKS})

    @property
    def ok(self) -> bool:
        """No finding (unchecked sites are not findings)."""
        return not self.findings

    def proven_share(self, check: str | None = None) -> float:
        """The share of sites proven right, of one check or of all (1.0 with no site).

        Raises:
            KeyError: `check` is not one of `CHECKS`.
        """
        if check is not None:
            return self.tallies[check].proven_share
        total = Tally()
        for tally in self.tallies.values():
            total.proven += tally.proven
            total.unchecked += tally.unchecked
            total.found += tally.found
        return total.proven_share

    def text(self) -> str:
        """The findings, then each check's sites: proven, unchecked, found, the proven share."""
        lines = [str(finding) for finding in self.findings]
        if not self.findings:
            lines.append(f"no findings in {len(self.kernels)} kernel{'s' * (len(self.kernels) != 1)}")
        lines.append("")
        lines.append(f"{'check':16} {'sites':>5} {'proven':>6} {'unchecked':>9} {'found':>5}  proven share")
        for check, tally in self.tallies.items():
            share = f"{tally.proven_share:.0%}" if tally.sites else "-"
            counts = f"{tally.sites:>5} {tally.proven:>6} {tally.unchecked:>9} {tally.found:>5}"
            lines.append(f"{check:16} {counts}  {share}")
        if self.unchecked:
            lines.append("")
            lines.append("unchecked:")
            grouped: dict[tuple[str, str], list[int]] = {}
            for site in self.unchecked:
                grouped.setdefault((site.check, site.reason), []).append(site.line)
            for (check, reason), found in grouped.items():
                where = ", ".join(str(line) for line in found)
                lines.append(f"  {check}: line{'s' * (len(found) > 1)} {where}: {reason}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """The report as plain data (`--json`)."""
        return {
            "kernels": list(self.kernels),
            "ok": self.ok,
            "findings": [asdict(finding) for finding in self.findings],
            "unchecked": [asdict(site) for site in self.unchecked],
            "checks": {
                check: {
                    **asdict(tally),
                    "proven_share": tally.proven_share,
                    "unchecked_share": tally.unchecked_share,
                }
                for check, tally in self.tallies.items()
            },
        }
