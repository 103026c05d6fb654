"""A grouped copy of a 100-tensor list (sizes from 2 bytes to 512 KiB, odd tails, five dtypes)
for compute-sanitizer to watch (`scripts/device_run.sh ... sanitize`): one call, every tensor
checked against its source; exit 1 on a mismatch or when the grouped kernel did not run.

    compute-sanitizer --tool racecheck python3 benchmarks/probes/sanitize_many.py [--count N]
"""

from __future__ import annotations

import argparse
import random
import sys

import torch

import tmakit

DTYPES = (torch.float32, torch.bfloat16, torch.int8, torch.int64, torch.float16)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=100, help="tensors in the list")
    args = parser.parse_args()
    rng = random.Random(args.count)
    srcs, dsts = [], []
    for i in range(args.count):
        dtype = DTYPES[i % len(DTYPES)]
        length = max(1, int(2 ** rng.uniform(1, 19)) // torch.empty(0, dtype=dtype).element_size())
        srcs.append((torch.arange(length, device="cuda") * 7 + i).to(dtype))
        dsts.append(torch.zeros_like(srcs[-1]))
    prepared = tmakit.GroupedCopy(dsts, srcs)
    prepared()
    torch.cuda.synchronize()
    wrong = [i for i, (d, s) in enumerate(zip(dsts, srcs, strict=True)) if not torch.equal(d, s)]
    grouped = bool(prepared._route.launches)
    print(f"{args.count} tensors, grouped kernel ran: {grouped}, wrong tensors: {wrong[:10] or 'none'}")
    return 0 if grouped and not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
