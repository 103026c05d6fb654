"""The lint's pure layers on hand-written PTX and MLIR (no DSL, no GPU): the PTX read as a program
(values, graph, the elected lane's path), the atoms and launch facts of the MLIR, and each check
on a small kernel it proves, finds wrong or leaves unchecked."""

from __future__ import annotations

import json
import textwrap

import pytest

from tmakit import TmaConfigError, lint_text
from tmakit.linter import CHECKS, LintReport
from tmakit.linter.checks import bulk_reduce_types
from tmakit.linter.mlir import kernel_for, parse_atom, parse_module, signedness
from tmakit.linter.program import Form, parse_kernels, split_operands

HEADER = """\
.version 8.8
.target sm_90a
.address_size 64

.extern .shared .align 1024 .b8 __dynamic_shmem__0[];

.visible .entry k(
\t.param .align 64 .b8 k_param_0[128],
\t.param .align 64 .b8 k_param_1[128],
\t.param .u64 k_param_2
)
.reqntid 32, 1, 1
{
\t.reg .pred \t%p<16>;
\t.reg .b16 \t%rs<4>;
\t.reg .b32 \t%r<64>;
\t.reg .b64 \t%rd<16>;
"""


def ptx(body: str) -> str:
    """A kernel `k` (two descriptor parameters, then a pointer) around `body`."""
    return HEADER + textwrap.dedent(body) + "}\n"


TILE_LOAD = "cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes"
MULTICAST_LOAD = (
    "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
)


def atom(kind: str, first: str, element: str, bits: int, box: str, tma_format: str) -> str:
    """An atom's type as the DSL's MLIR prints it."""
    fields = f'{first}, {element}, copy_bits = {bits}, tma_gbasis = <"{box}">, tma_format = {tma_format}'
    return f"!cute_nvgpu.atom.non_exec_{kind}<{fields}>"


LOAD_ATOM = atom("tiled_tma_load", "sm_90", "f16", 262144, "(256,64):(1@1,1@0)", "F16_RN")


def mlir(*atoms: str, cluster: tuple[int, int, int] | None = None, host: str = "") -> str:
    """A module whose kernel `k` takes `atoms` as grid-constant arguments, then a tensor."""
    arguments = [f"%arg{i}: {atom} {{cute_nvgpu.grid_constant}}" for i, atom in enumerate(atoms)]
    arguments.append(f"%arg{len(atoms)}: !memref_gmem_f16")
    facts = "cluster_launch = false"
    if cluster:
        facts = f"cluster_launch = true, exact_cluster_dim = array<i64: {', '.join(map(str, cluster))}>"
    kernel = (
        f"    cuda.kernel @k({', '.join(arguments)}) attributes {{cute.kernel, cutlass_launch_facts = "
        f"{{{facts}, schema_version = 1 : i64}}, gpu.kernel}} {{"
    )
    return "\n".join(["module {", "  cuda.module @kernels {", kernel, "    }", "  }", host, "}"])


def load_kernel(
    expect: str = "32768", fence: str = "fence.mbarrier_init.release.cluster;", extra: str = ""
) -> str:
    """One elected lane initialises a barrier, fences it, declares `expect` bytes and issues one
    TMA tile load of atom 0 on it; all wait."""
    return ptx(f"""\
        mov.b64 %rd1, k_param_0;
        mov.b32 %r1, __dynamic_shmem__0;
        elect.sync %r2|%p1, -1;
        not.pred %p2, %p1;
        @%p2 bra $L__BB0_2;
        mov.b32 %r3, 1;
        mbarrier.init.shared.b64 [%r1+32768], %r3;
    $L__BB0_2:
        {fence}
        bar.sync 0;
        elect.sync %r4|%p3, -1;
        not.pred %p4, %p3;
        @%p4 bra $L__BB0_4;
        mov.b32 %r5, {expect};
        mbarrier.arrive.expect_tx.shared.b64 %rd2, [%r1+32768], %r5;
        cvta.param.u64 %rd3, %rd1;
        mov.b32 %r6, 0;
        {TILE_LOAD} [%r1], [%rd3, {{%r6, %r6}}], [%r1+32768];
    {extra}$L__BB0_4:
        mbarrier.try_wait.parity.shared.b64 %p5, [%r1+32768], 0;
        ret;
    """)


