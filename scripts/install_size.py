"""What installing tmakit adds to an environment, on disk: tmakit itself, and each distribution its
requirements pull in (the DSL and what the DSL needs, numpy, rich; the `fast` extra's
apache-tvm-ffi), read from this environment's installed files; torch beside them, which a user
brings. Writes benchmarks/results/install-size.json.

    python scripts/install_size.py [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata as metadata
import json
import os
import platform
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("fast",)  # the extras a GPU user installs beside a torch of their own


def _name(requirement: str) -> str:
    return re.split(r"[ ;<>=!~\[(]", requirement, maxsplit=1)[0].lower()


def _wanted(requirement: str, extras: tuple[str, ...]) -> bool:
    """Whether a requirement applies: no marker, or an `extra ==` marker of `extras` only."""
    if ";" not in requirement:
        return True
    marker = requirement.split(";", 1)[1]
    named = re.findall(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
    return bool(named) and any(extra in extras for extra in named)


def closure(root: str, extras: tuple[str, ...]) -> list[str]:
    """The installed distributions `root` requires (with `extras`), transitively, `root` too."""
    seen, queue = [], [(root, extras)]
    while queue:
        name, wanted = queue.pop()
        if name in seen:
            continue
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        seen.append(name)
        queue += [(_name(r), ()) for r in requires if _wanted(r, wanted) and _name(r) != "torch"]
    return seen


def installed_bytes(name: str) -> int:
    """The bytes of a distribution's installed files (an editable install: its source package)."""
    if name == "tmakit":
        return sum(path.stat().st_size for path in (ROOT / "src" / "tmakit").rglob("*") if path.is_file()
                   and "__pycache__" not in path.parts)  # fmt: skip
    distribution = metadata.distribution(name)
    total = 0
    for file in distribution.files or []:
        try:
            total += os.path.getsize(distribution.locate_file(file))
        except OSError:
            pass
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "install-size.json"))
    args = parser.parse_args()
    names = closure("tmakit", EXTRAS)
    sizes = {
        name: {"version": metadata.version(name), "mb": round(installed_bytes(name) / 1e6, 1)}
        for name in names
    }
    torch_mb = (
        round(installed_bytes("torch") / 1e6, 1)
        if "torch" in {d.metadata["Name"] for d in metadata.distributions()}
        else None
    )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    document = {
        "study": "install-size",
        "what": __doc__.split("\n\n")[0].replace("\n", " "),
        "context": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "date": datetime.date.today().isoformat(),
            "commit": commit,
            "extras": list(EXTRAS),
            "torch": metadata.version("torch") if torch_mb is not None else None,
        },
        "rows": [{"distribution": name, **row} for name, row in sizes.items()],
        "summary": {
            "total_mb": round(sum(row["mb"] for row in sizes.values()), 1),
            "dsl_mb": round(
                sum(row["mb"] for name, row in sizes.items() if "cutlass" in name or "cuda" in name), 1
            ),
            "torch_mb": torch_mb,
        },
    }
    Path(args.out).write_text(json.dumps(document, indent=1) + "\n")
    print(json.dumps(document["summary"]))


if __name__ == "__main__":
    main()
