"""Time two tmakit source trees side by side in one process: the same public calls (copy,
transposing copy, reduce, im2col, the multicast ring), each tree's kernels captured into CUDA
graphs and replayed in interleaved rounds (`bench.timing.interleaved_graph_samples_us`), so that
a drift of the GPU's clocks falls on both alike. For a refactor that should not change speed.

    python scripts/ab_bench.py BASE_SRC [--samples N] [--json PATH]

`BASE_SRC` is the `src/` folder of the other tree (e.g. `git archive <commit> src | tar x -C
DIR`); its `tmakit` package is imported as `tmakit_base` (tmakit's own imports are relative).
This tree's `tmakit` is the one on the path. Each case is first checked element for element
against torch, for both trees. A case agrees when the medians differ by at most 1%, or by at most
the base's own spread (its interquartile range over its median) where that is wider.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

AGREE = 0.01  # the relative difference of medians two equal trees stay within


def import_as_base(base_src: Path) -> object:
    """The other tree's `tmakit` package, copied under the name `tmakit_base` and imported."""
    folder = Path(tempfile.mkdtemp(prefix="ab-bench-"))
    shutil.copytree(base_src / "tmakit", folder / "tmakit_base")
    sys.path.insert(0, str(folder))
    return importlib.import_module("tmakit_base")


def tma_only(function, named: dict | None = None, **options):
    """`function` held to TMA's own kernel: `strict=True` and the `named` keywords where its tree
    takes them by name (a base tree that served TMA only has neither), and copy `options` (which
    both trees take), so both trees time the same kernel where the final tree's rules would route
    a call elsewhere (torch's op, another kernel)."""
    taken = inspect.signature(function).parameters
    wanted = {"strict": True, **(named or {})}
    return functools.partial(function, **{k: v for k, v in wanted.items() if k in taken}, **options)


