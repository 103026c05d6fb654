"""Your own kernel on tmakit's TileRing, storing with a TMA *reduce*: a split-K-like sum.

`src` stacks K slabs of one (M, N) matrix, (K, M, N); `out` (M, N) receives out += src[k] for
every k. One block per (slab, strip of rows): warp 0 keeps up to `stages` TMA loads of the
strip's tiles in flight; warp 1 reduce-stores each tile as it lands into the same tile of `out`
(`cp.reduce.async.bulk.tensor ... .add`: the TMA unit adds it in L2, no thread reads a value).
The K blocks of one strip add into the same tiles of `out` concurrently; each element's K adds
are atomic, in an order no one chooses. Run it (in the project's environment, which `make test`
creates):

    .venv/bin/python examples/ring_reduce.py

With a Hopper GPU and torch it checks every sum against torch's and prints the kernel's device
time; without one it compiles the kernel for sm_90a and says so.

Partial tiles need no care here: TMA fills a load past the tensor's edge with zeros, and a
reduce store writes nothing past it.
"""

import statistics
import sys

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from tmakit import LoadConfig, LoadPlan
from tmakit.bench.timing import graph_samples_us
from tmakit.config import DTYPES
from tmakit.kernels import TileRing, tile_coordinate, tma_load_views
from tmakit.kernels.tma import matrix_first_view
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


class SlabSum:
    def __init__(self, config: LoadConfig, stages: int = 4):
        self.ring = TileRing(PipelinePlan(LoadPlan(config), stages=stages, consumer_warps=1))
        self.plan = self.ring.plan

    @cute.jit
    def __call__(self, src: cute.Tensor, out: cute.Tensor, stream: cuda.CUstream):
        load_atom, coordinate_view, shared_layout = self.ring.make_load_atom(src)  # host side
        # The reduce store's tensor map is out's; it reads the ring's stages as they are laid out.
        add_atom, out_view = cpasync.make_tiled_tma_atom(
            cpasync.CopyReduceBulkTensorTileS2GOp(cute.ReductionKind.ADD),
            matrix_first_view(out, 2),
            shared_layout,
            self.plan.config.tile,
        )
        self.kernel(load_atom, coordinate_view, add_atom, out_view, shared_layout).launch(
            grid=(self.plan.grid, 1, 1),  # row blocks x slabs
            block=(self.ring.pipeline.threads_per_block, 1, 1),
            smem=self.ring.pipeline.smem_bytes,
            stream=stream,
        )

    @cute.kernel
    def kernel(self, load_atom, coordinate_view, add_atom, out_view, shared_layout: cute.ComposedLayout):
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        block, _, _ = cute.arch.block_idx()
        row_block, slab = block % self.plan.row_blocks, block // self.plan.row_blocks
        tiles, full, empty = self.ring.allocate(shared_layout)
        self.ring.init_barriers(full, empty, warp)
        if warp == 0:
            self.produce(load_atom, coordinate_view, tiles, full, empty, row_block, slab)
        else:
            self.add_into_out(add_atom, out_view, tiles, full, empty, row_block)

    @cute.jit
    def produce(self, load_atom, coordinate_view, tiles, full, empty, row_block, slab):
        """Acquire a free stage, load the slab's next tile of the strip into it."""
        plan = self.plan  # (the ring stays an attribute: the DSL carries no plain objects through loops)
        failed = cutlass.Boolean(False)  # only the hang guard sets it
        for step in cutlass.range(plan.tiles_per_block, unroll=1):
            stage, failed = self.ring.acquire_free(empty, step, failed)
            global_part, shared_part = tma_load_views(
                load_atom, coordinate_view, tiles[None, None, stage], plan.config.tile,
                tile_coordinate(row_block, step, slab, 3),
            )  # fmt: skip
            self.ring.load(load_atom, global_part, shared_part, full, stage, failed)

    @cute.jit
    def add_into_out(self, add_atom, out_view, tiles, full, empty, row_block):
        """Wait for the tile, reduce-store it into out's tile, free the stage once the store has
        read it (the loads of the next stages are in flight meanwhile)."""
        plan = self.plan
        failed = cutlass.Boolean(False)
        for step in cutlass.range(plan.tiles_per_block, unroll=1):
            stage, failed = self.ring.wait_full(full, step, failed)
            # A store atom takes the same two views as a load, the other way round.
            out_part, shared_part = tma_load_views(
                add_atom, out_view, tiles[None, None, stage], plan.config.tile, (row_block, step)
            )
            # The whole warp calls it: the DSL elects the issuing thread of a reduce store itself.
            cute.copy(add_atom, shared_part, out_part)
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)  # the store has read the stage
            self.ring.release(empty, stage, failed)


