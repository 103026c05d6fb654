"""Run every GPU test plus `tmakit demo` on a GPU machine and write a summary JSON.

    python3 scripts/gpu_check.py --commit $(git rev-parse HEAD) --out DIR

The GPU machine's copy of the tree may have no .git, so the commit is passed in. The JSON names
the card, driver, versions, date, commit and each test's outcome; commit it under
benchmarks/results/ whenever kernel code changes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from tmakit.bench.report import device_context


class _Outcomes:
    def __init__(self) -> None:
        self.tests: dict[str, str] = {}
        self.failures: dict[str, str] = {}

    def pytest_runtest_logreport(self, report):  # noqa: D401 - pytest hook
        if report.when == "call" or report.outcome != "passed":
            self.tests[report.nodeid] = report.outcome
        if report.outcome == "failed":  # why, so the JSON alone explains a red run
            self.failures[report.nodeid] = report.longreprtext[-2000:]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commit", required=True, help="git commit the tree was taken from")
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for the JSON")
    args = parser.parse_args()

    outcomes = _Outcomes()
    root = Path(__file__).resolve().parent.parent
    arguments = ["-q", "-m", "gpu", str(root / "tests")]
    try:
        import pytest_timeout  # noqa: F401  (on the GPU machine: a stuck test fails, the run goes on)

        arguments.append("--timeout=120")
    except ImportError:
        pass
    exit_code = pytest.main(arguments, plugins=[outcomes])
    demo = subprocess.run([sys.executable, "-m", "tmakit", "demo"], capture_output=True, text=True, cwd=root)
    print(demo.stdout, demo.stderr)
    summary = {
        "what": "GPU tests + tmakit demo",
        **device_context(args.commit),
        "python": platform.python_version(),
        "tests": outcomes.tests,
        "failure_messages": outcomes.failures,
        "passed": sum(v == "passed" for v in outcomes.tests.values()),
        "failed": sum(v == "failed" for v in outcomes.tests.values()),
        "skipped": sum(v == "skipped" for v in outcomes.tests.values()),
        "pytest_exit_code": int(exit_code),
        "demo_exit_code": demo.returncode,
        "demo_output": demo.stdout.splitlines(),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"gpu-check-{args.commit[:10]}.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {path}")
    ok = exit_code == 0 and demo.returncode == 0 and summary["skipped"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
