"""Every hardware and TMA number tmakit relies on, once, with where it comes from. Pure Python.

The plans, the validation, the CPU model, the kernels and the benchmarks read these names; none
of them writes the number again.
"""

from __future__ import annotations

# -- TMA tensor maps (cuTensorMapEncodeTiled's limits; PTX ISA, cp.async.bulk.tensor) ----------
MAX_RANK = 5  # dimensions a TMA tensor map can have
MAX_TENSOR_BYTES = (1 << 63) - 1  # torch sizes a tensor in signed 64-bit bytes
ELEMENT_SIZES = (1, 2, 4, 8)  # bytes; TMA's data types are 8, 16, 32 and 64 bits wide
MAX_GLOBAL_EXTENT = 1 << 32  # globalDim[i] <= 2^32
MAX_GLOBAL_STRIDE_BYTES = 1 << 40  # globalStrides[i] < 2^40
TMA_COORDINATE_RANGE = (-(1 << 31), (1 << 31) - 1)  # box coordinates are signed 32-bit
MAX_BOX_EXTENT = 256  # elements per box dimension (boxDim); the DSL would split a larger tile silently
GLOBAL_STRIDE_ALIGN = 16  # bytes: every global stride but the innermost
GLOBAL_BASE_ALIGN = 16  # bytes: the tensor's base address
INNER_BOX_ALIGN = 16  # bytes: the box's innermost extent
SWIZZLE_MODES = (0, 32, 64, 128)  # bytes; 0 is no swizzle (the seed's identity Swizzle(0,4,3))
# B of CuTe's Swizzle(B, 4, 3) on byte addresses for each TMA swizzle mode.
SWIZZLE_BITS = {0: 0, 32: 1, 64: 2, 128: 3}
SHARED_TILE_ALIGN = 128  # bytes: a TMA shared-memory destination
# Bytes a TMA shared-memory destination must be aligned to, by swizzle mode: TMA swizzles by the
# shared address, and the pattern repeats every 8 spans (256, 512, 1024 bytes), so a swizzled
# destination starts at a repeat (CUDA C++ Programming Guide, the multi-dimensional TMA alignment
# table). A part of a tile (a multicast slice) needs only its mode's, not the largest.
SWIZZLE_DESTINATION_ALIGN = {0: SHARED_TILE_ALIGN, 32: 256, 64: 512, 128: 1024}
# bytes: where tmakit places a whole swizzled tile, whatever its mode (the largest repeat)
SWIZZLED_TILE_ALIGN = SWIZZLE_DESTINATION_ALIGN[128]
STAGING_TILE_ALIGN = 1024  # bytes: a transposing copy's staging tiles, which TMA stores read
VECTOR_BYTES = 16  # one 16-byte shared-memory access: the chunk the consumer mappings move
BANK_ROW_BYTES = 128  # 32 banks x 4 bytes: rows a multiple of this long all start in bank 0

# -- TMA im2col loads (cuTensorMapEncodeIm2col; PTX ISA, cp.async.bulk.tensor .im2col) --------------
# The pixel box's corners are signed fields whose width shrinks as the rank grows: by tensor rank,
# the range each of lower corner and upper corner must lie in.
IM2COL_CORNER_RANGE = {
    3: (-(1 << 15), (1 << 15) - 1),
    4: (-(1 << 7), (1 << 7) - 1),
    5: (-(1 << 4), (1 << 4) - 1),
}
IM2COL_OFFSET_MAX = (1 << 16) - 1  # a tap's offset (im2colOffsets), 16 bits: corners in range bind first
MAX_ELEMENT_STRIDE = 8  # elementStrides[i] (the convolution stride) is 1..8
MAX_CHANNELS_PER_PIXEL = 256  # channelsPerPixel: elements of the inner (channel) box extent
MAX_PIXELS_PER_COLUMN = 1024  # pixelsPerColumn: pixels of one im2col box

# -- a Hopper (sm_90) block and grid (CUDA's launch limits) ---------------------------------------
WARP_THREADS = 32
SMEM_PER_BLOCK = 227 * 1024  # bytes of shared memory one block may request
SMEM_PER_SM = 228 * 1024  # bytes of shared memory one SM holds (each resident block reserves 1 KiB of it)
MBARRIER_BYTES = 8  # one 64-bit mbarrier
MAX_TX_BYTES = (1 << 20) - 1  # an mbarrier phase's transaction count (tx-count range)
# CTAs of a portable thread-block cluster: every sm_90 launch may use up to 8; 16 needs the
# kernel's non-portable-cluster-size attribute, which tmakit's launches do not set.
MAX_CLUSTER_SIZE = 8
MAX_CONSUMER_WARPS = 31  # a block of at most 1024 threads: one producer warp + 31
MAX_GRID_X = (1 << 31) - 1  # gridDim.x
MAX_GRID_Y = 65535  # gridDim.y, where the tile-load kernel puts the batch
MAX_DEVICE_INT = (1 << 31) - 1  # the kernels count tiles and blocks in 32-bit device integers
# A kernel compiled for one exact shape (the verifier's, the benchmarks', the plain launch path's)
# wraps its offsets past 2^32 elements: on the H200, 2^32 were exact and 2^33 silently wrong. The
# shape-generic kernels, which take extents at run time, were exact at 2^35.
MAX_SPECIALISED_ELEMENTS = 1 << 32

# -- L2 cache policies for TMA's `.L2::cache_hint` (CUTLASS's `TMA::CacheHintSm90`) --------------
L2_HINTS = {
    "none": None,
    "evict_first": 0x12F0000000000000,
    "evict_normal": 0x1000000000000000,
    "evict_last": 0x14F0000000000000,
}

# -- the card tmakit is measured on (used where no GPU reports its own) --------------------------
# The Hopper GPUs `tmakit plan`/`explain --gpu` plan for: the name the driver gives, SMs, L2 bytes.
GPUS: dict[str, tuple[str, int, int]] = {
    "h100": ("NVIDIA H100 80GB HBM3", 132, 50 * 1024 * 1024),
    "h200": ("NVIDIA H200", 132, 60 * 1024 * 1024),
}
DEFAULT_GPU = "h200"  # what a plan assumes where no GPU is named or at hand
_, DEFAULT_SM_COUNT, DEFAULT_L2_BYTES = GPUS[DEFAULT_GPU]
# The (SM count, L2 bytes) a call is planned for where its tensors are on no GPU, so that options
# its planner refuses raise there as on a Hopper GPU; the L2 picks only defaults, never a refusal.
DEFAULT_DEVICE_FACTS = (DEFAULT_SM_COUNT, DEFAULT_L2_BYTES)
# Datasheet DRAM bandwidth in bytes/s, by a substring of the device name.
PEAK_BANDWIDTH = {"H200": 4.8e12, "H100 80GB HBM3": 3.35e12, "H100 SXM": 3.35e12}

# -- verification ---------------------------------------------------------------------------------
# Outputs are filled with every bit set before a kernel runs: -1 as a signed integer of any width.
# Position-hashed inputs keep the bit below the sign clear, so no input value equals the poison.
POISON = -1
