"""`tmakit lint`: tmakit's own kernels compiled for sm_90a (no GPU) and their TMA data movement
checked from the PTX and the DSL's MLIR (`tmakit.lint`): each finding with its PTX line and
instruction, barrier, phase, expected and actual; each check's proven and unchecked share."""

from __future__ import annotations

import argparse

from ..linter import LintReport
from ..linter.kernels import DEFAULT, lint_variant, variants
from .args import CommandError, add_json, emit

ALL = "all"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kernel",
        choices=[*variants(), ALL],
        default=DEFAULT,
        metavar="NAME",
        help=f"the kernel variant to compile and check (default {DEFAULT}: the seed's tile load), or "
        f"{ALL}: every one; the variants: {', '.join(variants())}",
    )
    add_json(parser, "each kernel's findings, unchecked sites and counts")


def run(args: argparse.Namespace) -> int:
    names = list(variants()) if args.kernel == ALL else [args.kernel]
    try:
        reports = {name: lint_variant(name) for name in names}
    except ImportError as error:
        raise CommandError(
            f"lint compiles the kernels with nvidia-cutlass-dsl, which is missing: {error}"
        ) from None
    data = {
        name: {"summary": variants()[name].summary, **report.to_dict()} for name, report in reports.items()
    }
    text = _one(names[0], reports[names[0]]) if len(names) == 1 else _table(reports)
    emit(args, {"kernels": data}, text)
    return 1 if any(not report.ok for report in reports.values()) else 0


def _one(name: str, report: LintReport) -> str:
    return "\n".join([f"{name}: {variants()[name].summary}", "", report.text()])


def _table(reports: dict[str, LintReport]) -> str:
    """A line a kernel (its findings, expect_tx sites proven, every site proven), then every
    finding under its kernel's name."""
    width = max(len(name) for name in reports)
    lines = [f"{'kernel':{width}}  findings  expect_tx proven  all sites proven"]
    for name, report in reports.items():
        expect = report.tallies["expect-tx"]
        lines.append(
            f"{name:{width}}  {len(report.findings):>8}  {expect.proven:>6} of {expect.sites:<6}  "
            f"{report.proven_share():>16.0%}"
        )
    for name, report in reports.items():
        if report.findings:
            lines += ["", f"{name}:", *(f"  {finding}" for finding in report.findings)]
    return "\n".join(lines)
