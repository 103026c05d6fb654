"""Your own kernel on im2col tiles: a TileRing fed by TMA im2col loads, the sum of every output
pixel's window (a 2-D convolution with one all-ones filter), with loading overlapped.

Warp 0 loads box after box of the patch matrix - one filter tap's channels for 128 output pixels,
the padding zero-filled by TMA - into the ring; warp 1 adds each box's rows into per-pixel sums
and frees the stage. Nothing of the patch matrix is ever written to global memory. Run it (in the
project's environment, which `make test` creates):

    .venv/bin/python examples/im2col_ring.py

With a Hopper GPU and torch it checks every pixel's sum against torch's unfold and prints the
kernel's device time; without one it compiles the kernel for sm_90a and says so.
"""

import statistics
import sys

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute

from tmakit import Im2colPlan
from tmakit.bench.timing import graph_samples_us
from tmakit.config import DTYPES
from tmakit.kernels import TileRing, shared_tile_layout, tma_load_views
from tmakit.patches.kernel import make_im2col_load_atom
from tmakit.plan import PipelinePlan
from tmakit.runtime import (
    compile_kernel,
    current_stream,
    fake_tensor,
    find_hopper_gpu,
    placeholder_stream,
    to_cute_tensor,
)


class WindowSum:
    """One block per 128 output pixels, walking every tap's channel tiles of them."""

    def __init__(self, im2col: Im2colPlan, stages: int = 4):
        self.im2col = im2col
        # The ring over the patch matrix: its boxes are the im2col loads' (the plan's `patch_load`).
        self.ring = TileRing(PipelinePlan(im2col.patch_load, stages=stages, consumer_warps=1))
        self.plan = self.ring.plan

    @cute.jit
    def __call__(self, x: cute.Tensor, sums: cute.Tensor, stream: cuda.CUstream):
        shared_layout = shared_tile_layout(self.plan.config.tile, False, self.plan.swizzle_bits)
        load_atom, coordinate_view = make_im2col_load_atom(self.im2col, x, shared_layout)  # host side
        self.kernel(load_atom, coordinate_view, sums, shared_layout).launch(
            grid=(self.plan.grid, 1, 1),
            block=(self.ring.pipeline.threads_per_block, 1, 1),
            smem=self.ring.pipeline.smem_bytes,
            stream=stream,
        )

    @cute.kernel
    def kernel(self, load_atom, coordinate_view, sums: cute.Tensor, shared_layout: cute.ComposedLayout):
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        row_block, _, _ = cute.arch.block_idx()
        tiles, full, empty = self.ring.allocate(shared_layout)
        self.ring.init_barriers(full, empty, warp)
        if warp == 0:
            self.produce(load_atom, coordinate_view, tiles, full, empty, row_block)
        else:
            self.consume(tiles, full, empty, sums, row_block)

    @cute.jit
    def produce(self, load_atom, coordinate_view, tiles, full, empty, row_block):
        """Acquire a free stage, load the next (tap, channel tile) box of these pixels into it."""
        failed = cutlass.Boolean(False)  # only the hang guard sets it
        for column_tile in cutlass.range(self.im2col.column_tiles, unroll=1):
            stage, failed = self.ring.acquire_free(empty, column_tile, failed)
            global_part, shared_part = tma_load_views(
                load_atom,
                coordinate_view,
                tiles[None, None, stage],
                self.im2col.tile,
                (row_block, column_tile),
            )
            self.ring.load(load_atom, global_part, shared_part, full, stage, failed)

    @cute.jit
    def consume(self, tiles, full, empty, sums, row_block):
        """Each lane owns every 32nd pixel of the block: add its row of each box, free the stage;
        at the end write the pixels that exist (the last block's box runs past them: zeros)."""
        pixels, channels = self.im2col.tile
        lane = cute.arch.lane_idx()
        rows_per_lane = pixels // 32
        totals = cute.make_rmem_tensor(rows_per_lane, cutlass.Float32)
        totals.fill(0.0)
        failed = cutlass.Boolean(False)
        for column_tile in cutlass.range(self.im2col.column_tiles, unroll=1):
            stage, failed = self.ring.wait_full(full, column_tile, failed)
            tile = tiles[None, None, stage]
            for i in cutlass.range_constexpr(rows_per_lane):
                for c in cutlass.range(channels, unroll=8):
                    totals[i] += tile[i * 32 + lane, c].to(cutlass.Float32)
            self.ring.release(empty, stage, failed)
        for i in cutlass.range_constexpr(rows_per_lane):
            pixel = row_block * pixels + i * 32 + lane
            if pixel < self.im2col.patch_shape[0]:
                sums[pixel] = totals[i]


EXAMPLE = Im2colPlan((4, 56, 56, 64), "fp16", 3, padding=1)


def compile_window_sum(im2col: Im2colPlan = EXAMPLE, stages: int = 4):
    """The kernel compiled for sm_90a (no GPU needed), its PTX kept."""
    return compile_kernel(
        WindowSum(im2col, stages),
        fake_tensor(im2col.element, im2col.shape),
        fake_tensor(DTYPES["fp32"], (im2col.patch_shape[0],)),
        placeholder_stream(),
        keep_ptx=True,
    )


def run(im2col: Im2colPlan = EXAMPLE, stages: int = 4) -> bool:
    """Compile; on a Hopper GPU also run on small integers (every fp32 sum exact, so equal to
    torch's bit for bit), compare every pixel with torch's unfold and time the kernel."""
    compiled = compile_window_sum(im2col, stages)
    gpu_name, why = find_hopper_gpu()
    if gpu_name is None:
        print(f"No Hopper GPU here: {why}.")
        print(
            f"Compiled the window sum for sm_90a in {compiled.compile_seconds:.2f} s (its PTX has "
            f"{compiled.ptx.count('.im2col')} im2col load); on a Hopper GPU it is also checked against "
            "torch and timed."
        )
        return True
    import torch

    batch, _, _, _ = im2col.shape
    x = torch.randint(-8, 8, im2col.shape, device="cuda").to(getattr(torch, im2col.element.torch_name))
    sums = torch.full(
        (im2col.patch_shape[0],), float("nan"), device="cuda"
    )  # a pixel never written stays NaN
    x_view, sums_view = to_cute_tensor(x), to_cute_tensor(sums)
    compiled(x_view, sums_view, current_stream())
    unfolded = torch.nn.functional.unfold(
        x.permute(0, 3, 1, 2).float(), im2col.filter, im2col.dilation, im2col.padding, im2col.stride
    )  # (N, C*R*S, P*Q)
    expected = unfolded.sum(dim=1).reshape(-1)
    wrong = (sums != expected).nonzero()
    if len(wrong):
        first = int(wrong[0])
        print(f"{len(wrong)} pixels wrong; pixel {first}: {sums[first]}, torch's {expected[first]}")
        return False
    median_us = statistics.median(graph_samples_us([lambda: compiled(x_view, sums_view, current_stream())]))
    rows, cols = im2col.patch_shape
    print(
        f"{gpu_name}: all {rows} window sums of a {'x'.join(map(str, im2col.shape))} {im2col.dtype} "
        f"activation ({im2col.filter[0]}x{im2col.filter[1]} filter, padding {im2col.padding}) equal torch's "
        f"unfold, bit for bit; {median_us:.1f} us per launch (median device time, L2 warm), "
        f"{rows * cols * im2col.element.nbytes / median_us / 1e3:.0f} GB/s of patches gathered"
    )
    return True


if __name__ == "__main__":
    sys.exit(0 if run() else 1)
