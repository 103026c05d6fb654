"""Run every GPU test (the examples included) plus `tmakit demo` on a GPU machine and write a
summary JSON.

    python3 scripts/gpu_check.py --commit $(git rev-parse HEAD) [--out DIR] [--workers N]

The GPU machine's copy of the tree may have no .git, so the commit is passed in. It writes
`gpu-check.json` in the one schema of benchmarks/results (the card, driver, versions, date, commit
and each test's outcome) into DIR, else into $OUT (the folder the GPU machine's call brings back),
else into a new temporary folder; `--out benchmarks/results` replaces the committed file, as is
done whenever kernel code changes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

try:
    import pytest

    from tmakit.bench.report import device_context
    from tmakit.runtime.device import find_hopper_gpu
except ImportError as missing:  # the wrong interpreter: say which, and how to get the right one
    print(
        f"gpu_check: {sys.executable} cannot import {missing.name}: run `make test` once to create "
        ".venv/, or `source .cutedsl/activate.sh` on the GPU machine (docs/gpu.md)",
        file=sys.stderr,
    )
    sys.exit(2)


class _Outcomes:
    def __init__(self) -> None:
        self.tests: dict[str, str] = {}
        self.seconds: dict[str, float] = {}
        self.failures: dict[str, str] = {}

    def pytest_runtest_logreport(self, report):  # noqa: D401 - pytest hook
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        if report.when == "call" or report.outcome != "passed":
            self.tests[report.nodeid] = report.outcome
        if report.outcome == "failed":  # why, so the JSON alone explains a red run
            self.failures[report.nodeid] = report.longreprtext[-2000:]


def interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def output_folder(out: str | None, environ: Mapping[str, str] = os.environ) -> Path:
    """Where gpu-check.json goes: `out` (--out), else $OUT, else a new temporary folder. Never
    benchmarks/results unless named: its gpu-check.json is committed."""
    if out:
        return Path(out)
    if environ.get("OUT"):
        return Path(environ["OUT"])
    return Path(tempfile.mkdtemp(prefix="tmakit-gpu-check-"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commit", required=True, help="git commit the tree was taken from")
    parser.add_argument(
        "--out",
        help="folder for gpu-check.json (default $OUT, else a new temporary folder; benchmarks/results "
        "replaces the committed file)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="pytest-xdist processes sharing the GPU (most of a test is compiling)",
    )
    args = parser.parse_args(argv)
    gpu_name, why = find_hopper_gpu()
    if gpu_name is None:  # nothing to check: the GPU tests would all skip
        print(f"gpu_check: needs a Hopper GPU: {why} (Python: {sys.executable})", file=sys.stderr)
        return 2

    outcomes = _Outcomes()
    root = Path(__file__).resolve().parent.parent
    arguments = ["-q", "-m", "gpu", str(root / "tests")]
    try:
        import pytest_timeout  # noqa: F401  (on the GPU machine: a stuck test fails, the run goes on)

        arguments.append("--timeout=120")
    except ImportError:
        pass
    if args.workers > 1:
        try:
            import xdist  # noqa: F401  (pytest-xdist: the processes)

            arguments += ["-n", str(args.workers)]
        except ImportError:
            print("gpu_check: no pytest-xdist here: one process", file=sys.stderr)
    # A `timeout` around this script sends SIGTERM: pytest then stops as if interrupted, and the
    # tests run so far are still written (pytest's exit code 2 says the run was cut short).
    signal.signal(signal.SIGTERM, interrupt)
    exit_code = pytest.main(arguments, plugins=[outcomes])
    demo = subprocess.run([sys.executable, "-m", "tmakit", "demo"], capture_output=True, text=True, cwd=root)
    print(demo.stdout, demo.stderr)
    passed, failed, skipped = (sum(v == outcome for v in outcomes.tests.values())
                               for outcome in ("passed", "failed", "skipped"))  # fmt: skip
    study = {  # the one schema of benchmarks/results (benchmarks/README.md)
        "study": "gpu-check",
        "what": "Every GPU test (pytest -m gpu) and `tmakit demo` on the GPU (scripts/gpu_check.py); "
        "the demo's output in summary.",
        "context": {
            **device_context(args.commit),
            "python": platform.python_version(),
            "step": "check",
            "workers": args.workers,
        },
        "rows": [
            {"test": test, "outcome": outcome, "seconds": round(outcomes.seconds.get(test, 0.0), 2)}
            for test, outcome in outcomes.tests.items()
        ],
        "summary": {
            "passed": passed,
            "failed": failed,
            "skipped": skipped,
            "pytest_exit_code": int(exit_code),
            "demo_exit_code": demo.returncode,
            "failure_messages": outcomes.failures,
            "demo_output": demo.stdout.splitlines(),
        },
    }
    out = output_folder(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu-check.json"
    path.write_text(json.dumps(study, indent=2) + "\n")
    print(f"wrote {path}: {passed} passed, {failed} failed, {skipped} skipped; demo exit {demo.returncode}")
    ok = exit_code == 0 and demo.returncode == 0 and skipped == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
