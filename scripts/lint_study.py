"""The lint study: `tmakit.lint` over its corpus, written as `lint.json` (benchmarks/README.md's
schema). A row for each kernel linted (tmakit's variants, then the kernels of the `lint` extra
that build here) with each check's proven, unchecked and found sites, and a row for each
mutation of `tests/lint_mutations.py` with the lint's verdict: its check's finding at the
instruction it names, or none. compute-sanitizer's column is filled on a GPU only; on the CPU it
is null.

    PYTHONPATH=src python scripts/lint_study.py [--out benchmarks/results/lint.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

from lint_external import EXTERNAL, built, lint_external  # noqa: E402
from lint_mutations import MUTATIONS, edited  # noqa: E402
from tmakit.linter import lint_text  # noqa: E402
from tmakit.linter.kernels import captured, lint_variant, variants  # noqa: E402


def entry_row(kind: str, name: str, report) -> dict:
    return {
        "kind": kind,
        "kernel": name,
        "findings": [str(finding) for finding in report.findings],
        "checks": {
            check: vars(tally) | {"proven_share": tally.proven_share}
            for check, tally in report.tallies.items()
        },
    }


def mutation_row(mutation) -> dict:
    row = {
        "kind": "mutation",
        "mutation": mutation.name,
        "kernel": mutation.variant,
        "what": mutation.what,
        "check": mutation.check,
        "cites": [citation.url for citation in mutation.cites],
        "compute_sanitizer": None,
    }
    if mutation.variant in EXTERNAL:
        found = built(mutation.variant).captured
        if found is None:
            return row | {"verdict": "skipped", "why": built(mutation.variant).skipped}
        reduce_dtype = EXTERNAL[mutation.variant].reduce_dtype
    else:
        found, reduce_dtype = captured(mutation.variant), variants()[mutation.variant].reduce_dtype
    ptx = edited(found.ptx, mutation.ptx)
    elements = mutation.tensor_elements if mutation.tensor_elements is not None else found.tensor_elements
    report = lint_text(ptx, edited(found.mlir, mutation.mlir), elements, reduce_dtype)
    lines = ptx.splitlines()
    targets = {i + 1 for i, line in enumerate(lines) if re.search(mutation.target, line)}
    named = [f for f in report.findings if f.check == mutation.check and f.line in targets]
    if not named:
        return row | {"verdict": "missed", "findings": [str(f) for f in report.findings]}
    return row | {"verdict": "found", "line": named[0].line, "finding": str(named[0])}


def version(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "lint.json")
    args = parser.parse_args()
    rows = [entry_row("variant", name, lint_variant(name)) for name in variants()]
    skipped = {}
    for name in EXTERNAL:
        entry = built(name)
        if entry.captured is None:
            skipped[name] = entry.skipped
        else:
            rows.append(entry_row("external", name, lint_external(name)) | {"version": entry.version})
    mutations = [mutation_row(mutation) for mutation in MUTATIONS]
    totals: dict[str, dict[str, dict[str, int]]] = {}
    for row in rows:
        for check, tally in row["checks"].items():
            kind = totals.setdefault(row["kind"], {})
            total = kind.setdefault(check, {"proven": 0, "unchecked": 0, "found": 0})
            for key in total:
                total[key] += tally[key]
    verdicts = [row["verdict"] for row in mutations]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    document = {
        "study": "lint",
        "what": "tmakit.lint over its corpus, on the CPU (sm_90a compiles, no GPU): tmakit's kernel variants "
        "and the lint extra's kernels (findings, each check's sites), and each cited mutation's verdict",
        "context": {
            "device": None,
            "sm_count": None,
            "l2_bytes": None,
            "driver": None,
            "cuda_runtime": None,
            "torch": version("torch"),
            "nvidia_cutlass_dsl": version("nvidia-cutlass-dsl"),
            "python": platform.python_version(),
            "commit": commit.stdout.strip() or None,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "peak_bandwidth": None,
            "step": "scripts/lint_study.py",
        },
        "rows": rows + mutations,
        "summary": {
            "totals": totals,
            "external_skipped": skipped,
            "mutations": {verdict: verdicts.count(verdict) for verdict in sorted(set(verdicts))},
            "compute_sanitizer": "not run: no GPU came in the session that wrote this file",
        },
    }
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"{args.out}: {len(rows)} kernels, mutations {document['summary']['mutations']}, skipped {skipped}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