def findings(report: LintReport, check: str) -> list:
    return [finding for finding in report.findings if finding.check == check]


# -- the PTX as a program ---------------------------------------------------------------------------
def test_forms_add_scale_and_print():
    a = Form.leaf("%r1") + Form.of(8)
    assert (a + a.scaled(-1)) == Form() and a.scaled(2) == Form((("%r1", 2),), 16)
    assert str(Form.leaf("%r1").scaled(8) + Form.of(-4)) == "8*%r1 - 4"
    assert Form.of(3).constant == 3 and a.constant is None


def test_operands_split_at_the_top_level_commas_only():
    assert split_operands("[%r1], [%rd3, {%r6, %r6}], [%r1+32768], %rs1") == (
        "[%r1]",
        "[%rd3, {%r6, %r6}]",
        "[%r1+32768]",
        "%rs1",
    )


def test_the_parser_reads_the_entry_its_parameters_and_each_instructions_line():
    text = load_kernel()
    (kernel,) = parse_kernels(text)
    assert kernel.name == "k" and [p.is_descriptor for p in kernel.params] == [True, True, False]
    lines = text.splitlines()
    for instruction in kernel.instructions:
        assert " ".join(lines[instruction.line - 1].split()).rstrip(";") == instruction.text
    expect = next(i for i in kernel.instructions if i.opcode.startswith("mbarrier.arrive"))
    assert kernel.address(expect.operands[1]) == Form.leaf("__dynamic_shmem__0") + Form.of(32768)
    assert kernel.value(expect.operands[2]) == Form.of(32768)
    copy = next(i for i in kernel.instructions if i.opcode.startswith("cp.async"))
    assert kernel.descriptor(copy.operands[1]) == 0  # cvta.param of k_param_0


def test_register_values_follow_the_one_instruction_that_writes_them():
    (kernel,) = parse_kernels(
        ptx("""\
        mov.u32 %r1, %tid.x;
        shl.b32 %r2, %r1, 3;
        add.s32 %r3, %r2, 131072;
        mad.lo.s32 %r4, %r1, 16, 4;
        mov.b32 %r5, 1;
        mov.b32 %r5, 2;
        ret;
    """)
    )
    assert kernel.value("%r3") == Form((("%tid.x", 8),), 131072)
    assert kernel.value("%r4") == Form((("%tid.x", 16),), 4)
    assert kernel.value("%r5") == Form.leaf("%r5")  # written twice, with two values: not known
    assert kernel.value("0x10") == Form.of(16)


def test_the_graph_follows_the_elected_lane_and_finds_loops():
    (kernel,) = parse_kernels(load_kernel())
    branch = next(b for b in kernel.blocks if kernel.instructions[b.end - 1].text.startswith("@%p2 bra"))
    assert branch.successors == [branch.index + 1]  # the lanes not elected skip; the walk does not
    assert kernel.elected("%p1") is True and kernel.elected("%p2") is False and kernel.elected("%p5") is None
    assert not kernel.back_edges and not kernel.loops
    (looped,) = parse_kernels(
        ptx("""\
        mov.b32 %r1, 0;
    $L__BB0_1:
        add.s32 %r1, %r1, 1;
        setp.lt.s32 %p1, %r1, 4;
        @%p1 bra $L__BB0_1;
        ret;
    """)
    )
    (loop,) = looped.loops
    assert looped.loops_around(2) == frozenset({loop}) and looped.loops_around(0) == frozenset()


