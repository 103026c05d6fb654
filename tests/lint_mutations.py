"""The lint's mutation corpus: each record a bug put into the captured PTX (or MLIR, or the
tensors' element types) of one of tmakit's kernel variants (`tmakit.linter.kernels`) or of another
project's kernel (`lint_external`), modelled on a public bug report or DSL change it cites, with
the finding the lint must report: its check and the instruction it names (`target`, a pattern of
the mutated PTX's line).

An edit is (pattern, replacement): the pattern must match the captured text exactly once, so a
change in what the DSL emits fails here loudly instead of mutating nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Citation:
    """A public report: `repo` (owner/name), its issue or pull request `number` and `title` (as
    the tracker has them), and `point`: what in it the mutation is modelled on."""

    repo: str
    number: int
    title: str
    point: str

    @property
    def url(self) -> str:
        """The report's page (GitHub sends an issue number that is a pull request on to it)."""
        return f"https://github.com/{self.repo}/issues/{self.number}"


@dataclass(frozen=True)
class Mutation:
    """One bug: the `variant` whose capture it edits (a name of `tmakit.linter.kernels.variants()`
    or of `lint_external.EXTERNAL`), what it is (`what`), the reports it is
    modelled on (`cites`), the edits to the PTX and the MLIR, the tensors' element types where
    the bug is a signedness (`tensor_elements`), and the finding expected: `check` at the line
    `target` matches in the mutated PTX."""

    name: str
    variant: str
    what: str
    cites: tuple[Citation, ...]
    check: str
    target: str
    ptx: tuple[tuple[str, str], ...] = ()
    mlir: tuple[tuple[str, str], ...] = ()
    tensor_elements: tuple[str | None, ...] | None = None


def edited(text: str, edits: tuple[tuple[str, str], ...]) -> str:
    """`text` with each (pattern, replacement) applied; each pattern matches exactly once (an
    MLIR type is matched everywhere it is printed: `(?g)` at the pattern's start)."""
    for pattern, replacement in edits:
        every = pattern.startswith("(?g)")
        regex = re.compile(pattern.removeprefix("(?g)"), re.MULTILINE)
        text, count = regex.subn(replacement, text)
        assert count >= 1 if every else count == 1, f"{pattern!r} matched {count} times"
    return text


