"""Peer kernels the studies time beside tmakit's: other projects' code that `scripts/fetch_peers.py`
unpacks into the git-ignored `.peers/` (or the folder $TMAKIT_PEERS names), never committed, and a
study imports from there. Where they are looked for (`peer_folders`), the import with that folder
on sys.path for the import alone (`load_peer`), and what a study records of each (`Peer`)."""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

PEERS = ".peers"
PEERS_VARIABLE = "TMAKIT_PEERS"  # a folder holding the peers elsewhere than ./.peers


@dataclass(frozen=True)
class Peer:
    """A peer's kernels as the study found them: the module (None: not loaded), its version, and
    where it was loaded from or why not."""

    module: ModuleType | None
    version: str | None
    note: str


def peer_folders() -> list[Path]:
    """Where `.peers` may be: the folder $TMAKIT_PEERS names, else ./.peers and the source tree's."""
    named = os.environ.get(PEERS_VARIABLE)
    if named:
        return [Path(named)]
    found = [Path.cwd() / PEERS, Path(__file__).resolve().parents[3] / PEERS]
    return list({folder.resolve(): folder for folder in found}.values())  # once where they are one


def load_peer(
    folders: list[Path],
    package: str,
    module_name: str,
    what: str,
    fetch: str,
    stand_ins: dict[str, ModuleType] | None = None,
    label: str | None = None,
) -> Peer:
    """`module_name` from the first of `folders` holding `package`/VERSION (the fetch writes it),
    imported with that folder on sys.path for the import alone, `stand_ins` in sys.modules for it
    alone (modules the peer imports that its project's own would bring: what was there before is
    put back); a note saying why not where it is absent or does not import (`fetch`: how to fetch
    it). The note names it "`label` (default `package`) VERSION's `what`"."""
    folder = next((f for f in folders if (f / package / "VERSION").is_file()), None)
    if folder is None:
        return Peer(None, None, f"skipped: no {package} in {' or '.join(map(str, folders))}; {fetch}")
    version = (folder / package / "VERSION").read_text().strip()
    before = {name: sys.modules.get(name) for name in stand_ins or {}}
    sys.modules.update(stand_ins or {})
    sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # a missing dependency, one it cannot run with: the rows skipped, said why
        return Peer(None, version, f"skipped: importing {module_name} from {folder} failed: {error!r}")
    finally:
        sys.path.remove(str(folder))
        for name, held in before.items():
            if held is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = held
    where = Path(module.__file__).resolve()
    if folder.resolve() not in where.parents:
        return Peer(None, version, f"skipped: {module_name} came from {where}, not from {folder}")
    return Peer(module, version, f"{label or package} {version}'s {what} from {folder}")
