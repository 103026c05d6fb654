"""The im2col family: `tmakit.im2col` against torch's F.unfold + the permute a user needs for the
same (N*P*Q, R*S*C) patch matrix, on ResNet-50's 3x3 layers at batch 32 (fp16, padding 1; the
strided ones are the first block of each stage). Its study is fixed (`LAYERS`); the JSON it
writes is the im2col study (one row a layer: both times, their ratio, bit-exactness)."""

from __future__ import annotations

from ..bench.baselines import TORCH_IM2COL
from ..bench.im2col import bench_im2col, layer_name, patch_bytes
from ..bench.report import BenchRow
from ..plan import Im2colPlan
from ..runtime.launch import compile_im2col
from . import Family, Options, chosen, tabled_study

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


def layer_plans(options: Options) -> list[Im2colPlan]:
    """The study's layers --only chooses (by `bench.im2col.layer_name`), each planned now."""
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