# The reports the corpus is modelled on, each found in its project's public tracker.
UNDERCOUNT_SPLIT = Citation(
    "tile-ai/tilelang",
    2182,
    "[Feature] Support Blackwell FP4(float4_e2m1fn) GEMM for SM100 & SM120",
    "review: expect_tx counts one slice of a tile split over several TMA instructions; the wait "
    "completes too early",
)
SHARED_BARRIER_SPLIT = Citation(
    "facebookexperimental/triton",
    971,
    "[AutoWS] Prevent barrier reuse with TMA splitting",
    "two loads sharing a barrier: a split load changes the bytes the barrier must expect",
)
SHARED_BARRIER_FIX = Citation(
    "facebookexperimental/triton",
    972,
    "[AutoWS] Fix Barrier Reuse with TMA load splits",
    "the barrier's expected count no longer matches the loads that complete on it",
)
DESCRIPTOR_HANG = Citation(
    "triton-lang/triton",
    6354,
    "Loading from TMA descriptor hangs",
    "a TMA load whose barrier wait never returns (SYNCS.PHASECHK spinning at the kernel's end)",
)
OOB_BOXES = Citation(
    "pytorch/pytorch",
    183950,
    "Add CuTeDSL scatter_add override for the expanded-1D-index pattern",
    "2d-tiled TMA with out-of-bounds boxes for partial tiles: the whole box lands, zero-filled",
)
PER_CTA_BYTES = Citation(
    "NVIDIA/cutlass",
    3314,
    "[docs/examples] Blackwell tutorial 04 (2SM MMA): fix stale B-operand print annotations (the 2x1SM "
    "atom splits B N/2-per-CTA) and document the expect-tx pitfalls that deadlock",
    "each CTA's expect_tx must count the bytes that land in it, not the slice it issues",
)
ALL_TARGETING_OPS = Citation(
    "flashinfer-ai/flashinfer-bench",
    183,
    "Kernel Skills",
    "review of a cluster matmul: expected_bytes must match all TMA ops that target the barrier",
)
CLUSTER_OVERCOUNT = Citation(
    "tile-ai/tilelang",
    2644,
    "[Fuzzer][Candidates] Blackwell / sm_100 (tcgen05) source-only bug-candidate list",
    "expect_transaction = total_bytes * cluster_size where fewer CTAs' bytes arrive: the wait blocks",
)
STALE_BARRIER = Citation(
    "tile-ai/tilelang",
    1828,
    "[BugFix] Reset cur_expect_idx_ correctly for multi-kernel TMA barrier injection",
    "stale barrier indices: a kernel's TMA loads signal the wrong mbarrier",
)
NO_EXPECT = Citation(
    "NVIDIA/cutlass",
    2365,
    "[BUG] Illegal instruction on H100 TMA",
    "a TMA load whose barrier was never given its bytes by an arrive.expect_tx; the wait hangs",
)
INIT_TX_BYTES = Citation(
    "NVIDIA/cutlass",
    2364,
    "[BUG] Unspecified error when initializing mbar on H100 w/ CuTe Python DSL",
    "mbarrier_init_tx_bytes is an arrive with bytes, not the declaration before the copy",
)
PROXY_FENCES = Citation(
    "MoonshotAI/FlashKDA",
    24,
    "Missing proxy fences around TMA accesses (smem→TMA store, mbarrier init)",
    "mbarrier.init not fenced before the async proxy (TMA) completes on the barrier",
)
TE_SYNC = Citation(
    "NVIDIA/TransformerEngine",
    3417,
    "[Common] Fix TMA synchronization in quantization kernels",
    "incomplete TMA store completion handling and missing synchronization around barrier init",
)
ELECTED_FENCE = Citation(
    "triton-lang/triton",
    11498,
    "[FIX] Fence mbarrier initialization from its elected issuer",
    "the fence must run in the thread that ran mbarrier.init",
)
LEADER_FENCE = Citation(
    "mlc-ai/TIRx-kernels",
    9,
    "fix(gemm): fence NVFP4 mbarrier initialization",
    "issue fence.mbarrier_init from the same leader that initialises the barriers",
)
CLUSTER_FENCE = Citation(
    "facebookexperimental/triton",
    1240,
    "[TLX] Implement implicit/explicit mbar init cluster fence",
    "a cluster's barriers need the init fence before the cluster barrier publishes them",
)
STORE_IN_LOOP = Citation(
    "NVIDIA/Fuser",
    5448,
    "Fix bug in insertWarAsyncWait",
    "TMA stores left without their commit and wait by a short circuit in the lowering",
)
BULK_COMMIT = Citation(
    "triton-lang/triton",
    5738,
    "[NVIDIA] Use correct commit type for TMA",
    "TMA must use cp.async.bulk.commit_group rather than cp.async.commit_group",
)
WAIT_ONE = Citation(
    "deepseek-ai/DeepEP",
    657,
    "[DeepEP V2] tma_copy data race",
    "wait_group 1 returns with the newest store still reading the shared memory",
)
OUT_OF_CLUSTER = Citation(
    "NVIDIA/cutlass",
    3658,
    '[BUG][CuTe DSL] PipelineTmaUmma arrival masks include an out-of-cluster "v-peer" bit when the '
    "cluster's v-extent is 1, causing CGA out-of-range faults (Xid 13)",
    "a multicast mask with a bit for a CTA rank the cluster does not have",
)
ADD_AS_AND = Citation(
    "NVIDIA/cutlass",
    3240,
    "[BUG] CuTe DSL 4.5.1: CopyReduceBulkTensorTileS2GOp(ReductionOp.ADD) lowers to TMA AND",
    "the reduce atom built for ADD emits cp.reduce.async.bulk.tensor .and",
)
NO_REDUCE_FORM = Citation(
    "tile-ai/tilelang",
    2583,
    "[BUG][Fuzzer][diagnostic] `T.atomic_add(use_tma=True)` into an `int16` dest compiles then dies at "
    "launch with `cudaErrorIllegalInstruction` instead of rejecting the dtype",
    "a TMA reduce emitted for a dtype the instruction has no form of",
)
SIGNED_MIN_MAX = Citation(
    "swiftlang/swift",
    91176,
    "`Atomic.min` / `Atomic.max` use signed comparison on unsigned integer types",
    "min/max lowered with the other signedness: wrong once a value crosses the sign bit",
)
UNSIGNED_ATOMICS = Citation(
    "taichi-dev/taichi",
    3779,
    "[llvm] [bug] Support atomic min/max for unsigned int type",
    "atomic min/max of unsigned ints lowered as the signed operation",
)
DESCRIPTOR_TYPE = Citation(
    "triton-lang/triton",
    5699,
    "Implement TMA store reduction for add, min, max",
    "the reduce's element type is the TMA descriptor's, which had to be the element type",
)
MISSING_OP = Citation(
    "flashinfer-ai/flashinfer",
    4526,
    "feat: CuTe DSL kernels for Rubin (SM107) and batched FP8 GEMM for Blackwell",
    "review: a hand-written cp.reduce.async.bulk ... .bulk_group.noftz.f16 without its .add",
)

