"""The im2col suite: `tmakit.im2col` beside torch's expressions of the same (N*P*Q, R*S*C) patch
matrix (`baselines.TORCH_IM2COL`), each result compared bit for bit with the first torch one
first; device time from CUDA-graph replays, buffers rotated past the L2. GB/s count the patch
matrix written."""

from __future__ import annotations

import math

from .. import api
from ..check.run import signed_bits
from ..errors import TmaConfigError
from ..plan import Im2colPlan
from ..plan.im2col_route import IM2COL_KERNELS
from .baselines import TORCH_IM2COL
from .report import BenchRow
from .suites import rotation_buffers
from .timing import graph_samples_us


def layer_name(plan: Im2colPlan) -> str:
    """ "32x56x56x64 3x3 stride 1 pad 1": the activation (NHWC) and the convolution."""
    (r, s), (stride, _), (padding, _) = plan.filter, plan.stride, plan.padding
    return f"{'x'.join(map(str, plan.shape))} {r}x{s} stride {stride} pad {padding}"


def patch_bytes(plan: Im2colPlan) -> int:
    rows, cols = plan.patch_shape
    return rows * cols * plan.element.nbytes


def bench_im2col(plan: Im2colPlan, l2_bytes: int, hot_l2: bool, samples: int) -> list[BenchRow]:
    """`tmakit.im2col(x, ..., out=)` and each torch expression on `plan`'s activations (seeded
    randn), tmakit's row verified bit for bit against the first torch expression's result; then
    each kernel `im2col_by` may choose where it serves the call (`plan.im2col_route`'s rule
    compares them), each verified the same way."""
    import torch

    activation_bytes = math.prod(plan.shape) * plan.element.nbytes
    written = patch_bytes(plan)
    count = rotation_buffers(written + activation_bytes, l2_bytes, hot_l2)
    options = {"device": "cuda", "dtype": getattr(torch, plan.element.torch_name)}
    generator = torch.Generator(device="cuda").manual_seed(2026)
    xs = [torch.randn(plan.shape, generator=generator, **options) for _ in range(count)]
    outs = [torch.full(plan.patch_shape, float("nan"), **options) for _ in range(count)]
    theirs = [torch.empty_like(o) for o in outs]
    knobs = {"stride": plan.stride, "padding": plan.padding, "dilation": plan.dilation}

    def ours(x, out):
        return api.im2col(x, plan.filter, **knobs, out=out)

    ours(xs[0], outs[0])
    bits = signed_bits(outs[0])
    row = lambda name, samples_us, verified=None: BenchRow(  # noqa: E731
        name, "load", plan.patch_shape, plan.dtype, written, samples_us, verified, None,
        {"layer": layer_name(plan), "rotated_buffers": count, "hot_l2": hot_l2},
    )  # fmt: skip
    rows, verdict = [], None
    for name, expression in TORCH_IM2COL.items():
        launches = [lambda x=x, t=t, f=expression: f(x, plan, t) for x, t in zip(xs, theirs, strict=True)]
        launches[0]()
        torch.cuda.synchronize()
        if verdict is None:
            same = torch.equal(bits(outs[0]), bits(theirs[0]))
            verdict = f"ok: bit-exact against {name}" if same else f"MISMATCH against {name}"
        rows.append(row(name, graph_samples_us(launches, samples)))
    launches = [lambda x=x, o=o: ours(x, o) for x, o in zip(xs, outs, strict=True)]
    rows.insert(0, row("tmakit.im2col", graph_samples_us(launches, samples), verdict))
    for kernel in IM2COL_KERNELS:  # each kernel the call may choose, where it serves: the rule's data
        try:
            api.im2col_path(xs[0], plan.filter, **knobs, out=outs[0], im2col_by=kernel)
        except TmaConfigError:
            continue
        chosen = [lambda x=x, o=o, k=kernel: api.im2col(x, plan.filter, **knobs, out=o, im2col_by=k)
                  for x, o in zip(xs, outs, strict=True)]  # fmt: skip
        outs[0].fill_(float("nan"))
        chosen[0]()
        verdict = "ok" if torch.equal(bits(outs[0]), bits(theirs[0])) else "MISMATCH"
        rows.append(row(f"im2col_by={kernel}", graph_samples_us(chosen, samples), verdict))
    del xs, outs, theirs, launches
    torch.cuda.empty_cache()
    return rows