def test_a_branch_on_a_condition_already_taken_takes_the_same_way():
    (kernel,) = parse_kernels(
        ptx("""\
        mov.u32 %r1, %tid.x;
        setp.ne.b32 %p1, %r1, 0;
        @%p1 bra $L__BB0_2;
        mov.b32 %r2, 1;
    $L__BB0_2:
        setp.ne.b32 %p2, %r1, 0;
        @%p2 bra $L__BB0_4;
        mov.b32 %r3, 1;
    $L__BB0_4:
        ret;
    """)
    )
    assert kernel.condition("%p1") == kernel.condition("%p2")
    (first,) = [b for b in kernel.blocks if b.index == 0]
    for successor, facts in kernel.edges(first.index, frozenset()):
        later = [b.index for b in kernel.blocks if kernel.instructions[b.end - 1].text.startswith("@%p2")]
        if successor in later:  # the branch taken: the second branch is taken too
            assert len(kernel.edges(successor, facts)) == 1


def test_ptx_without_a_kernel_is_refused():
    with pytest.raises(TmaConfigError, match="no kernel"):
        parse_kernels(".version 8.8\n.target sm_90a\n")


# -- the MLIR ---------------------------------------------------------------------------------------
def test_atoms_are_read_with_their_bytes_box_format_and_reduction():
    load = parse_atom(0, LOAD_ATOM)
    assert (load.kind, load.element, load.instruction_bytes, load.box) == (
        "load",
        "f16",
        32768,
        "(256,64):(1@1,1@0)",
    )
    multicast = parse_atom(0, LOAD_ATOM.replace("sm_90,", "sm_90_multicast,"))
    assert multicast.multicast and multicast.instruction_bytes is None  # its factor is the host's
    reduce = parse_atom(1, atom("tiled_tma_reduce", "MAX", "i32", 65536, "(128,16):(1@1,1@0)", "U32"))
    assert (reduce.kind, reduce.reduce_op, reduce.element, reduce.tma_format) == (
        "reduce",
        "max",
        "i32",
        "U32",
    )
    assert parse_atom(0, "!memref_gmem_f16") is None
    assert [signedness(name) for name in ("Int32", "Uint64", "Float16", None)] == [True, False, None, None]


def test_the_module_gives_launch_facts_and_each_atoms_multicast_factor_and_tensor():
    multicast = LOAD_ATOM.replace("sm_90,", "sm_90_multicast,")
    host = (
        "  func.func @host(%arg0: !memref_gmem_f16, %arg1: !cuda.stream) -> i32 attributes {x} {\n"
        "    %iter = cute.get_iter(%arg0) : !memref_gmem_f16\n"
        "    %view = cute.make_view(%iter, %1) : !memref_gmem_f16\n"
        "    %non_exec_atom, %tma_tensor = cute_nvgpu.atom.make_non_exec_tiled_tma_load(%view, %lay, %3) "
        "<{kind = <sm_90_multicast> num_multicast = 2}> : (x) -> (y)\n"
        "    %7 = cuda.launch_ex @kernels::@k<%6> (%non_exec_atom, %arg0) : x\n"
        "  }"
    )
    (kernel,) = parse_module(mlir(multicast, cluster=(2, 1, 1), host=host), ("Int16",))
    (atom,) = kernel.atoms
    assert atom.num_multicast == 2 and atom.instruction_bytes == 16384 and atom.dsl_element == "Int16"
    assert kernel.launch.cluster_size == 2
    (plain,) = parse_module(mlir(LOAD_ATOM))
    assert plain.launch.cluster_size == 1 and plain.atoms[0].num_multicast == 1
    assert kernel_for("kernel_cutlass_a_b_c", [plain]) is plain


# -- expect_tx ----------------------------------------------------------------------------------------
def test_an_expect_tx_matching_its_copy_is_proven():
    report = lint_text(load_kernel(), mlir(LOAD_ATOM, LOAD_ATOM))
    assert report.ok and report.tallies["expect-tx"].proven == 1 and report.tallies["orphan-copy"].proven == 1
    assert report.proven_share("expect-tx") == 1.0


