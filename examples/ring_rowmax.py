"""Your own kernel on tmakit's TileRing: the max of every row, with loading overlapped.

Warp 0 keeps up to `stages` TMA loads in flight; warp 1 reduces each tile's rows as it lands and
frees the stage. Run it (in the project's environment, which `make test` creates):

    .venv/bin/python examples/ring_rowmax.py

With a Hopper GPU and torch it checks every row's max against torch's and prints the kernel's
device time; without one it compiles the kernel for sm_90a and says so.
"""

import statistics
import sys

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute

from tmakit import LoadConfig, LoadPlan, TmaConfigError
from tmakit.bench.timing import graph_samples_us
from tmakit.config import DTYPES
from tmakit.kernels import TileRing, tile_coordinate, tma_load_views
from tmakit.plan import PipelinePlan
from tmakit.runtime import (
    compile_kernel,
    current_stream,
    fake_source,
    fake_tensor,
    find_hopper_gpu,
    placeholder_stream,
    to_cute_tensor,
)


class RowMax:
    def __init__(self, config: LoadConfig, stages: int = 4):
        self.ring = TileRing(PipelinePlan(LoadPlan(config), stages=stages, consumer_warps=1))
        self.plan = self.ring.plan
        if self.plan.has_partial_tiles:  # TMA fills past the edge with zeros, which a max would see
            raise TmaConfigError(f"row max reads whole tiles: {config.tile} must divide {config.shape}")

    @cute.jit
    def __call__(self, src: cute.Tensor, row_max: cute.Tensor, stream: cuda.CUstream):
        load_atom, coordinate_view, shared_layout = self.ring.make_load_atom(src)  # host side
        self.kernel(load_atom, coordinate_view, row_max, shared_layout).launch(
            grid=(self.plan.grid, 1, 1),
            block=(self.ring.pipeline.threads_per_block, 1, 1),
            smem=self.ring.pipeline.smem_bytes,
            stream=stream,
        )

    @cute.kernel
    def kernel(self, load_atom, coordinate_view, row_max: cute.Tensor, shared_layout: cute.ComposedLayout):
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        row_block, _, _ = cute.arch.block_idx()
        tiles, full, empty = self.ring.allocate(shared_layout)
        self.ring.init_barriers(full, empty, warp)
        if warp == 0:
            self.produce(load_atom, coordinate_view, tiles, full, empty, row_block)
        else:
            self.consume(tiles, full, empty, row_max, row_block)

    @cute.jit
    def produce(self, load_atom, coordinate_view, tiles, full, empty, row_block):
        """Acquire a free stage, load the strip's next tile into it."""
        plan = self.plan  # (the ring stays an attribute: the DSL carries no plain objects through loops)
        failed = cutlass.Boolean(False)  # only the hang guard sets it
        for step in cutlass.range(plan.tiles_per_block, unroll=1):
            stage, failed = self.ring.acquire_free(empty, step, failed)
            global_part, shared_part = tma_load_views(
                load_atom, coordinate_view, tiles[None, None, stage], plan.config.tile,
                tile_coordinate(row_block, step, 0, 2),
            )  # fmt: skip
            self.ring.load(load_atom, global_part, shared_part, full, stage, failed)

    @cute.jit
    def consume(self, tiles, full, empty, row_max, row_block):
        """Wait for the tile, reduce each of its rows into the running max, free the stage."""
        plan = self.plan
        tile_rows, tile_cols = plan.config.tile
        lane = cute.arch.lane_idx()
        failed = cutlass.Boolean(False)
        for step in cutlass.range(plan.tiles_per_block, unroll=1):
            stage, failed = self.ring.wait_full(full, step, failed)
            tile = tiles[None, None, stage]
            for row in cutlass.range(tile_rows, unroll=1):
                best = cutlass.Float32(-float("inf"))
                for col in cutlass.range(lane, tile_cols, 32):
                    best = cute.arch.fmax(best, tile[row, col].to(cutlass.Float32))
                best = cute.arch.warp_reduction_max(best)
                if lane == 0:
                    global_row = row_block * tile_rows + row
                    if step > 0:
                        best = cute.arch.fmax(row_max[global_row], best)
                    row_max[global_row] = best
            self.ring.release(empty, stage, failed)


EXAMPLE = LoadConfig((1024, 4096), "bf16", (64, 256))


def compile_row_max(config: LoadConfig = EXAMPLE, stages: int = 4):
    """The kernel compiled for sm_90a (no GPU needed), its PTX kept."""
    plan = LoadPlan(config)
    return compile_kernel(
        RowMax(config, stages),
        fake_source(plan.config),
        fake_tensor(DTYPES["fp32"], (plan.padded_shape[0],)),
        placeholder_stream(),
        keep_ptx=True,
    )


def run(config: LoadConfig = EXAMPLE, stages: int = 4) -> bool:
    """Compile; on a Hopper GPU also run on a random input, compare every row's max with torch's
    (bit for bit: a max does not round) and time the kernel. Returns whether it checked out."""
    compiled = compile_row_max(config, stages)
    gpu_name, why = find_hopper_gpu()
    if gpu_name is None:
        print(f"No Hopper GPU here: {why}.")
        print(
            f"Compiled the row max for sm_90a in {compiled.compile_seconds:.2f} s (its PTX has "
            f"{compiled.ptx.count('max.f32')} max.f32); on a Hopper GPU it is also checked against torch "
            "and timed."
        )
        return True
    import torch

    rows, cols = config.shape
    src = torch.randn(rows, cols, device="cuda").to(getattr(torch, config.element.torch_name))
    row_max = torch.full((rows,), float("nan"), device="cuda")  # a row never written stays NaN
    src_view, out_view = to_cute_tensor(src), to_cute_tensor(row_max)
    compiled(src_view, out_view, current_stream())
    expected = src.float().amax(dim=1)
    wrong = (row_max != expected).nonzero()
    if len(wrong):
        first = int(wrong[0])
        print(f"{len(wrong)}/{rows} rows wrong; row {first}: {row_max[first]}, torch's {expected[first]}")
        return False
    # Device time per launch from CUDA-graph replays (the stream is the one being captured).
    median_us = statistics.median(graph_samples_us([lambda: compiled(src_view, out_view, current_stream())]))
    print(
        f"{gpu_name}: all {rows} row maxima of a {rows} x {cols} {config.dtype} tensor equal torch's "
        f"amax, bit for bit; {median_us:.1f} us per launch (median device time, L2 warm), "
        f"{src.nbytes / median_us / 1e3:.0f} GB/s read"
    )
    return True


if __name__ == "__main__":
    sys.exit(0 if run() else 1)