CLAMPED_BOX = Citation(
    "mirage-project/mirage",
    705,
    "fix: clamp TMA box dims for splitk linear on SM100 to fix deadlock",
    "expect_tx computed from a clamped tile (1024 bytes) while TMA lands the full box (2048): the "
    "barrier's phase never flips and the consumer warp waits forever",
)
EXPECT_SIZE = Citation(
    "triton-lang/triton",
    9046,
    "[CONSAN] Fix for false positive deadlock detection",
    "treating barrier_expect as an arrive still allows deadlocks caused by a wrong transfer size in "
    "the expect",
)
CLUSTER_INIT_FENCE = Citation(
    "triton-lang/triton",
    9076,
    "[Gluon] Expose finer grained cluster fences",
    "fence_cluster_init: every CTA must see the mbarriers' initialisation before multi-CTA ops",
)
MASK_PER_CLUSTER = Citation(
    "facebookexperimental/triton",
    783,
    "[10/N][TLX-2cta] Support cluster sizes larger than 2",
    "a multicast mask fixed for one cluster shape used in another: the wrong CTAs signalled, a hang",
)
NO_F32_MIN_MAX = Citation(
    "pytorch/pytorch",
    183594,
    "TMA scatter_reduce min/max for sm_90+ (CUDA 12.8+)",
    "cp.reduce.async.bulk's type matrix: min/max have f16, bf16, s32, s64 forms and no f32",
)
NO_F64_TENSOR_REDUCE = Citation(
    "triton-lang/triton",
    10013,
    "[BACKEND] Make TMAReduce more robust",
    "an f64 descriptor_reduce add: the TMA tensor reduce has no such form and must not be emitted",
)
REJECT_REDUCE_DTYPES = Citation(
    "tile-ai/tilelang",
    2830,
    "[BugFix] Reject unsupported TMA atomic add dtypes",
    "the accepted set is the tensor reduce's (f16, bf16, f32, i32, u32, u64); float64 is rejected",
)
DRAIN_AT_EXIT = Citation(
    "facebookexperimental/triton",
    3286,
    "[WSTMAStoreLowering] [store-wait] Rotate FA backward TMA store waits by staging slot (#3286)",
    "waits rotated to each staging slot's reuse must still drain the remaining groups at loop exit",
)
PENDING_COUNT = Citation(
    "triton-lang/triton",
    10567,
    "[TMA] Add a token to the lower local_to_global to allow more flexible wait pending counts",
    "a store wait's pending count chosen without knowing which store must finish is unsafe",
)
STRADDLING_CLUSTER = Citation(
    "deepseek-ai/DeepGEMM",
    415,
    "Fix SM90 k-grouped GEMM hang and silent corruption when TMA multicast clusters straddle group "
    "boundaries",
    "only one CTA of the pair multicasts B: the other's full barrier never receives its B bytes, a hang",
)
UNCOMMITTED_REDUCE = Citation(
    "NVIDIA/TensorRT-LLM",
    18498,
    "[None][feat] Add SM107 NVFP4 CuTe DSL fused MoE kernels and integration",
    "review: the bulk scatter-add is never committed or waited on while the next tile overwrites its "
    "single shared-memory buffer",
)
REDUCE_DTYPE = Citation(
    "jax-ml/jax",
    27086,
    "[mosaic-gpu] add reduction support in copy_smem_to_gmem",
    "a TMA reduction needs the data's exact dtype: a wrong one hangs, computes wrong results or is an "
    "illegal instruction",
)

EXPECT = r"^\s*mbarrier\.arrive\.expect_tx"
FIRST_INIT = r"^\s*mbarrier\.init"

