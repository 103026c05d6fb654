"""Device helpers every tmakit kernel shares, named after the seed's responsibilities.

- the layout describes storage (`shared_tile_layout`; global views come from the tensor itself);
- the coordinate tensor lets tiling pick the transfer origin (`tma_load_views`);
- partitioning prepares views for the copy atom (`tma_load_views`);
- the barrier says when the destination is ready (`init_load_barrier`, `issue_tile_load`).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from ..plan import LoadPlan, ceil_div


def shared_tile_layout(
    tile: tuple[int, int], rows_contiguous: bool = False, swizzle_bits: int = 0
) -> cute.ComposedLayout:
    """The shared tile: row-major, or column-major when the global rows are contiguous (its
    contiguous mode must follow the global stride-1 mode; the DSL compiles a mismatch without
    complaint), composed with Swizzle(bits, 4, 3) on byte addresses - TMA's 32B/64B/128B modes
    for bits 1/2/3; zero bits (the seed's) is the identity."""
    tile_rows, tile_cols = tile
    stride = (1, tile_rows) if rows_contiguous else (tile_cols, 1)
    return cute.make_composed_layout(
        cute.make_swizzle(swizzle_bits, 4, 3), 0, cute.make_layout((tile_rows, tile_cols), stride=stride)
    )


def matrix_first_view(src: cute.Tensor, rank: int) -> cute.Tensor:
    """The tensor's own layout (strides read from it, never rebuilt around its pointer) with the
    matrix modes (rows, columns) first and the batch modes, if any, grouped into one trailing
    mode, innermost first, so that a flat batch index counts in the tensor's row-major order."""
    matrix_first = cute.select(src.layout, mode=[rank - 2, rank - 1, *reversed(range(rank - 2))])
    if rank > 2:
        matrix_first = cute.group_modes(matrix_first, 2, rank)
    return cute.make_tensor(src.iterator, matrix_first)


def tile_counts(plan: LoadPlan, matrix_view: cute.Tensor, shape_generic: bool):
    """(row_blocks, column_tiles, batch_count) of the tensor viewed matrix first, (rows,
    columns[, batch]): the plan's numbers, or for a shape-generic kernel 32-bit device integers
    from the tensor's run-time extents (the plan's shape then only stands in). Host or device."""
    if not shape_generic:
        return plan.row_blocks, plan.tiles_per_block, plan.batch_count
    tile_rows, tile_cols = plan.config.tile
    batch = 1
    if cutlass.const_expr(len(plan.config.shape) > 2):
        batch = cutlass.Int32(cute.size(matrix_view, mode=[2]))
    rows = cutlass.Int32(cute.size(matrix_view, mode=[0]))
    cols = cutlass.Int32(cute.size(matrix_view, mode=[1]))
    return ceil_div(rows, tile_rows), ceil_div(cols, tile_cols), batch


def padded_matrix_view(out: cute.Tensor, padded_shape: tuple[int, ...], batch_count: int) -> cute.Tensor:
    """A compact row-major (batch, rows, cols) scratch viewed as (rows, cols, batch)."""
    rows, cols = padded_shape[-2:]
    return cute.make_tensor(
        out.iterator, cute.make_layout((rows, cols, batch_count), stride=(cols, 1, rows * cols))
    )


def tile_coordinate(row_block, column_tile, batch, rank: int):
    """The coordinate `local_tile` takes for a tile: (row_block, column_tile[, batch])."""
    if rank > 2:
        return (row_block, column_tile, batch)
    return (row_block, column_tile)


@cute.jit
def tma_load_views(
    load_atom: cute.CopyAtom,
    coordinate_view: cute.Tensor,
    shared_tile: cute.Tensor,
    tile: cutlass.Constexpr,
    tile_coord: cute.Coord,
):
    """Views for one TMA tile transfer: (global part, shared part) - for a load the source and
    the destination; a TMA store atom takes the same two views the other way round.

    `local_tile` picks the tile's coordinates (not data) from the TMA coordinate tensor;
    `group_modes` presents the whole 2-D tile as the single mode `tma_partition` splits for the atom.
    The CTA coordinate 0 and size-one CTA layout mean "one CTA, no multicast"; they do not pick a tile.
    """
    tile_coordinates = cute.local_tile(coordinate_view, tile, tile_coord)
    shared_part, global_part = cpasync.tma_partition(
        load_atom,
        0,
        cute.make_layout(1),
        cute.group_modes(shared_tile, 0, 2),
        cute.group_modes(tile_coordinates, 0, 2),
    )
    return global_part, shared_part


def allocate_tile_and_barrier(plan, shared_layout: cute.ComposedLayout, element_type):
    """One shared tile and its barrier, in the plan's order: the tile first, at offset 0 of the
    1024-aligned dynamic shared memory, then the 8-byte barrier, so the launch requests exactly
    `plan.smem_bytes`. Returns (raw tile pointer, tile tensor through the swizzle, barrier)."""
    smem = cutlass.memory.SmemAllocator()
    tile_ptr = smem.allocate(plan.expected_tx_bytes, byte_alignment=plan.tile_alignment)
    shared_tile = cute.make_tensor(
        cute.recast_ptr(tile_ptr, shared_layout.inner, dtype=element_type), shared_layout.outer
    )
    return tile_ptr, shared_tile, smem.allocate_array(cutlass.Int64, 1)


@cute.jit
def init_load_barrier(barrier: cute.Pointer):
    """One thread initialises the barrier for one arrival; the fence and block barrier make the
    initialisation visible before any thread (or the TMA unit) uses it.

    `elect_one` elects one thread *per warp*: this is once per block only because the block is
    one warp. Multi-warp kernels must guard it by warp index as well."""
    with cute.arch.elect_one():
        cute.arch.mbarrier_init(barrier, 1)
    cute.arch.mbarrier_init_fence()
    cute.arch.barrier()


@cute.jit
def issue_tile_load(
    load_atom: cute.CopyAtom,
    global_part: cute.Tensor,
    shared_part: cute.Tensor,
    barrier: cute.Pointer,
    expected_tx_bytes: cutlass.Constexpr,
    multicast_mask=None,
):
    """Arrive once and declare the payload, then start the TMA copy that completes those bytes
    (a multicast atom's copy goes to every CTA `multicast_mask` names)."""
    with cute.arch.elect_one():
        cute.arch.mbarrier_arrive_and_expect_tx(barrier, expected_tx_bytes)
    issue_tile_copy(load_atom, global_part, shared_part, barrier, multicast_mask)


@cute.jit
def issue_tile_copy(
    load_atom: cute.CopyAtom,
    global_part: cute.Tensor,
    shared_part: cute.Tensor,
    barrier: cute.Pointer,
    multicast_mask=None,
    cache_policy=None,
):
    """Start a TMA copy whose bytes complete on `barrier` (declared there already): into every CTA
    `multicast_mask` names with a multicast atom; `cache_policy`: an L2 eviction hint, one of
    `plan.L2_HINTS`.

    The copy is not wrapped in `elect_one`: the DSL issues TMA copies from one thread itself,
    and electing around it can deadlock."""
    hint = {} if cutlass.const_expr(cache_policy is None) else {"cache_policy": cutlass.Int64(cache_policy)}
    if cutlass.const_expr(multicast_mask is None):
        cute.copy(load_atom, global_part, shared_part, tma_bar_ptr=barrier, **hint)
    else:
        cute.copy(load_atom, global_part, shared_part, tma_bar_ptr=barrier, mcast_mask=multicast_mask, **hint)


def combine_row_shares(total, threads_per_row: int):
    """A row's sum from the partial sums of the `threads_per_row` adjacent lanes that share it
    (`RowSumMapping`), by butterfly shuffles: every one of those lanes gets the whole."""
    width = threads_per_row // 2
    while width > 0:
        total += cute.arch.shuffle_sync_bfly(total, width)
        width //= 2
    return total
