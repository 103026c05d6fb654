"""Put one run's document into its study's file as a part: a study measured from several angles
(copy.json's sizes, options, rows views and route) keeps each run whole, with its own context,
under `parts`, and a new run of one angle replaces only its part.

    python scripts/results_part.py STUDY KEY DOCUMENT [--out DIR]

Writes benchmarks/results/STUDY.json with part KEY replaced by DOCUMENT (a JSON file in the one
schema of benchmarks/results). With `--out DIR` it writes DIR/STUDY.json instead, starting from
that file when an earlier step of the same GPU call wrote it, else from the committed one: the
file that then replaces its namesake under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def put_part(study: str, key: str, document: dict, out: Path = RESULTS) -> Path:
    """Write out/STUDY.json with `document` as its part `key`, the other parts kept."""
    target = out / f"{study}.json"
    base = target if target.exists() else RESULTS / f"{study}.json"
    merged = json.loads(base.read_text()) if base.exists() else {"study": study, "what": "", "parts": {}}
    merged["parts"][key] = document
    out.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(merged, indent=1, ensure_ascii=False) + "\n")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study", help="the study's file name without .json (copy, many, ncu, ...)")
    parser.add_argument("key", help="the part the document replaces (copy.json: h200, options, rows, route)")
    parser.add_argument("document", type=Path, help="one run's JSON in the schema of benchmarks/results")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where STUDY.json is written")
    args = parser.parse_args()
    print(put_part(args.study, args.key, json.loads(args.document.read_text()), args.out))


if __name__ == "__main__":
    main()