def test_an_expect_tx_a_box_short_is_found_with_its_line_barrier_and_bytes():
    text = load_kernel(expect="16384")
    (finding,) = lint_text(text, mlir(LOAD_ATOM, LOAD_ATOM)).findings
    assert finding.check == "expect-tx" and (finding.expected, finding.actual) == ("16384", "32768")
    assert finding.barrier == "smem+32768" and finding.phase == "0"
    assert "expect_tx" in text.splitlines()[finding.line - 1] and finding.instruction.endswith("%r5")


def test_without_the_mlir_a_tensor_copys_bytes_are_unchecked():
    report = lint_text(load_kernel())
    assert report.ok and report.tallies["expect-tx"].unchecked == 1
    assert "atoms" in next(u.reason for u in report.unchecked if u.check == "expect-tx")


def test_two_copies_on_one_barrier_are_summed_and_an_elected_split_is_one_path():
    extra = "\n    ".join(
        [
            "elect.sync %r7|%p6, -1;",
            "not.pred %p7, %p6;",
            "@%p7 bra $L__BB0_4;",
            "cvta.param.u64 %rd4, k_param_1;",
            f"{TILE_LOAD} [%r1+16384], [%rd4, {{%r6, %r6}}], [%r1+32768];\n",
        ]
    )
    small = LOAD_ATOM.replace("262144", "131072")
    assert lint_text(load_kernel(expect="65536", extra=extra), mlir(LOAD_ATOM, small)).findings
    report = lint_text(load_kernel(expect="49152", extra=extra), mlir(LOAD_ATOM, small))
    assert report.ok and report.tallies["expect-tx"].proven == 1 and report.tallies["orphan-copy"].proven == 2


BULK = """\
    mov.b32 %r1, __dynamic_shmem__0;
    ld.param.b64 %rd1, [k_param_2];
    ld.global.b32 %r2, [%rd1];
    mov.b32 %r3, 1;
    mbarrier.init.shared.b64 [%r1+1024], %r3;
    fence.mbarrier_init.release.cluster;
    mbarrier.expect_tx.relaxed.cta.shared.b64 [%r1+1024], {expect};
    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1], %r2, [%r1+1024];
    ret;
"""


def test_a_bulk_copy_sized_by_the_expect_tx_register_is_proven_another_register_unchecked():
    assert lint_text(ptx(BULK.format(expect="%r2"))).tallies["expect-tx"].proven == 1
    other = lint_text(ptx(BULK.format(expect="%r3")))
    assert other.ok and other.tallies["expect-tx"].unchecked == 1  # run-time values: not decided
    assert lint_text(ptx(BULK.replace("%r2, [%r1+1024]", "512, [%r1+1024]").format(expect="256"))).findings


def test_a_copy_repeating_in_a_loop_the_expect_tx_is_outside_is_unchecked():
    text = ptx("""\
        mov.b32 %r1, __dynamic_shmem__0;
        ld.param.b64 %rd1, [k_param_2];
        mov.b32 %r3, 1;
        mbarrier.init.shared.b64 [%r1+1024], %r3;
        fence.mbarrier_init.release.cluster;
        mbarrier.expect_tx.relaxed.cta.shared.b64 [%r1+1024], 2048;
        mov.b32 %r4, 0;
    $L__BB0_1:
        cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1], 512, [%r1+1024];
        add.s32 %r4, %r4, 1;
        setp.lt.s32 %p1, %r4, 4;
        @%p1 bra $L__BB0_1;
        ret;
    """)
    report = lint_text(text)
    assert report.ok and "loop" in next(u.reason for u in report.unchecked if u.check == "expect-tx")


def test_a_copy_no_expect_tx_declares_is_an_orphan():
    text = ptx(
        BULK.format(expect="512").replace("[%r1], [%rd1], %r2, [%r1+1024]", "[%r1], [%rd1], %r2, [%r1+1032]")
    )
    report = lint_text(text)
    (orphan,) = findings(report, "orphan-copy")
    assert orphan.barrier == "smem+1032" and orphan.instruction.startswith("cp.async.bulk.shared::cluster")
    assert findings(report, "expect-tx")[0].actual == "0"  # its own barrier receives nothing