WAIT_PARITY_COMPLETED = Citation(
    "tile-ai/tilelang",
    3087,
    "[Bugfix] Fix wait parity for explicit mbarriers in pipelined loops",
    "a wait asked for a parity that had already completed: it returned at once and the next pass "
    "overwrote a stage still being read",
)
START_PHASE = Citation(
    "Dao-AILab/flash-attention",
    1317,
    "In the FlashAttention 3 (FA3) code, where is the barrier_O phase specified as 1 or 0?",
    "a barrier's first wait at the wrong phase: one start works, the other is wrong",
)
RING_PARITY_LAW = Citation(
    "NVIDIA/Fuser",
    3155,
    "Use parity to wait for mbarrier",
    "a ring's wait parity is (i / stages) % 2 of the loop index: it flips once a wrap, not a pass",
)
UNDERARRIVAL_DEADLOCK = Citation(
    "triton-lang/triton",
    8285,
    "[ConSan] Deadlock Detection",
    "deadlocks where a barrier's phase never flips: its arrivals fall short when the wait comes",
)
ARRIVE_BEFORE_WAIT = Citation(
    "triton-lang/triton",
    10035,
    "[nvidia] Always insert bar sync before all mbarrier arrives",
    "a ring's partitions deadlock when an arrive and the waits of its phase come in the wrong order",
)

