"""tmakit.im2col against torch's F.unfold + the permute a user needs for the same (N*P*Q, R*S*C)
patch matrix, on ResNet-50's 3x3 layers at batch 32 (fp16, padding 1; the strided ones are the
first block of each stage). Device time, compile excluded, buffers rotated past the L2, medians
of CUDA-graph replays, both in one run; each layer's two results compared bit for bit first.
GB/s counts the patch matrix written. Writes im2col.json into --out.

    python3 scripts/im2col_bench.py --out DIR [--commit SHA] [--samples N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

# (H, W, C, stride) of ResNet-50's 3x3 convolutions; N = 32.
LAYERS = [
    (56, 56, 64, 1),
    (56, 56, 128, 2),
    (28, 28, 128, 1),
    (28, 28, 256, 2),
    (14, 14, 256, 1),
    (14, 14, 512, 2),
    (7, 7, 512, 1),
]
BATCH = 32


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--commit", default=None)
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()

    import torch
    import torch.nn.functional as F

    import tmakit
    from tmakit.bench.report import device_context
    from tmakit.bench.suites import rotation_buffers
    from tmakit.bench.timing import graph_samples_us

    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    rows = []
    for height, width, channels, stride in LAYERS:
        p = (height + 2 - 3) // stride + 1
        q = (width + 2 - 3) // stride + 1
        patch_shape = (BATCH * p * q, 9 * channels)
        patch_bytes = patch_shape[0] * patch_shape[1] * 2
        buffers = rotation_buffers(patch_bytes + BATCH * height * width * channels * 2, l2_bytes)
        half = {"device": "cuda", "dtype": torch.float16}
        xs = [torch.randn(BATCH, height, width, channels, **half) for _ in range(buffers)]
        outs = [torch.full(patch_shape, float("nan"), **half) for _ in range(buffers)]
        torch_outs = [torch.empty_like(o) for o in outs]

        def ours(x, out, stride=stride):
            tmakit.im2col(x, 3, stride=stride, padding=1, out=out)

        def theirs(x, out, stride=stride, p=p, q=q, channels=channels):
            unfolded = F.unfold(x.permute(0, 3, 1, 2), 3, padding=1, stride=stride)  # (N, C*9, L)
            view = unfolded.view(BATCH, channels, 3, 3, p * q).permute(0, 4, 2, 3, 1)
            out.view(BATCH, p * q, 3, 3, channels).copy_(view)

        ours(xs[0], outs[0])
        theirs(xs[0], torch_outs[0])
        torch.cuda.synchronize()
        same = torch.equal(outs[0].view(torch.int16), torch_outs[0].view(torch.int16))
        pairs = list(zip(xs, outs, torch_outs, strict=True))
        tmakit_us = statistics.median(
            graph_samples_us([lambda x=x, o=o: ours(x, o) for x, o, _ in pairs], args.samples)
        )
        torch_us = statistics.median(
            graph_samples_us([lambda x=x, o=t: theirs(x, o) for x, _, t in pairs], args.samples)
        )
        row = {
            "layer": f"{BATCH}x{height}x{width}x{channels} 3x3 stride {stride} pad 1",
            "patch_matrix": list(patch_shape),
            "patch_mib": patch_bytes / 2**20,
            "rotated_buffers": buffers,
            "bit_exact_vs_torch": same,
            "tmakit_us": tmakit_us,
            "torch_unfold_permute_us": torch_us,
            "tmakit_gb_per_s": patch_bytes / tmakit_us / 1e3,
            "torch_gb_per_s": patch_bytes / torch_us / 1e3,
            "speedup": torch_us / tmakit_us,
        }
        rows.append(row)
        print(
            f"{row['layer']:>36}: tmakit {tmakit_us:8.1f} us ({row['tmakit_gb_per_s']:6.0f} GB/s)  "
            f"unfold+permute {torch_us:8.1f} us ({row['torch_gb_per_s']:6.0f} GB/s)  "
            f"{row['speedup']:.2f}x  {'bit-exact' if same else 'MISMATCH'}",
            flush=True,
        )
        del xs, outs, torch_outs
    result = {
        "study": "im2col",
        "what": "tmakit.im2col vs F.unfold + permute to (N*P*Q, R*S*C), ResNet-50 3x3 layers, batch 32, "
        "fp16, L2 cold (rotated), CUDA-graph replay medians, GB/s of the patch matrix written",
        "context": device_context(args.commit),
        "rows": rows,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "im2col.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all(r["bit_exact_vs_torch"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