# 8 slabs of a 1000 x 3000 fp32 matrix (96 MB): partial tiles both ways.
EXAMPLE = LoadConfig((8, 1000, 3000), "fp32", (64, 64))


def compile_slab_sum(config: LoadConfig = EXAMPLE, stages: int = 4):
    """The kernel compiled for sm_90a (no GPU needed), its PTX kept."""
    return compile_kernel(
        SlabSum(config, stages),
        fake_source(config),
        fake_tensor(DTYPES[config.dtype], config.shape[1:]),
        placeholder_stream(),
        keep_ptx=True,
    )


def run(config: LoadConfig = EXAMPLE, stages: int = 4) -> bool:
    """Compile; on a Hopper GPU also sum twice and time the kernel. Returns whether it checked out.

    1. Integer-valued slabs (|x| <= 1024, K of them): every partial sum is exact in fp32, so
       whatever order the adds land in, out equals torch's `init + src.sum(0)` bit for bit.
    2. randn slabs: the order is free, so out and torch's sum differ by rounding. Each is a sum
       of K + 1 terms in some order with K fp32 roundings, so each lies within
       gamma_K * sum(|terms|) of the exact sum (gamma_K = K u / (1 - K u), u = 2^-24); out is
       checked against the exact sum (float64) with that bound, and so is torch's."""
    compiled = compile_slab_sum(config, stages)
    gpu_name, why = find_hopper_gpu()
    if gpu_name is None:
        print(f"No Hopper GPU here: {why}.")
        print(
            f"Compiled the slab sum for sm_90a in {compiled.compile_seconds:.2f} s (its PTX has "
            f"{compiled.ptx.count('cp.reduce.async.bulk.tensor')} cp.reduce.async.bulk.tensor); on a "
            "Hopper GPU it is also checked against torch and timed."
        )
        return True
    import torch

    slabs = config.shape[0]
    generator = torch.Generator(device="cuda").manual_seed(7)
    exact_src = torch.randint(-1024, 1025, config.shape, generator=generator, device="cuda").float()
    exact_init = torch.randint(-1024, 1025, config.shape[1:], generator=generator, device="cuda").float()
    out = exact_init.clone()
    compiled(to_cute_tensor(exact_src), to_cute_tensor(out), current_stream())
    expected = exact_init + exact_src.sum(0)
    wrong = (out.view(torch.int32) != expected.view(torch.int32)).nonzero()
    if len(wrong):
        row, col = (int(i) for i in wrong[0])
        print(
            f"{len(wrong)} sums of integers wrong; ({row}, {col}): {out[row, col]}, "
            f"torch's {expected[row, col]}"
        )
        return False

    src = torch.randn(config.shape, generator=generator, device="cuda")
    init = torch.randn(config.shape[1:], generator=generator, device="cuda")
    out = init.clone()
    src_view, out_view = to_cute_tensor(src), to_cute_tensor(out)
    compiled(src_view, out_view, current_stream())
    exact = init.double() + src.double().sum(0)
    unit = 2.0**-24
    bound = slabs * unit / (1 - slabs * unit) * (init.double().abs() + src.double().abs().sum(0))
    by_torch = init + src.sum(0)
    for name, found in (("tmakit", out), ("torch", by_torch)):
        error = (found.double() - exact).abs()
        if bool((error > bound).any()):
            row, col = (int(i) for i in (error > bound).nonzero()[0])
            print(
                f"{name}'s sum at ({row}, {col}) is {error[row, col]:.3g} off, past the bound "
                f"{bound[row, col]:.3g}"
            )
            return False
    largest = (out - by_torch).abs().max().item()  # before the timing below adds into out again
    # Device time per launch from CUDA-graph replays (each replay adds into out again: same traffic).
    median_us = statistics.median(graph_samples_us([lambda: compiled(src_view, out_view, current_stream())]))
    moved = src.nbytes + 2 * out.nbytes  # the fewest DRAM bytes: slabs read once, out read and written
    print(
        f"{gpu_name}: all {out.numel()} sums of {slabs} slabs of {tuple(out.shape)} fp32 equal torch's "
        f"init + src.sum(0) (integers: bit for bit; randn: both within the fp32 rounding bound of the "
        f"exact sum, largest difference {largest:.3g}); "
        f"{median_us:.1f} us per launch (median device time, L2 warm), {moved / median_us / 1e3:.0f} GB/s"
    )
    return True


if __name__ == "__main__":
    sys.exit(0 if run() else 1)