MUTATIONS: list[Mutation] = [
    Mutation(
        "expect-tx-one-box-short",
        "load-ring",
        "a stage's expect_tx declares half the 64x256 fp16 tile: the phase completes before the copy lands",
        (UNDERCOUNT_SPLIT,),
        "expect-tx",
        EXPECT,
        ptx=((r"(mov\.b32\s+%r\d+, )32768;", r"\g<1>16384;"),),
    ),
    Mutation(
        "expect-tx-one-of-two-boxes",
        "reduce-ring",
        "the load-add-store ring's stage holds two tiles on one barrier; expect_tx declares one",
        (SHARED_BARRIER_SPLIT,),
        "expect-tx",
        EXPECT,
        ptx=((r"(mov\.b32\s+%r\d+, )16384;", r"\g<1>8192;"),),
    ),
    Mutation(
        "expect-tx-one-box-over",
        "copy",
        "expect_tx declares a box more than the stage's copy lands: the wait never returns",
        (DESCRIPTOR_HANG,),
        "expect-tx",
        EXPECT,
        ptx=((r"(mov\.b32\s+%r\d+, )8192;", r"\g<1>16384;"),),
    ),
    Mutation(
        "edge-box-counted-as-its-valid-bytes",
        "copy",
        "the last row tile of a 1000-row tensor in 64-row boxes declares its 40 valid rows (5120 bytes); "
        "TMA lands the whole box, zero-filled past the edge (8192 bytes)",
        (OOB_BOXES,),
        "expect-tx",
        EXPECT,
        ptx=((r"(mov\.b32\s+%r\d+, )8192;", r"\g<1>5120;"),),
    ),
    Mutation(
        "expect-tx-plus-the-barrier",
        "load",
        "the seed's expect_tx counts the tile and its 8-byte barrier (32776): `tmakit check --mistake "
        "expect-more`, as the compiled kernel would carry it",
        (DESCRIPTOR_HANG,),
        "expect-tx",
        EXPECT,
        ptx=((r"(mov\.b32\s+%r\d+, )32768;", r"\g<1>32776;"),),
    ),
    Mutation(
        "multicast-expects-its-own-slice",
        "multicast-ring",
        "each CTA of the 2x2 cluster declares only the slice it issues (8192), though every CTA's slice "
        "lands in every barrier (32768)",
        (PER_CTA_BYTES, ALL_TARGETING_OPS),
        "expect-tx",
        EXPECT,
        ptx=((r"(mov\.b32\s+%r\d+, )32768;", r"\g<1>8192;"),),
    ),
    Mutation(
        "multicast-expect-times-the-cluster",
        "multicast",
        "expect_tx scaled by the cluster size on top of the tile multicast already counts (65536)",
        (CLUSTER_OVERCOUNT,),
        "expect-tx",
        EXPECT,
        ptx=((r"(mov\.b32\s+%r\d+, )32768;", r"\g<1>65536;"),),
    ),
    Mutation(
        "copy-dropped-from-a-two-copy-stage",
        "reduce-ring",
        "the destination tile's copy is dropped from the ring's stage; the barrier still declares both tiles",
        (SHARED_BARRIER_FIX,),
        "expect-tx",
        EXPECT,
        ptx=((r"^\s*cp\.async\.bulk\.tensor\.2d\.shared::cta\.global[^\n]*\[%r\d+\+65536\][^\n]*\n", ""),),
    ),
    Mutation(
        "copy-completes-on-another-barrier",
        "load-ring",
        "the stage's copy completes on the empty barrier the producer waits on, not the full barrier",
        (STALE_BARRIER,),
        "orphan-copy",
        r"^\s*cp\.async\.bulk\.tensor",
        ptx=((r"(cp\.async\.bulk\.tensor[^\n]*\], )\[%r4\](, %rd\d+;)", r"\g<1>[%r51]\g<2>"),),
    ),
    Mutation(
        "expect-tx-dropped",
        "multicast-baseline",
        "no expect_tx declares the copy's bytes: its barrier's phase completes on the arrival alone",
        (NO_EXPECT, INIT_TX_BYTES),
        "orphan-copy",
        r"^\s*cp\.async\.bulk\.tensor",
        ptx=((r"^\s*mbarrier\.arrive\.expect_tx[^\n]*\n", ""),),
    ),
    Mutation(
        "init-fence-dropped",
        "load",
        "the barrier's initialisation is not fenced before the TMA copy completes on it",
        (PROXY_FENCES, TE_SYNC),
        "init-fence",
        FIRST_INIT,
        ptx=((r"^\s*fence\.mbarrier_init\.release\.cluster;\n", ""),),
    ),
    Mutation(
        "init-fence-on-the-other-lanes",
        "load",
        "the fence runs only in the lanes that did not initialise the barrier",
        (ELECTED_FENCE, LEADER_FENCE),
        "init-fence",
        FIRST_INIT,
        ptx=(
            (
                r"^(\s*)fence\.mbarrier_init\.release\.cluster;",
                r"\g<1>@%p2 fence.mbarrier_init.release.cluster;",
            ),
        ),
    ),
    Mutation(
        "cluster-init-fence-dropped",
        "multicast-ring",
        "a cluster's barriers initialised and published by the cluster barrier alone, no fence",
        (CLUSTER_FENCE,),
        "init-fence",
        FIRST_INIT,
        ptx=((r"^\s*fence\.mbarrier_init\.release\.cluster;\n", ""),),
    ),
    Mutation(
        "store-commit-dropped",
        "copy",
        "the ring's TMA store is never committed to a bulk group, so no wait covers it",
        (STORE_IN_LOOP,),
        "store-groups",
        r"^\s*cp\.async\.bulk\.tensor\.3d\.global",
        ptx=((r"^\s*cp\.async\.bulk\.commit_group;\n", ""),),
    ),
    Mutation(
        "non-bulk-commit",
        "reduce",
        "the reduce store's group committed with cp.async.commit_group (the non-bulk cp.async's)",
        (BULK_COMMIT,),
        "store-groups",
        r"^\s*cp\.reduce\.async\.bulk\.tensor",
        ptx=((r"cp\.async\.bulk\.commit_group;", "cp.async.commit_group;"),),
    ),
    Mutation(
        "exit-wait-leaves-a-group",
        "rows-scatter",
        "the exit's wait_group.read 1 leaves the newest row store reading shared memory",
        (WAIT_ONE,),
        "store-groups",
        r"^\s*cp\.async\.bulk\.global\.shared::cta\.bulk_group",
        ptx=((r"(cp\.async\.bulk\.wait_group\.read\s+)0;", r"\g<1>1;"),),
    ),
    Mutation(
        "exit-wait-dropped",
        "transpose",
        "the last staging tile's store is committed but the kernel exits without waiting for it",
        (TE_SYNC,),
        "store-groups",
        r"^\s*cp\.async\.bulk\.tensor\.2d\.global",
        ptx=((r"^\s*cp\.async\.bulk\.wait_group\.read\s+0;\n(\$L__BB0_\d+:\n\s*ret;)", r"\g<1>"),),
    ),
    Mutation(
        "multicast-mask-outside-the-cluster",
        "multicast",
        "the 2-CTA cluster's multicast mask names CTA rank 2",
        (OUT_OF_CLUSTER,),
        "multicast-mask",
        r"^\s*cp\.async\.bulk\.tensor[^\n]*multicast",
        ptx=((r"(mov\.b16\s+%rs\d+, )3;", r"\g<1>7;"),),
    ),
    Mutation(
        "dot-mask-outside-the-cluster",
        "cluster-dot-3x1",
        "the 3-CTA cluster dot's X multicast names rank 3 too",
        (OUT_OF_CLUSTER,),
        "multicast-mask",
        r"^\s*cp\.async\.bulk\.tensor[^\n]*multicast",
        ptx=((r"(mov\.b16\s+%rs\d+, )7;", r"\g<1>15;"),),
    ),
    Mutation(
        "reduce-add-lowered-to-and",
        "reduce",
        "the ADD reduce atom's store lowered to .and (CuTe DSL 4.5.1's enum mix-up)",
        (ADD_AS_AND,),
        "reduce-type",
        r"^\s*cp\.reduce\.async\.bulk\.tensor",
        ptx=((r"(cp\.reduce\.async\.bulk\.tensor\.2d\.global\.shared::cta)\.add\.", r"\g<1>.and."),),
    ),
    Mutation(
        "reduce-of-a-type-without-the-op",
        "reduce",
        "a TMA reduce add built for a 16-bit integer tensor: cp.reduce.async.bulk.tensor has no such add",
        (NO_REDUCE_FORM,),
        "reduce-type",
        r"^\s*cp\.reduce\.async\.bulk\.tensor",
        mlir=((r"(?g)non_exec_tiled_tma_reduce<ADD, f16,", "non_exec_tiled_tma_reduce<ADD, i16,"),),
    ),
    Mutation(
        "signed-min-typed-unsigned",
        "rows-min",
        "an int32 rows min lowered to .min.u32: negative rows compare as large ones",
        (SIGNED_MIN_MAX, UNSIGNED_ATOMICS),
        "reduce-type",
        r"^\s*cp\.reduce\.async\.bulk\.global",
        ptx=((r"\.min\.s32", ".min.u32"),),
    ),
    Mutation(
        "signed-max-through-an-unsigned-map",
        "reduce-max",
        "an Int32 tensor's TMA max through the tensor map the DSL encodes for i32 (U32): the hardware "
        "compares as unsigned",
        (DESCRIPTOR_TYPE, SIGNED_MIN_MAX),
        "reduce-type",
        r"^\s*cp\.reduce\.async\.bulk\.tensor",
        tensor_elements=("Int32", "Int32", "Int32"),
    ),
    Mutation(
        "bulk-reduce-of-another-type",
        "rows-add",
        "a bf16 rows add stored with the f16 bulk reduce",
        (NO_REDUCE_FORM,),
        "reduce-type",
        r"^\s*cp\.reduce\.async\.bulk\.global",
        ptx=((r"\.add\.noftz\.bf16", ".add.noftz.f16"),),
    ),
    Mutation(
        "bulk-reduce-without-its-op",
        "rows-add",
        "the bulk reduce's instruction written without its op (.bulk_group.noftz.bf16)",
        (MISSING_OP,),
        "reduce-type",
        r"^\s*cp\.reduce\.async\.bulk\.global",
        ptx=((r"\.bulk_group\.add\.noftz\.bf16", ".bulk_group.noftz.bf16"),),
    ),
    Mutation(
        "dot-expect-tx-of-a-clamped-box",
        "cluster-dot",
        "the 2x1 cluster dot's stage declares half its tiles' bytes (16384 of 32768), as an expect_tx "
        "computed from a clamped tile while the descriptor's box lands whole",
        (CLAMPED_BOX,),
        "expect-tx",
        EXPECT,
        ptx=((r"(mov\.b32\s+%r\d+, )32768;", r"\g<1>16384;"),),
    ),
    Mutation(
        "dot-3x1-expect-tx-of-a-wider-tile",
        "cluster-dot-3x1",
        "the 3-CTA cluster dot's stage declares 16384 bytes where its copies land 12288: the phase "
        "never completes",
        (EXPECT_SIZE,),
        "expect-tx",
        EXPECT,
        ptx=((r"(mov\.b32\s+%r\d+, )12288;", r"\g<1>16384;"),),
    ),
    Mutation(
        "cluster-dot-init-fence-dropped",
        "cluster-dot",
        "the cluster dot's eight barriers published by the cluster barrier with no fence.mbarrier_init",
        (CLUSTER_INIT_FENCE, CLUSTER_FENCE),
        "init-fence",
        FIRST_INIT,
        ptx=((r"^\s*fence\.mbarrier_init\.release\.cluster;\n", ""),),
    ),
    Mutation(
        "cluster-init-fence-after-first-use",
        "multicast-lanes",
        "the fence moved past the first expect_tx: the multicast ring's barriers are used before their "
        "initialisation is visible to the cluster",
        (CLUSTER_INIT_FENCE, LEADER_FENCE),
        "init-fence",
        FIRST_INIT,
        ptx=(
            (r"^\s*fence\.mbarrier_init\.release\.cluster;\n", ""),
            (
                r"(^\s*mbarrier\.arrive\.expect_tx[^\n]*\n)",
                r"\g<1>\tfence.mbarrier_init.release.cluster;\n",
            ),
        ),
    ),
    Mutation(
        "ring-mask-for-a-larger-cluster",
        "multicast-ring",
        "the 2x2 cluster's multicast mask written for a cluster of 8 (0xff): ranks 4 to 7 do not exist",
        (MASK_PER_CLUSTER, OUT_OF_CLUSTER),
        "multicast-mask",
        r"^\s*cp\.async\.bulk\.tensor[^\n]*multicast",
        ptx=((r"(mov\.b16\s+%rs\d+, )15;", r"\g<1>255;"),),
    ),
    Mutation(
        "bulk-max-on-f32",
        "rows-max",
        "the rows max stored with cp.reduce.async.bulk .max.f32: the bulk reduce has no f32 max",
        (NO_F32_MIN_MAX,),
        "reduce-type",
        r"^\s*cp\.reduce\.async\.bulk\.global",
        ptx=((r"\.max\.s64", ".max.f32"),),
    ),
    Mutation(
        "tensor-reduce-add-of-f64",
        "reduce",
        "the tensor reduce add's atom built for f64: cp.reduce.async.bulk.tensor .add has no f64 form",
        (NO_F64_TENSOR_REDUCE, REJECT_REDUCE_DTYPES),
        "reduce-type",
        r"^\s*cp\.reduce\.async\.bulk\.tensor",
        mlir=((r"(?g)non_exec_tiled_tma_reduce<ADD, f16,", "non_exec_tiled_tma_reduce<ADD, f64,"),),
    ),
    Mutation(
        "dispatch-exit-wait-leaves-two-groups",
        "moe-dispatch",
        "the MoE dispatch's exit waits with the ring's steady-state depth (wait_group.read 2): its last "
        "two row stores may still read the shared memory",
        (DRAIN_AT_EXIT, PENDING_COUNT),
        "store-groups",
        r"^\s*cp\.async\.bulk\.global\.shared::cta\.bulk_group",
        ptx=((r"(cp\.async\.bulk\.wait_group\.read\s+)0;", r"\g<1>2;"),),
    ),
    # Other projects' kernels (`lint_external`): the bug as their source would put it in.
    Mutation(
        "gemm-expect-tx-counts-a-only",
        "cutlass-gemm",
        "the CUTLASS GEMM's stages declare A's 16384 bytes, not A's and the multicast B's 32768: a CTA "
        "that does not issue B still receives it",
        (ALL_TARGETING_OPS,),
        "expect-tx",
        EXPECT,
        ptx=((r"(?g)(mov\.b32\s+%r\d+, )32768;", r"\g<1>16384;"),),
    ),
    Mutation(
        "gemm-multicast-to-itself-only",
        "cutlass-gemm",
        "the CUTLASS GEMM's B multicast masked to CTA 0 alone (1, not 3): its peer's barrier never "
        "receives B's other half",
        (STRADDLING_CLUSTER,),
        "expect-tx",
        EXPECT,
        ptx=((r"(?g)(mov\.b16\s+%rs\d+, )3;", r"\g<1>1;"),),
    ),
    Mutation(
        "gemm-mask-with-a-rank-past-the-cluster",
        "cutlass-gemm",
        "the CUTLASS GEMM's B multicast mask for its cluster of 2 with bit 2 set too (7): a CTA rank the "
        "cluster does not have",
        (OUT_OF_CLUSTER,),
        "multicast-mask",
        r"^\s*cp\.async\.bulk\.tensor[^\n]*multicast",
        ptx=((r"(?g)(mov\.b16\s+%rs\d+, )3;", r"\g<1>7;"),),
    ),
    Mutation(
        "quack-expect-tx-counts-the-issued-slice",
        "quack-gemm",
        "QuACK's GEMM declares the B slice each CTA issues (A 16384 + 12288), not the two slices of the "
        "pair that land in it (40960)",
        (PER_CTA_BYTES,),
        "expect-tx",
        r"^\s*mbarrier\.arrive\.expect_tx\.shared\.b64",
        ptx=((r"(mov\.b32\s+%r\d+, )40960;", r"\g<1>28672;"),),
    ),
    Mutation(
        "scatter-add-edge-chunk-counted-as-its-valid-bytes",
        "torch-scatter-add",
        "torch's scatter_add declares the last chunk's valid bytes of a 2000-byte row (464), where TMA "
        "lands the whole 512-byte box, zero-filled past the row",
        (OOB_BOXES,),
        "expect-tx",
        EXPECT,
        ptx=((r"(mov\.b32\s+%r\d+, )512;", r"\g<1>464;"),),
    ),
    Mutation(
        "scatter-add-reduce-never-committed",
        "torch-scatter-add",
        "torch's scatter_add issues its bulk reduce adds without commit_group and wait_group: the next "
        "chunk's load, or the kernel's exit, may reuse the buffer the reduce still reads",
        (UNCOMMITTED_REDUCE,),
        "store-groups",
        r"^\s*cp\.reduce\.async\.bulk\.global",
        ptx=((r"(?g)\s*cp\.async\.bulk\.commit_group;\s*cp\.async\.bulk\.wait_group\s+0;", ""),),
    ),
    Mutation(
        "scatter-add-bf16-reduced-as-f16",
        "torch-scatter-add",
        "torch's scatter_add of bf16 rows reduces them as f16 (.add.noftz.f16): each sum is of the wrong "
        "format's bits",
        (REDUCE_DTYPE,),
        "reduce-type",
        r"^\s*cp\.reduce\.async\.bulk\.global",
        ptx=((r"(?g)\.add\.noftz\.bf16", ".add.noftz.f16"),),
    ),
    Mutation(
        "ring-parity-frozen",
        "copy",
        "the copy ring's phase never advances at a wrap (selp 0, 0): from the second pass of a stage "
        "on, each wait asks for a phase already complete and reads what the last pass left",
        (WAIT_PARITY_COMPLETED, RING_PARITY_LAW),
        "wait-parity",
        r"^\s*mbarrier\.try_wait\.parity",
        ptx=((r"(?g)(selp\.b32\s+%r\d+, )1, 0(, %p\d+;)", r"\g<1>0, 0\g<2>"),),
    ),
    Mutation(
        "ring-parity-every-pass",
        "copy",
        "the copy ring's phase advanced every pass instead of every wrap: stage 1's first wait is at "
        "parity 1 and passes before its tile lands",
        (RING_PARITY_LAW, WAIT_PARITY_COMPLETED),
        "wait-parity",
        r"^\s*mbarrier\.try_wait\.parity",
        ptx=((r"(?g)(selp\.b32\s+%r\d+, )1, 0(, %p\d+;)", r"\g<1>1, 1\g<2>"),),
    ),
    Mutation(
        "consumer-starts-at-phase-one",
        "copy",
        "the copy ring's consumer starts its phase at 1, as a producer does: its first wait on a full "
        "barrier passes at once, before the tile lands",
        (START_PHASE,),
        "wait-parity",
        r"^\s*mbarrier\.try_wait\.parity",
        ptx=(
            (
                r"(mov\.b32\s+)(%r\d+), 0;(\s+mov\.b32\s+%r\d+), \2;(\s+mov\.b32\s+%r\d+), \2;",
                r"\g<1>\g<2>, 1;\g<3>, 0;\g<4>, 0;",
            ),
        ),
    ),
    Mutation(
        "tile-load-waits-before-its-arrive",
        "load",
        "the seed's tile load with its arrive.expect_tx moved after its wait: the wait's phase needs "
        "that arrive, so the thread waits for itself",
        (UNDERARRIVAL_DEADLOCK, ARRIVE_BEFORE_WAIT),
        "wait-order",
        r"^\s*mbarrier\.try_wait\.parity",
        ptx=((r"(\s*mbarrier\.arrive\.expect_tx[^\n]*\n)((?:.*\n)*?\s*DONE: *\n\s*\}\n)", r"\g<2>\g<1>"),),
    ),
]
