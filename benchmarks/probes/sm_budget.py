"""tmakit's movement on a budget of SMs (`sms=`): the rate against the SM count beside torch's op
confined to as many SMs by a green context (and the copy engine for same-layout bytes), the
copies' ring depth on each budget, then the budgeted op beside a bf16 GEMM given the other SMs
(cuBLASLt's SM carveout, the GEMM on cuBLASLt for it; where torch has none, or the GEMM did not
take it, `carveout` / `carve_took` say so). Writes sm-budget.json.

    python benchmarks/probes/sm_budget.py --json sm-budget.json [--sizes-mib 512] [--reps 7]

Device time: `bench.timing`'s CUDA-graph replays (an eager loop on a stream for torch's op in a green
context), and the eager call, host included; medians of `--reps` (tensors of hundreds of MiB: the
L2 holds none of them). The curve's rate is bytes read plus written a second.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics

import torch

import tmakit
from tmakit.bench.report import device_context
from tmakit.bench.timing import eager_samples_us, graph_samples_us, stream_samples_us

# The SM counts, and 64 and 128, where a green context takes torch's op exactly.
SM_STEPS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 66, 96, 128, 132)
# Hopper splits SMs into green contexts in groups of this many (`cuDevSmResourceSplitByCount`
# rounds up): torch's confined op is timed only at budgets it can take exactly.
GREEN_SMS_STEP = 8


def elapsed_ms(fn, reps: int, graph: bool = True) -> float:
    """Median device ms of one `fn()` (`bench.timing`): `reps` replays of a CUDA graph of it, or
    with `graph=False` of an eager loop on a stream (torch's op in a green context, which no
    capture takes)."""
    timer = graph_samples_us if graph else stream_samples_us
    return statistics.median(timer([fn], samples=reps, min_launches=1)) / 1000


def eager_ms(fn, reps: int) -> float:
    """Median wall ms of one `fn()` as an eager caller gets it, host included (`bench.timing`)."""
    return statistics.median(eager_samples_us({"call": [fn]}, repeats=reps, min_calls=1)["call"]) / 1000


class Green:
    """A green context of `sms` SMs: `run(fn)` runs torch's work of `fn` on its stream (`stream`).
    Raises RuntimeError where torch or the driver has none."""

    def __init__(self, sms: int) -> None:
        from torch.cuda.green_contexts import GreenContext

        self.context = GreenContext.create(num_sms=sms, device_id=0)
        self.context.set_context()
        self.stream = torch.cuda.current_stream()
        self.context.pop_context()

    def run(self, fn) -> None:
        self.context.set_context()
        try:
            fn()
        finally:
            self.context.pop_context()


def cases(mib: int) -> dict:
    """name -> (bytes moved, tmakit's call of sms, torch's call): a same-layout copy, a
    transposing copy, a gather of 512-byte rows and 1,000 tensors copied at once, each about `mib`
    MiB read."""
    side = int((mib * 2**20 // 2) ** 0.5) // 128 * 128
    x = torch.randn(side, side, device="cuda").to(torch.float16)
    out = torch.empty_like(x)
    table = torch.randn(mib * 2**20 // 512, 256, device="cuda").to(torch.float16)
    index = torch.randint(0, table.shape[0], (table.shape[0],), device="cuda")
    gathered = torch.empty_like(table)
    moved, rows = 2 * x.numel() * 2, 2 * table.numel() * 2
    sizes = [(mib * 2**20 // 1000 // 4 + 64 * (i % 7)) // 4 * 4 for i in range(1000)]
    srcs = [torch.randn(n, device="cuda") for n in sizes]
    dsts = [torch.empty_like(t) for t in srcs]
    listed = 2 * sum(sizes) * 4
    return {
        "copy": (moved, lambda k: tmakit.copy_(out, x, sms=k, strict=True), lambda: out.copy_(x)),
        "transpose": (
            moved,
            lambda k: tmakit.copy_(out, x.t(), sms=k, strict=True),
            lambda: out.copy_(x.t()),
        ),
        "gather512": (
            rows,
            lambda k: tmakit.gather_rows(table, index, gathered, sms=k, check_index=False, strict=True),
            lambda: torch.index_select(table, 0, index, out=gathered),
        ),
        "many1000": (
            listed,
            lambda k: tmakit.copy_many_(dsts, srcs, sms=k, strict=True),
            lambda: torch._foreach_copy_(dsts, srcs),
        ),
    }


def curve(mib: int, reps: int, steps: list[int]) -> dict:
    """Each case's GB/s by SM count: tmakit's, torch's in a green context, and the engine's."""
    result = {}
    full = torch.cuda.get_device_properties(0).multi_processor_count
    for name, (moved, ours, theirs) in cases(mib).items():
        rows = []
        for k in steps:
            call = lambda k=k, ours=ours: ours(k)  # noqa: E731
            row = {"sms": k, "tmakit_gbs": moved / elapsed_ms(call, reps) / 1e6}
            row["tmakit_eager_gbs"] = moved / eager_ms(call, reps) / 1e6
            if k % GREEN_SMS_STEP or k >= full:  # a green context would round k up, or take all
                row["torch_green"] = (
                    f"green contexts take SMs in multiples of {GREEN_SMS_STEP}, fewer than all"
                )
            else:
                try:
                    confined = Green(k)
                    run = lambda confined=confined, theirs=theirs: confined.run(theirs)  # noqa: E731
                    row["torch_green_gbs"] = moved / elapsed_ms(run, reps, graph=False) / 1e6
                except Exception as error:  # no green contexts here: say why
                    row["torch_green"] = f"{type(error).__name__}: {error}"[:200]
            rows.append(row)
            print(name, row, flush=True)
        entry = {
            "bytes": moved,
            "by_sms": rows,
            "tmakit_full_gbs": moved / elapsed_ms(lambda ours=ours: ours(None), reps) / 1e6,
        }
        # torch's same-layout copy_ is the driver's memcpy: the copy engine, no SM (so too in a
        # green context), what a budgeted non-strict tmakit.copy_ takes.
        entry["torch_full_gbs"] = moved / elapsed_ms(theirs, reps) / 1e6
        entry["torch_full_eager_gbs"] = moved / eager_ms(theirs, reps) / 1e6
        for row in rows:
            row["of_full"] = row["tmakit_gbs"] / entry["tmakit_full_gbs"]
        result[name] = entry
    return result


def depths(mib: int, reps: int, budgets: list[int]) -> list[dict]:
    """The ring's depth on a budget (what `plan.budget.BUDGET_BYTES_IN_FLIGHT` sets): the
    same-layout copy (8 KiB tiles) and the transposing copy (32 KiB tiles) at each budget, GB/s
    by stages, the default's among them."""
    side = int((mib * 2**20 // 2) ** 0.5) // 128 * 128
    x = torch.randn(side, side, device="cuda").to(torch.float16)
    out = torch.empty_like(x)
    moved = 2 * x.numel() * 2
    cases = {"copy": (x, (2, 4, 8, 12, 16, 24)), "transpose": (x.t(), (2, 3, 4, 5, 6))}
    rows = []
    for budget in budgets:
        for name, (source, stages_list) in cases.items():
            for stages in (None, *stages_list):
                try:
                    options = {"stages": stages, "sms": budget, "strict": True}
                    run = lambda source=source, options=options: tmakit.copy_(out, source, **options)  # noqa: E731
                    gbs = moved / elapsed_ms(run, reps) / 1e6
                except Exception as error:  # a ring that does not fit: say so
                    label = stages or "default"
                    rows.append({"case": name, "sms": budget, "stages": label, "error": str(error)[:200]})
                    continue
                rows.append({"case": name, "sms": budget, "stages": stages or "default", "gbs": gbs})
                print("depth", rows[-1], flush=True)
    return rows


def carveout(sms: int | None) -> bool:
    """cuBLAS leaves `sms` SMs free (None: none); False where torch has no carveout."""
    setter = getattr(torch._C, "_set_sm_carveout_experimental", None)
    if setter is None:
        return False
    setter(sms)
    return True


@contextlib.contextmanager
def carved(sms: int | None):
    """cuBLASLt (the carveout reaches its path alone) with `sms` SMs left free inside the block
    (None: none), both restored after; yields whether torch has the carveout."""
    library = torch.backends.cuda.preferred_blas_library()
    torch.backends.cuda.preferred_blas_library("cublaslt")
    try:
        yield carveout(sms)
    finally:
        carveout(None)
        torch.backends.cuda.preferred_blas_library(library)


def beside_gemm(gib: float, budget: int, reps: int) -> dict:
    """A bf16 8192^3 GEMM with `budget` SMs carved out on one stream and a budgeted transposing
    copy of `gib` GiB on another: each alone, together, and one after the other."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(8192, 8192, device="cuda", dtype=torch.bfloat16)
    side = int((gib * 2**30 / 2) ** 0.5) // 128 * 128
    x = torch.randn(side, side, device="cuda").to(torch.float16)
    out = torch.empty_like(x)
    gemm = lambda: torch.mm(a, b, out=c)  # noqa: E731
    op = lambda: tmakit.copy_(out, x.t(), sms=budget, strict=True)  # noqa: E731
    full_op = lambda: tmakit.copy_(out, x.t(), strict=True)  # noqa: E731
    torch_op = lambda: out.copy_(x.t())  # noqa: E731
    record = {"gib": gib, "budget": budget}
    with carved(None):  # the same library, every SM
        record["gemm_full_ms"] = elapsed_ms(gemm, reps)
    record["op_alone_ms"] = elapsed_ms(op, reps)
    record["op_full_ms"] = elapsed_ms(full_op, reps)
    record["torch_op_full_ms"] = elapsed_ms(torch_op, reps)
    with carved(budget) as has_carveout:
        record["carveout"] = has_carveout
        record["gemm_carved_ms"] = elapsed_ms(gemm, reps)
        for name, moving in (("tmakit", op), ("torch_full", torch_op)):
            record[f"pair_{name}"] = together(gemm, moving, reps)
        try:  # torch's op confined to as many SMs by a green context, beside the same GEMM
            confined = Green(budget)
            pair = together(gemm, lambda: confined.run(torch_op), reps, confined.stream)
        except Exception as error:
            pair = f"{type(error).__name__}: {error}"[:200]
        record["pair_torch_green"] = pair
    # A carveout the GEMM did not take (cuBLAS's path, or none): its carved time is its full one.
    record["carve_took"] = record["gemm_carved_ms"] > 1.01 * record["gemm_full_ms"]
    record["serial_full_ms"] = record["gemm_full_ms"] + record["op_full_ms"]
    record["speedup_vs_serial"] = record["serial_full_ms"] / record["pair_tmakit"]["wall_ms"]
    beside = record["pair_tmakit"]["gemm_beside_ms"]
    record["gemm_kept"] = record["gemm_carved_ms"] / beside  # of its speed at the carveout
    record["gemm_kept_of_full"] = record["gemm_full_ms"] / beside  # of its speed on every SM
    return record


def together(gemm, op, reps: int, op_stream=None) -> dict:
    """The GEMM on one stream and the op on another (`op_stream`, e.g. a green context's),
    started together: the wall time of both and each one's own time beside the other (medians)."""
    first, second = torch.cuda.Stream(), op_stream or torch.cuda.Stream()
    walls, gemms, ops = [], [], []
    for _ in range(reps + 1):
        torch.cuda.synchronize()
        events = [torch.cuda.Event(enable_timing=True) for _ in range(5)]
        events[0].record()
        first.wait_event(events[0])
        second.wait_event(events[0])
        with torch.cuda.stream(first):
            gemm()
            events[1].record(first)
        with torch.cuda.stream(second):
            events[2].record(second)
            op()
            events[3].record(second)
        torch.cuda.current_stream().wait_stream(first)
        torch.cuda.current_stream().wait_stream(second)
        events[4].record()
        events[4].synchronize()
        walls.append(events[0].elapsed_time(events[4]))
        gemms.append(events[0].elapsed_time(events[1]))
        ops.append(events[2].elapsed_time(events[3]))
    return {
        "wall_ms": statistics.median(walls[1:]),
        "gemm_beside_ms": statistics.median(gemms[1:]),
        "op_beside_ms": statistics.median(ops[1:]),
    }


def summary_of(curve_cases: dict, gemm_rows: list[dict]) -> dict:
    """The issue's ratios: each case's share of its own full-grid rate at 16 and 32 SMs, tmakit's
    rate over torch's in a green context of as many SMs, and beside the GEMM the share of its
    speed it keeps and the pair's speed-up over running one after the other."""
    summary: dict = {"of_full": {}, "over_torch_green": {}}
    for name, case in curve_cases.items():
        for row in case["by_sms"]:
            if row["sms"] in (16, 32):
                summary["of_full"][f"{name}@{row['sms']}"] = row["of_full"]
                if "torch_green_gbs" in row:
                    summary["over_torch_green"][f"{name}@{row['sms']}"] = (
                        row["tmakit_gbs"] / row["torch_green_gbs"]
                    )
    summary["beside_gemm"] = {
        f"{row['gib']}GiB@{row['budget']}": {
            "gemm_kept": row["gemm_kept"],
            "speedup_vs_serial": row["speedup_vs_serial"],
        }
        for row in gemm_rows
    }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="sm-budget.json")
    parser.add_argument("--sizes-mib", type=int, default=512)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--budgets", default="16,32")
    parser.add_argument("--skip-curve", action="store_true")
    args = parser.parse_args()
    full = torch.cuda.get_device_properties(0).multi_processor_count
    steps = sorted({k for k in SM_STEPS if k <= full} | {full})
    context = {
        **device_context(os.environ.get("TMAKIT_COMMIT")),
        "step": "smbudget",
        "mib": args.sizes_mib,
        "reps": args.reps,
        "budgets": args.budgets,
        "skip_curve": args.skip_curve,
    }
    curve_cases = {} if args.skip_curve else curve(args.sizes_mib, args.reps, steps)
    budgets = [int(budget) for budget in args.budgets.split(",")]
    depth_rows = [] if args.skip_curve else depths(args.sizes_mib, args.reps, budgets)
    gemm_rows = [beside_gemm(gib, budget, args.reps) for budget in budgets for gib in (1, 3)]
    rows = [
        {"part": "curve", "case": name, **row} for name, case in curve_cases.items() for row in case["by_sms"]
    ]
    rows += [
        {"part": "full", "case": name, **{key: value for key, value in case.items() if key != "by_sms"}}
        for name, case in curve_cases.items()
    ]
    rows += [{"part": "depth", **row} for row in depth_rows]
    rows += [{"part": "gemm", **row} for row in gemm_rows]
    study = {
        "study": "sm-budget",
        "what": (
            "GB/s (bytes read + written) of each movement op on k SMs (sms=k, strict: TMA; CUDA-graph "
            "replays, and the eager call host included) beside torch's op in a green context of k SMs "
            "(an eager loop on a stream), medians of the reps, tensors "
            "far past the L2; the copies' ring depth on each budget (part depth); then a budgeted "
            "transposing copy beside a bf16 8192^3 GEMM with k SMs "
            "carved out (torch._C._set_sm_carveout_experimental), each alone, together on two streams "
            "and one after the other"
        ),
        "context": context,
        "rows": rows,
        "summary": {**summary_of(curve_cases, gemm_rows), "source": "benchmarks/probes/sm_budget.py"},
    }
    with open(args.json, "w") as file:
        json.dump(study, file, indent=1)
    print(json.dumps(study["summary"], indent=1))


if __name__ == "__main__":
    main()
