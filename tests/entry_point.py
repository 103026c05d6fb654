"""The `tmakit` command as a user meets it: `python -m tmakit ...` in a fresh process, from the
project's root, with its exit code, stdout and stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tmakit(*args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Run `python -m tmakit *args` (the package from this checkout's src/)."""
    environment = {**os.environ, **(env or {})}
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT / "src"), environment.get("PYTHONPATH")])
    )
    kwargs.setdefault("stdout", subprocess.PIPE)
    return subprocess.run(
        [sys.executable, "-m", "tmakit", *args],
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=600,
        **kwargs,
    )


def one_error_line(run: subprocess.CompletedProcess) -> str:
    """The error a failed command printed: exactly one line on stderr, `tmakit: ...`, no traceback."""
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tmakit: "), run.stderr
    return lines[0]
