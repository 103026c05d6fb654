"""A pytest plugin that records the PTX of every kernel the test suite compiles, for refactors.

A change that should not touch the kernels (moving code between modules, renaming classes) must
leave their PTX identical once what embeds those names is normalised: the kernel and parameter
symbols (`kernel_cutlass_<module><class>..._param_N`), register numbers and comments. Record the
suite before and after, then compare:

    TMAKIT_CACHE_DIR=off PTX_SNAPSHOT=before.json python -m pytest -q -p ptx_snapshot  # PYTHONPATH=scripts
    TMAKIT_CACHE_DIR=off PTX_SNAPSHOT=after.json  python -m pytest -q -p ptx_snapshot
    python scripts/ptx_snapshot.py before.json after.json

The snapshot maps each normalised PTX's hash to the first test that compiled it and to the hash of
its body alone (parameter declarations dropped, parameter indices normalised); the comparison
counts the variants, names the tests behind any that appear on one side only, and says which of
those differ in their parameter list alone (a kernel that stopped taking a parameter twice).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

_SYMBOL = re.compile(r"\bkernel_cutlass_\w*?(_param_\d+)?\b")
_REGISTER = re.compile(r"%([a-z]+)\d+")
_COMMENT = re.compile(r"//.*$", re.MULTILINE)
_PARAMETER = re.compile(r"_param_\d+")


def normalise(ptx: str) -> str:
    """PTX with kernel/parameter symbols, register numbers and comments made name-independent."""
    text = _COMMENT.sub("", ptx)
    text = _SYMBOL.sub(lambda m: "KERNEL" + (m.group(1) or ""), text)
    text = _REGISTER.sub(r"%\1", text)
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip())


def body(normalised: str) -> str:
    """The kernel without its parameter list: declarations dropped, references renumbered."""
    lines = [line for line in normalised.splitlines() if not line.lstrip().startswith(".param")]
    return _PARAMETER.sub("_param_N", "\n".join(lines))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class _Recorder:
    def __init__(self, path: str) -> None:
        self.path = path
        self.variants: dict[str, dict[str, str]] = {}
        self.current = "<collection>"

    def pytest_runtest_setup(self, item) -> None:
        self.current = item.nodeid

    def record(self, ptx: str) -> None:
        if ".entry" not in ptx:  # a host-only trace (explain) compiles no kernel
            return
        text = normalise(ptx)
        self.variants.setdefault(_digest(text), {"test": self.current, "body": _digest(body(text))})

    def pytest_sessionfinish(self) -> None:
        Path(self.path).write_text(json.dumps(self.variants, indent=1, sort_keys=True) + "\n")


def pytest_configure(config) -> None:
    path = os.environ.get("PTX_SNAPSHOT")
    if not path:
        return
    import cutlass.cute as cute

    recorder = _Recorder(path)
    config.pluginmanager.register(recorder, "ptx-snapshot-recorder")
    original = cute.compile

    class Recording:
        """`cute.compile` that also keeps the PTX (asked for when the caller did not)."""

        def __getitem__(self, options):
            return original[options]

        def __call__(self, *args, options: str = "", **kwargs):
            if "--keep-ptx" in options:
                compiled = original(*args, options=options, **kwargs)
                recorder.record(_ptx_text(compiled))
                return compiled
            with tempfile.TemporaryDirectory(prefix="ptx-snapshot-") as dump_dir:
                compiled = original(
                    *args, options=f"{options} --keep-ptx --dump-dir {dump_dir}".strip(), **kwargs
                )
                recorder.record(_ptx_text(compiled))
            return compiled

    cute.compile = Recording()


def _ptx_text(compiled) -> str:
    ptx = compiled.artifacts.PTX
    if ptx and os.path.exists(ptx):
        with open(ptx) as f:
            return f.read()
    return ptx or ""


def compare(before_path: str, after_path: str) -> int:
    before = json.loads(Path(before_path).read_text())
    after = json.loads(Path(after_path).read_text())
    same = before.keys() & after.keys()
    bodies_after = {entry["body"] for entry in after.values()}
    bodies_before = {entry["body"] for entry in before.values()}
    print(f"{len(before)} kernel variants before, {len(after)} after, {len(same)} identical")
    changed = 0
    for name, only, where, other_bodies in (
        ("before", before.keys() - after.keys(), before, bodies_after),
        ("after", after.keys() - before.keys(), after, bodies_before),
    ):
        for digest in sorted(only):
            entry = where[digest]
            parameters_only = entry["body"] in other_bodies
            changed += not parameters_only
            verdict = "parameter list only: body identical" if parameters_only else "BODY DIFFERS"
            print(f"  only {name}: {digest} ({verdict}; first compiled by {entry['test']})")
    return 0 if changed == 0 else 1


if __name__ == "__main__":
    sys.exit(compare(sys.argv[1], sys.argv[2]))