MULTICAST = LOAD_ATOM.replace("sm_90,", "sm_90_multicast,")


def multicast_kernel(mask: str, expect: str = "32768") -> str:
    return load_kernel(expect=expect).replace(
        f"{TILE_LOAD} [%r1], [%rd3, {{%r6, %r6}}], [%r1+32768];",
        f"mov.b16 %rs1, {mask};\n    {MULTICAST_LOAD} [%r1], [%rd3, {{%r6, %r6}}], [%r1+32768], %rs1;",
    )


def multicast_module(cluster=(4, 1, 1), factor=4) -> str:
    host = (
        "  func.func @host(%arg0: !memref_gmem_f16) -> i32 attributes {llvm.emit_c_interface} {\n"
        "    %non_exec_atom, %tma_tensor = cute_nvgpu.atom.make_non_exec_tiled_tma_load(%view, %lay, %3) "
        f"<{{kind = <sm_90_multicast> num_multicast = {factor}}}> : (x) -> (y)\n"
        "    %7 = cuda.launch_ex @kernels::@k<%6> (%non_exec_atom, %non_exec_atom, %arg0) : x\n  }"
    )
    return mlir(MULTICAST, MULTICAST, cluster=cluster, host=host)


def test_a_multicast_copy_lands_one_slice_from_each_cta_its_mask_names():
    report = lint_text(multicast_kernel("15"), multicast_module())
    assert (
        report.ok and report.tallies["expect-tx"].proven == 1 and report.tallies["multicast-mask"].proven == 1
    )
    (slice_only,) = lint_text(multicast_kernel("15", expect="8192"), multicast_module()).findings
    assert (slice_only.check, slice_only.expected, slice_only.actual) == ("expect-tx", "8192", "32768")


def test_multicast_masks_stay_in_the_cluster():
    (outside,) = findings(lint_text(multicast_kernel("31"), multicast_module()), "multicast-mask")
    assert outside.actual == "0x1f" and "rank(s) 4" in outside.message and ".multicast" in outside.instruction
    assert findings(lint_text(multicast_kernel("0"), multicast_module()), "multicast-mask")
    unknown = lint_text(
        multicast_kernel("15"), multicast_module().replace("exact_cluster_dim = array<i64: 4, 1, 1>", "")
    )
    assert unknown.ok and unknown.tallies["multicast-mask"].unchecked == 1
    run_time = load_kernel().replace(
        f"{TILE_LOAD} [%r1], [%rd3, {{%r6, %r6}}], [%r1+32768];",
        f"{MULTICAST_LOAD} [%r1], [%rd3, {{%r6, %r6}}], [%r1+32768], %rs2;",  # a mask never set
    )
    assert lint_text(run_time, multicast_module()).tallies["multicast-mask"].unchecked == 1


# -- init fence -----------------------------------------------------------------------------------------
def test_an_init_must_be_fenced_on_its_lanes_path_before_its_barrier_is_used():
    assert lint_text(load_kernel(), mlir(LOAD_ATOM, LOAD_ATOM)).tallies["init-fence"].proven == 1
    assert lint_text(load_kernel(fence="fence.proxy.async.shared::cta;"), mlir(LOAD_ATOM, LOAD_ATOM)).ok
    for fence in ("", "@%p2 fence.mbarrier_init.release.cluster;"):
        (finding,) = lint_text(load_kernel(fence=fence), mlir(LOAD_ATOM, LOAD_ATOM)).findings
        assert finding.check == "init-fence" and finding.instruction.startswith("mbarrier.init")
        assert "before a fence" in finding.message


