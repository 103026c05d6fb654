"""The lint on kernels nobody here wrote (`lint_external`), each compiled for sm_90a on this
machine in a child process: each lints clean, and the CUTLASS GEMM with nine in ten of its
expect_tx sites and of its waits proven. An entry that cannot be built is skipped with its
reason; where tmakit's `lint` extra is installed (CI's torch pass), an entry built is required."""

from __future__ import annotations

import pytest

from entry_point import ROOT
from lint_external import EXTERNAL, built, installed_version, lint_external, lint_extra_installed

PROVEN_SHARE = 0.9  # of expect_tx sites, where an entry is held to it


def report_of(name: str):
    entry = built(name)
    if entry.captured is None:
        pytest.skip(f"{name}: {entry.skipped}")
    return lint_external(name)


@pytest.mark.parametrize("name", list(EXTERNAL))
def test_every_external_kernel_lints_clean(name):
    report = report_of(name)
    assert report.findings == [], "\n".join(map(str, report.findings))
    assert report.tallies["expect-tx"].sites >= 1 and report.tallies["init-fence"].proven >= 1


def test_the_cutlass_gemm_proves_nine_in_ten_expect_tx_sites_and_waits():
    report = report_of("cutlass-gemm")
    for check in ("expect-tx", "wait-parity", "wait-order"):
        tally = report.tallies[check]
        assert tally.sites >= 1 and tally.proven_share >= PROVEN_SHARE, [
            u for u in report.unchecked if u.check == check
        ]
    assert report.tallies["multicast-mask"].proven >= 1  # its B tile is multicast


def test_an_external_kernel_is_built_where_the_lint_extra_is_installed():
    """CI's torch pass installs the extra: there, every entry skipping fails the run."""
    if not lint_extra_installed():
        pytest.skip("tmakit's lint extra is not installed here")
    reasons = {name: built(name).skipped for name in EXTERNAL}
    assert any(reason is None for reason in reasons.values()), reasons


def test_each_kernel_of_the_lint_extra_is_pinned_there_and_linted_at_its_pin():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["lint"]
    pins = dict(requirement.split("==") for requirement in extra if "==" in requirement)
    for name, entry in EXTERNAL.items():
        if entry.in_lint_extra:
            assert entry.distribution in pins, name
            assert installed_version(entry.distribution) in (None, pins[entry.distribution]), name


def test_an_entry_that_cannot_be_built_is_skipped_with_a_one_line_reason(monkeypatch):
    """The child's work, in this process: a distribution not installed, a module its import
    lacks, and what its compile raises each become the entry's reason."""
    import lint_external

    def missing():
        import no_such_module  # noqa: F401

    def failing():
        raise ValueError("tile_shape_mn (100, 128) is not supported\nmore detail")

    entries = {
        "absent": lint_external.External("not installed", "no-such-distribution", missing),
        "no-module": lint_external.External("an import that fails", "pytest", missing),
        "failing": lint_external.External("a compile that fails", "pytest", failing),
    }
    for name, entry in entries.items():
        monkeypatch.setitem(lint_external.EXTERNAL, name, entry)
    reasons = {name: lint_external._build(name)["skipped"] for name in entries}
    version = lint_external.installed_version("pytest")
    assert reasons == {
        "absent": "no-such-distribution is not installed (tmakit's lint extra: pip install 'tmakit[lint]')",
        "no-module": f"pytest {version}: no module named 'no_such_module'",
        "failing": f"pytest {version}: ValueError: tile_shape_mn (100, 128) is not supported",
    }


def test_a_plain_atom_a_block_copy_multicasts_reads_as_a_multicast_atom_of_the_ctas_sharing_it():
    """QuACK's loads: plain atoms, multicast by `cute.copy(..., tma_multicast=...)` in the kernel,
    which the compiler splits among the CTAs its layout maps to one tile (stride 0: the cluster's
    two rows share B; A is shared by none)."""
    from tmakit.linter.mlir import parse_module

    def load(bits: int) -> str:
        return (
            f"!cute_nvgpu.atom.non_exec_tiled_tma_load<sm_90, bf16, copy_bits = {bits}, tma_format = BF16_RN>"
        )

    def copy(value: str, atom: str, layout: str) -> str:
        exec_atom = f"%exec{value[1:]}"
        return (
            f"      {exec_atom} = cute_nvgpu.atom.make_exec_tma({atom}) : (x) -> y\n"
            f"      {value} = cute_nvgpu.atom.set_value<tma_bar>({exec_atom}, %bar) : (y, z)\n"
            f"      cute.copy({value}, %g, %s) "
            f'{{from_block_api, multicast_layout = #cute.layout<"{layout}">}} : (y)\n'
        )

    module = (
        f"    cuda.kernel @k(%arg0: {load(131072)} {{cute_nvgpu.grid_constant}}, %arg1: {load(196608)} "
        "{cute_nvgpu.grid_constant}) attributes {cute.kernel, cutlass_launch_facts = {cluster_launch = "
        "true, exact_cluster_dim = array<i64: 2, 1, 1>, schema_version = 1 : i64}} {\n"
        + copy("%5", "%arg0", "(2,1):(1,0)")
        + copy("%6", "%arg1", "(2,1):(0,1)")
        + "      %6 = cute.add_offset(%ptr_6, %t) : (p, t) -> p\n    }\n"  # a name used again further on
    )
    (kernel,) = parse_module(module)
    a, b = kernel.atoms
    assert (a.multicast, a.num_multicast, a.instruction_bytes) == (False, 1, 16384)
    assert (b.multicast, b.num_multicast, b.instruction_bytes) == (True, 2, 12288)