def cases(torch):
    """(name, make) pairs: `make(pkg)` returns (launch, check) for one tree's package."""

    def copy_case(transpose: bool, padded: bool = False, **options):
        """256 MiB of fp16; `padded`: rows 128 bytes apart from the next (not one compact run, so no
        rows view); `options`: passed to both trees' copy_."""
        rows, cols = 16384, 8192
        if transpose:
            src = torch.randn(cols, rows, device="cuda").half().t()
        else:
            src = torch.randn(rows, cols + (64 if padded else 0), device="cuda").half()[:, :cols]

        def make(pkg):
            copy_ = tma_only(pkg.copy_, **options)
            dst = torch.full((rows, cols), float("nan"), dtype=torch.float16, device="cuda")
            copy_(dst, src)
            ok = torch.equal(dst, src)
            return (lambda: copy_(dst, src)), (lambda: ok)

        return make

    def reduce_case(pkg):
        reduce_into_ = tma_only(pkg.reduce_into_, {"reduce_by": "store"})  # the base's reduce stores
        src = torch.randn(8192, 8192, device="cuda")  # 256 MiB of fp32
        dst = torch.randn(8192, 8192, device="cuda")
        start = dst.clone()
        reduce_into_(dst, src, "add")
        ok = torch.equal(dst, start + src)
        return (lambda: reduce_into_(dst, src, "add")), (lambda: ok)

    def im2col_case(pkg):
        im2col = tma_only(pkg.im2col)
        xs = [torch.randn(32, 56, 56, 64, device="cuda").half() for _ in range(4)]
        outs = [im2col(x, 3, padding=1) for x in xs]
        padded = torch.nn.functional.pad(xs[0], (0, 0, 1, 1, 1, 1))
        n, h, w, c = padded.shape
        windows = padded.as_strided((n, 56, 56, 3, 3, c), (h * w * c, w * c, c, w * c, c, 1))
        ok = torch.equal(outs[0], windows.reshape(n * 56 * 56, 9 * c))
        calls = [lambda x=x, o=o: im2col(x, 3, padding=1, out=o) for x, o in zip(xs, outs, strict=True)]
        return calls, (lambda: ok)

    def multicast_case(cluster: tuple[int, int], persistent: bool):
        def make(pkg):
            plan = importlib.import_module(f"{pkg.__name__}.plan")
            launch = importlib.import_module(f"{pkg.__name__}.runtime.launch")
            compile_ = importlib.import_module(f"{pkg.__name__}.runtime.compile")
            device = importlib.import_module(f"{pkg.__name__}.runtime.device")
            run = importlib.import_module(f"{pkg.__name__}.check.run")
            walk = launch.max_active_clusters(cluster[0] * cluster[1]) if persistent else None
            multicast = plan.MulticastPlan(plan.LoadPlan(pkg.SEED), cluster, True, 4, walk)
            verdicts = run.verify_multicast_load(multicast)  # every CTA's copy, every element
            compiled = launch.compile_multicast_load(multicast, store=False)
            src = torch.randn(pkg.SEED.shape, device="cuda").half()
            copies = torch.empty(multicast.copies_shape, dtype=src.dtype, device="cuda")
            args = (compile_.to_cute_tensor(src), compile_.to_cute_tensor(copies))
            return (lambda: compiled(*args, device.current_stream())), (lambda: all(v.ok for v in verdicts))

        return make

    yield "copy 256 MiB fp16", copy_case(False)
    yield "copy 256 MiB fp16, rows 128 B apart", copy_case(False, padded=True)
    yield "copy 256 MiB fp16 as_rows=True", copy_case(False, as_rows=True)
    yield "transposing copy 256 MiB fp16", copy_case(True)
    yield "reduce add 256 MiB fp32", reduce_case
    yield "im2col 32x56x56x64 fp16 3x3 pad 1", im2col_case
    for cluster in ((1, 2), (2, 2)):
        for persistent in (False, True):
            walk = "persistent" if persistent else "per strip"
            yield (
                f"multicast {cluster[0]}x{cluster[1]} 4 stages {walk} (L2 hot)",
                multicast_case(cluster, persistent),
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base_src", type=Path, help="the other tree's src/ folder")
    parser.add_argument("--samples", type=int, default=100, help="interleaved rounds (default 100)")
    parser.add_argument("--commit", help="this tree's commit (recorded in the JSON)")
    parser.add_argument("--base-commit", help="the base tree's commit (recorded in the JSON)")
    parser.add_argument("--json", type=Path, help="write every median, spread and verdict here")
    args = parser.parse_args(argv)

    import torch

    import tmakit
    from tmakit.bench.report import device_context
    from tmakit.bench.timing import interleaved_graph_samples_us

    base = import_as_base(args.base_src)
    results = []
    for name, make in cases(torch):
        variants, checks = {}, {}
        for label, pkg in (("base", base), ("final", tmakit)):
            launch, check = make(pkg)
            variants[label] = launch if isinstance(launch, list) else [launch]
            checks[label] = bool(check())
        timed = interleaved_graph_samples_us(variants, args.samples)
        medians = {label: statistics.median(samples) for label, samples in timed.items()}
        quartiles = statistics.quantiles(timed["base"], n=4)
        spread = (quartiles[2] - quartiles[0]) / medians["base"]
        ratio = medians["final"] / medians["base"]
        agrees = abs(ratio - 1) <= max(AGREE, spread)
        results.append(
            {
                "case": name,
                "base_us": medians["base"],
                "final_us": medians["final"],
                "final_over_base": ratio,
                "base_spread": spread,
                "agrees": agrees,
                "exact": checks,
            }  # fmt: skip
        )
        print(
            f"{name:48s} base {medians['base']:9.2f} us  final {medians['final']:9.2f} us  "
            f"x{ratio:.4f}  spread {spread:.4f}  {'agrees' if agrees else 'DIFFERS'}  exact {checks}",
            flush=True,
        )
    if args.json:
        study = {
            "study": "ab-bench",
            "what": __doc__.split("\n\n")[0].replace("\n", " "),
            "context": {**device_context(args.commit), "base_commit": args.base_commit},
            "rows": results,
            "summary": {"samples": args.samples, "agree_within": AGREE},
        }
        args.json.write_text(json.dumps(study, indent=1))
    return 0 if all(r["agrees"] and all(r["exact"].values()) for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