# -- bulk store groups ------------------------------------------------------------------------------------
STORE = """\
    mov.b32 %r1, __dynamic_shmem__0;
    ld.param.b64 %rd1, [k_param_2];
    mov.u32 %r2, %tid.x;
    setp.ne.b32 %p1, %r2, 0;
    @%p1 bra $L__BB0_2;
    cp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r1], 512;
    {commit}
$L__BB0_2:
    setp.ne.b32 %p2, %r2, 0;
    @%p2 bra $L__BB0_4;
    {wait}
$L__BB0_4:
    ret;
"""


@pytest.mark.parametrize(
    ("commit", "wait", "problem"),
    [
        ("cp.async.bulk.commit_group;", "cp.async.bulk.wait_group.read 0;", None),
        ("cp.async.bulk.commit_group;", "cp.async.bulk.wait_group 0;", None),
        ("", "cp.async.bulk.wait_group.read 0;", "never committed"),
        ("cp.async.bulk.commit_group;", "", "committed but not waited"),
        ("cp.async.bulk.commit_group;", "cp.async.bulk.wait_group.read 1;", "committed but not waited"),
        ("cp.async.commit_group;", "cp.async.bulk.wait_group.read 0;", "never committed"),
    ],
)
def test_a_bulk_store_is_committed_and_waited_for_before_exit(commit, wait, problem):
    """The store and the wait sit under the same test of the thread index: the path that stores
    is the path that waits."""
    report = lint_text(ptx(STORE.format(commit=commit, wait=wait)))
    if problem is None:
        assert report.ok and report.tallies["store-groups"].proven == 1
    else:
        (finding,) = report.findings
        assert finding.check == "store-groups" and problem in finding.actual
        assert finding.instruction.startswith("cp.async.bulk.global.shared::cta.bulk_group")


# -- reduce types -------------------------------------------------------------------------------------------
def test_bulk_reduce_types_follow_the_dtypes_signedness_and_width():
    assert bulk_reduce_types("min", "int32") == ("s32",) and bulk_reduce_types("max", "uint64") == ("u64",)
    assert bulk_reduce_types("add", "int64") == ("u64",) and bulk_reduce_types("and", "int32") == ("b32",)
    assert bulk_reduce_types("min", "fp32") == () and bulk_reduce_types("inc", "int32") == ()


@pytest.mark.parametrize(
    ("instruction", "dtype", "outcome"),
    [
        ("min.s32", "int32", "proven"),
        ("min.u32", "int32", "found"),
        ("max.u64", "uint64", "proven"),
        ("add.noftz.bf16", "bf16", "proven"),
        ("add.noftz.f16", "bf16", "found"),
        ("min.s32", None, "unchecked"),
        ("add.b32", None, "found"),
        ("noftz.bf16", "bf16", "found"),
    ],
)
def test_a_bulk_reduces_op_and_type_against_the_tensors_dtype(instruction, dtype, outcome):
    text = ptx(f"""\
        mov.b32 %r1, __dynamic_shmem__0;
        ld.param.b64 %rd1, [k_param_2];
        cp.reduce.async.bulk.global.shared::cta.bulk_group.{instruction} [%rd1], [%r1], 512;
        cp.async.bulk.commit_group;
        cp.async.bulk.wait_group.read 0;
        ret;
    """)
    tally = lint_text(text, reduce_dtype=dtype).tallies["reduce-type"]
    assert {"proven": tally.proven, "found": tally.found, "unchecked": tally.unchecked}[outcome] == 1


def tensor_reduce(op: str) -> str:
    return ptx(f"""\
        mov.b64 %rd1, k_param_1;
        mov.b32 %r1, __dynamic_shmem__0;
        mov.b32 %r2, 0;
        cvta.param.u64 %rd2, %rd1;
        cp.reduce.async.bulk.tensor.2d.global.shared::cta.{op}.tile.bulk_group [%rd2, {{%r2, %r2}}], [%r1];
        cp.async.bulk.commit_group;
        cp.async.bulk.wait_group.read 0;
        ret;
    """)


