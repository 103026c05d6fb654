"""Which im2col plans compile for sm_90a: every plan of a grid of small shapes, filters, strides,
paddings, dilations and tiles built and compiled in a worker process, so that one the DSL
aborts on (LLVM ERROR, SIGABRT) is a recorded result, not a dead run.

    PYTHONPATH=src python scripts/im2col_compile_grid.py [--out results.jsonl] [--quick]

Each line of the output is one plan: its fields and `outcome`, one of "compiled", "refused"
(TmaConfigError: the plan's own checks), "raised" (another exception while compiling) or
"aborted" (the worker died: exit code and the tail of its stderr). A summary by outcome and
by the static extents that matter (patch rows M, taps, channel tiles, box pixels, boxes) closes.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import subprocess
import sys
import tempfile


def cases(quick: bool) -> list[dict]:
    """The grid: plan fields as JSON-able dicts (tile None: the plan's default)."""
    sizes = (1, 2, 3) if quick else (1, 2, 3, 4, 5)
    kernels = (1, 2, (1, 2)) if quick else (1, 2, 3, (1, 2), (2, 1), (1, 3))
    out = []
    for batch, height, width, channels, kernel, stride, padding, dilation in itertools.product(
        (1, 2), sizes, sizes, (8, 16), kernels, (1, 2), (0, 1), (1,) if quick else (1, 2)
    ):
        if dilation == 2 and kernel == 1:
            continue
        for tile in (None, (2, 8)) if quick else (None, (1, 8), (2, 8)):
            out.append(
                dict(
                    shape=[batch, height, width, channels],
                    dtype="fp16",
                    filter=kernel,
                    stride=stride,
                    padding=padding,
                    dilation=dilation,
                    tile=tile,
                )
            )
    return out


WORKER = r"""
import json, sys, traceback
from tmakit.errors import TmaConfigError
from tmakit.plan import Im2colPlan
from tmakit.runtime.launch import compile_im2col

def plan_of(case):
    f = dict(case)
    f["shape"] = tuple(f["shape"])
    for k in ("filter", "stride", "padding", "dilation", "tile"):
        if isinstance(f[k], list):
            f[k] = tuple(f[k])
    return Im2colPlan(**f)

for line in sys.stdin:
    case = json.loads(line)
    try:
        plan = plan_of(case)
    except TmaConfigError as error:
        print(json.dumps({"outcome": "refused", "why": str(error)}), flush=True)
        continue
    facts = {"tile": plan.tile, "patch": plan.patch_shape, "row_blocks": plan.row_blocks,
             "column_tiles": plan.column_tiles, "taps": plan.taps, "channel_tiles": plan.channel_tiles,
             "output": plan.output_shape}
    print(json.dumps({"started": True, **facts}), flush=True)
    try:
        compile_im2col(plan)
        print(json.dumps({"outcome": "compiled", **facts}), flush=True)
    except TmaConfigError as error:
        print(json.dumps({"outcome": "refused", "why": str(error), **facts}), flush=True)
    except Exception as error:
        text = str(error).strip().splitlines()
        why = type(error).__name__ + ": " + (text[-1] if text else "")
        print(json.dumps({"outcome": "raised", "why": why, **facts}), flush=True)
"""


def run(all_cases: list[dict]) -> list[dict]:
    """Each case's result; a worker that dies is restarted after the case it died on."""
    results: list[dict] = []
    while len(results) < len(all_cases):
        pending = all_cases[len(results) :]
        with tempfile.TemporaryFile("w+") as stderr:
            worker = subprocess.Popen(
                [sys.executable, "-c", WORKER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "CUTE_DSL_ARCH": "sm_90a"},
            )
            feed = "".join(json.dumps(case) + "\n" for case in pending)
            stdout, _ = worker.communicate(feed)
            stderr.seek(0)
            tail = stderr.read()[-600:]
        started = None
        for line in stdout.splitlines():
            row = json.loads(line)
            if row.get("started"):
                started = row
                continue
            results.append({**pending[len(results) - (len(all_cases) - len(pending))], **row})
            started = None
        if worker.returncode != 0:
            case = all_cases[len(results)]
            results.append(
                {**case, **(started or {}), "outcome": "aborted", "why": f"exit {worker.returncode}: {tail}"}
            )
            print(f"aborted: {case} {started}", file=sys.stderr, flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="im2col_grid.jsonl")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    results = run(cases(args.quick))
    with open(args.out, "w") as f:
        for row in results:
            f.write(json.dumps(row) + "\n")
    print(collections.Counter(row["outcome"] for row in results))
    for outcome in ("raised", "aborted"):
        keys = collections.Counter(
            (row["why"][-90:].replace("\n", " "), tuple(row["tile"]), tuple(row["patch"]))
            for row in results
            if row["outcome"] == outcome
        )
        for key, count in sorted(keys.items(), key=str)[:60]:
            print(outcome, count, key)


if __name__ == "__main__":
    main()
