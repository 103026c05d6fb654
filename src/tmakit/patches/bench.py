"""The im2col study: `tmakit.im2col` beside torch's expressions of the same (N*P*Q, R*S*C) patch
matrix (`TORCH_IM2COL`: F.unfold + the permute a user needs), on ResNet-50's 3x3 layers at batch 32
(fp16, padding 1; the strided ones are the first block of each stage) and two layers of 16
channels, each result compared bit for bit with the first torch one first; device time from
CUDA-graph replays, buffers rotated past the L2. GB/s count the patch matrix written. Its study is
fixed (`LAYERS`); the JSON it writes is the im2col study (one row a layer: both times, their
ratio, bit-exactness). `DROPIN_CASES`: its cases of the drop-in study (`families.dropin`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..bench.dropin import DropinCase
from ..bench.report import BenchRow
from ..bench.suites import rotation_buffers
from ..bench.timing import graph_samples_us
from ..check.run import signed_bits
from ..errors import TmaConfigError
from ..families import Family, Options, chosen, tabled_study
from . import api
from .launch import compile_im2col
from .plan import Im2colPlan
from .route import IM2COL_KERNELS

if TYPE_CHECKING:
    import torch

# (H, W, C, stride) of ResNet-50's 3x3 convolutions; N = 32.
LAYERS = (
    (56, 56, 64, 1),
    (56, 56, 128, 2),
    (28, 28, 128, 1),
    (28, 28, 256, 2),
    (14, 14, 256, 1),
    (14, 14, 512, 2),
    (7, 7, 512, 1),
)
BATCH = 32
# (H, W, C, filter, stride, padding) of narrow channels, where the windows copy and the im2col loads
# are both timed: ResNet-50's 7x7 stem (3 channels padded to 16) and a 3x3 layer of 16 channels.
NARROW = ((224, 224, 16, 7, 2, 3), (56, 56, 16, 3, 1, 1))


def torch_unfold_im2col(x: torch.Tensor, plan: Im2colPlan, out: torch.Tensor) -> torch.Tensor:
    """The fastest torch expression of `plan`'s (N*P*Q, R*S*C) patch matrix of the NHWC `x`, into
    `out`: `F.unfold` of the NCHW view, then the permute that puts channels fastest."""
    import torch.nn.functional as F

    batch, _, _, channels = plan.shape
    p, q = plan.output_shape
    r, s = plan.filter
    unfolded = F.unfold(x.permute(0, 3, 1, 2), plan.filter, plan.dilation, plan.padding, plan.stride)
    view = unfolded.view(batch, channels, r, s, p * q).permute(0, 4, 2, 3, 1)  # (N, C*R*S, L) read
    return out.view(batch, p * q, r, s, channels).copy_(view)


# torch's ways to write each im2col patch matrix, by name (the bench times each).
TORCH_IM2COL: dict[str, Callable[[Any, Any, Any], Any]] = {"torch unfold + permute": torch_unfold_im2col}


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
    each kernel `im2col_by` may choose where it serves the call (`patches.route`'s rule
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
    rows.insert(0, row("tmakit.patches", graph_samples_us(launches, samples), verdict))
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


def layer_plans(options: Options) -> list[Im2colPlan]:
    """The study's layers --only chooses (by `layer_name`), each planned now."""
    plans = [Im2colPlan((BATCH, h, w, c), "fp16", 3, stride, 1) for h, w, c, stride in LAYERS]
    plans += [Im2colPlan((BATCH, h, w, c), "fp16", r, stride, pad) for h, w, c, r, stride, pad in NARROW]
    return chosen(options, plans, layer_name)


def bench_layer(plan: Im2colPlan, options: Options, l2_bytes: int) -> list[BenchRow]:
    return bench_im2col(plan, l2_bytes, options.hot_l2, options.samples)


def layer_row(plan: Im2colPlan, rows: list[BenchRow]) -> dict:
    """tmakit's time beside the first torch expression's, as GB/s of the patch matrix written,
    and each kernel's time where the call could choose it (`im2col_by=...` rows)."""
    ours, theirs = rows[0], rows[1]
    written = patch_bytes(plan)
    kernels = {r.kernel.removeprefix("im2col_by="): r for r in rows if r.kernel.startswith("im2col_by=")}
    return {
        **{f"{kernel}_us": r.median_us for kernel, r in kernels.items()},
        **{f"{kernel}_exact": r.verified == "ok" for kernel, r in kernels.items()},
        "layer": layer_name(plan),
        "patch_matrix": list(plan.patch_shape),
        "patch_mib": written / 2**20,
        "rotated_buffers": ours.notes["rotated_buffers"],
        "bit_exact_vs_torch": (ours.verified or "").startswith("ok"),
        "tmakit_us": ours.median_us,
        "torch_unfold_permute_us": theirs.median_us,
        "tmakit_gb_per_s": written / ours.median_us / 1e3,
        "torch_gb_per_s": written / theirs.median_us / 1e3,
        "speedup": theirs.median_us / ours.median_us,
    }


study = tabled_study(
    "im2col",
    "tmakit.im2col vs F.unfold + permute to (N*P*Q, R*S*C), ResNet-50 3x3 layers and two layers of "
    "16 channels (the 7x7 stem, a 3x3), batch 32, fp16, L2 cold (rotated), CUDA-graph replay medians, "
    "GB/s of the patch matrix written; loads_us / windows_us: each kernel im2col_by may choose, where it "
    "serves the layer",
    layer_row,
)


STUDIES = (
    Family(
        name="im2col",
        summary="tmakit.im2col against torch's unfold + permute, on ResNet-50's 3x3 layers (see --only)",
        plot_title="tmakit.im2col vs torch's unfold + permute",
        plans=layer_plans,
        bench=bench_layer,
        compared_with=lambda options: list(TORCH_IM2COL),
        reads=frozenset({"only"}),
        compile=lambda plan, keep_ptx=False: compile_im2col(plan, keep_ptx=keep_ptx),
        example=lambda: Im2colPlan((1, 8, 8, 16), "fp16", 3, 1, 1),
        baselines=dict(TORCH_IM2COL),
        study=study,
    ),
)


# The drop-in study's im2col cases (`families.dropin`): ResNet-50's 7x7 stride-2 stem (3 channels
# padded to 16) and every 3x3 layer above, fp16, each as (filter, stride, padding).
DROPIN_STEM = (BATCH, 224, 224, 16, 7, 2, 3)  # N, H, W, C, filter, stride, pad
DROPIN_CASES = (
    DropinCase("im2col", DROPIN_STEM[:4], "fp16", DROPIN_STEM[4:]),
    *(DropinCase("im2col", (BATCH, h, w, c), "fp16", (3, s, 1)) for h, w, c, s in LAYERS),
)