def reduce_module(op: str, element: str, tma_format: str) -> str:
    """Atom 0 a load, atom 1 the reduce, made from the host's second tensor."""
    host = (
        "  func.func @host(%arg0: !memref_gmem_i32, %arg1: !memref_gmem_i32) -> i32 attributes {x} {\n"
        "    %iter_0 = cute.get_iter(%arg1) : !memref_gmem_i32\n"
        "    %view_6 = cute.make_view(%iter_0, %9) : !memref_gmem_i32\n"
        "    %non_exec_atom_12, %tma_tensor_13 = cute_nvgpu.atom.make_non_exec_tiled_tma_reduce("
        f"%view_6, %lay_1, %16) <{{kind = <{op}>}}> : (x) -> (y)\n"
        "    %12 = cuda.launch_ex @kernels::@k<%11> (%non_exec_atom_12, %non_exec_atom_12, %arg0) : x\n  }"
    )
    reduce = atom("tiled_tma_reduce", op, element, 65536, "(128,16):(1@1,1@0)", tma_format)
    return mlir(LOAD_ATOM, reduce, host=host)


@pytest.mark.parametrize(
    ("ptx_op", "atom_op", "element", "tma_format", "elements", "outcome"),
    [
        ("add", "ADD", "f16", "F16_RN", (), "proven"),
        ("and", "ADD", "f16", "F16_RN", (), "found"),  # CuTe DSL 4.5.1 lowered ADD to AND
        ("add", "ADD", "i16", "U16", (), "found"),  # no such add
        ("max", "MAX", "i32", "U32", ("Uint32", "Uint32"), "proven"),
        ("max", "MAX", "i32", "U32", ("Int32", "Int32"), "found"),  # a signed tensor, an unsigned map
        ("max", "MAX", "i32", "U32", (), "unchecked"),  # signedness not known
        ("min", "MIN", "i32", "S32", ("Uint32", "Uint32"), "found"),
    ],
)
def test_a_tensor_reduce_against_its_atom_and_tensor(ptx_op, atom_op, element, tma_format, elements, outcome):
    report = lint_text(tensor_reduce(ptx_op), reduce_module(atom_op, element, tma_format), elements)
    tally = report.tallies["reduce-type"]
    assert {"proven": tally.proven, "found": tally.found, "unchecked": tally.unchecked}[outcome] == 1, (
        report.text()
    )


# -- waits: parity and order -------------------------------------------------------------------------
WAIT = "mbarrier.try_wait.parity.shared.b64 %p5, [%r1+32768], 0;"


def wait_lint(text: str) -> LintReport:
    return lint_text(text, mlir(LOAD_ATOM, LOAD_ATOM))


def test_the_wait_after_a_tile_loads_arrive_is_proven():
    report = wait_lint(load_kernel())
    assert report.ok, report.text()
    assert report.tallies["wait-parity"].proven == report.tallies["wait-order"].proven == 1


def test_a_first_wait_at_parity_one_on_a_barrier_copies_complete_is_found():
    report = wait_lint(load_kernel().replace(WAIT, WAIT.replace("], 0;", "], 1;")))
    [finding] = findings(report, "wait-parity")
    assert (finding.expected, finding.actual, finding.phase) == ("parity 0", "parity 1", "0")
    assert finding.barrier == "smem+32768" and "before any byte lands" in finding.message


def test_a_wait_before_the_threads_own_arrive_is_found():
    """The seed's kernel with its wait moved above its arrive: the phase needs that arrive."""
    early = load_kernel().replace(WAIT, "").replace("bar.sync 0;", f"bar.sync 0;\n        {WAIT}")
    [finding] = findings(wait_lint(early), "wait-order")
    assert (
        "before its own arrive" in finding.message
        and finding.line == early.splitlines().index("        " + WAIT) + 1
    )


def ring_loop(parity_update: str, stages: int = 1) -> str:
    """One elected lane loads a tile a pass into a ring of `stages` barriers and waits on it,
    for a count the launch gives; `parity_update` moves the parity register %r10 on."""
    return ptx(f"""\
        mov.b64 %rd1, k_param_0;
        mov.b32 %r1, __dynamic_shmem__0;
        ld.param.u32 %r12, [k_param_2];
        elect.sync %r2|%p1, -1;
        not.pred %p2, %p1;
        @%p2 bra $L__BB0_2;
        mov.b32 %r3, 1;
        mbarrier.init.shared.b64 [%r1+32768], %r3;
        mbarrier.init.shared.b64 [%r1+32776], %r3;
    $L__BB0_2:
        fence.mbarrier_init.release.cluster;
        bar.sync 0;
        mov.b32 %r10, 0;
        mov.b32 %r11, 0;
        mov.b32 %r13, 0;
    $L__BB0_3:
        shl.b32 %r14, %r13, 3;
        add.s32 %r15, %r1, %r14;
        add.s32 %r16, %r15, 32768;
        mov.b32 %r5, 32768;
        mbarrier.arrive.expect_tx.shared.b64 %rd2, [%r16], %r5;
        cvta.param.u64 %rd3, %rd1;
        mov.b32 %r6, 0;
        {TILE_LOAD} [%r1], [%rd3, {{%r6, %r6}}], [%r16];
        mbarrier.try_wait.parity.shared.b64 %p5, [%r16], %r10;
        add.s32 %r13, %r13, 1;
        setp.eq.b32 %p6, %r13, {stages};
        selp.b32 %r13, 0, %r13, %p6;
        {parity_update}
        add.s32 %r11, %r11, 1;
        setp.lt.s32 %p7, %r11, %r12;
        @%p7 bra $L__BB0_3;
        ret;
    """)


@pytest.mark.parametrize(
    ("stages", "update", "found"),
    [
        (1, "xor.b32 %r10, %r10, 1;", False),  # one barrier: it flips every pass
        (2, "selp.b32 %r7, 1, 0, %p6;\n        xor.b32 %r10, %r10, %r7;", False),  # at each wrap
        (1, "", True),  # frozen: the second pass's wait passes at once
        (2, "xor.b32 %r10, %r10, 1;", True),  # a pass, not a wrap: stage 1 first waits at 1
    ],
)
def test_a_rings_parity_is_followed_around_its_loop(stages, update, found):
    report = wait_lint(ring_loop(update, stages))
    assert bool(findings(report, "wait-parity")) == found, report.text()
    assert report.tallies["wait-order"].proven == 1
    if not found:
        assert report.ok and report.tallies["wait-parity"].proven == 1


def test_a_parity_loaded_at_run_time_leaves_its_wait_unchecked():
    report = wait_lint(ring_loop("ld.global.u32 %r10, [%rd1];"))
    assert report.ok and report.tallies["wait-parity"].unchecked == 1
    assert any(site.reason == "its parity is set at run time" for site in report.unchecked)


# -- the report and its inputs ------------------------------------------------------------------------
def test_the_report_reads_as_text_and_json():
    report = lint_text(load_kernel(expect="16384"), mlir(LOAD_ATOM, LOAD_ATOM))
    assert report.tallies["wait-parity"].proven == 1 and not report.ok
    text = report.text()
    assert "expect-tx: line" in text and "proven share" in text and "wait-parity" in text
    data = json.loads(json.dumps(report.to_dict()))
    assert set(data["checks"]) == set(CHECKS) and data["findings"][0]["expected"] == "16384"
    assert 0 < report.proven_share() < 1 and report.kernels == ["k"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"ptx": None}, "ptx is None"),
        ({"ptx": load_kernel(), "mlir": 3}, "mlir is int"),
        ({"ptx": load_kernel(), "tensor_elements": "Int32"}, "tensor_elements"),
        ({"ptx": load_kernel(), "tensor_elements": (1,)}, "tensor_elements"),
        ({"ptx": load_kernel(), "reduce_dtype": "int33"}, "reduce_dtype"),
        ({"ptx": "not ptx"}, "no kernel"),
    ],
)
def test_lint_text_refuses_what_it_cannot_read(arguments, message):
    with pytest.raises(TmaConfigError, match=message):
        lint_text(**arguments)
