"""The lint on tmakit's own kernels, compiled for sm_90a on this machine (no GPU): every variant
`tmakit lint --kernel` knows lints clean with its expect_tx sites proven, and every mutation of
the corpus (`lint_mutations`: a bug modelled on a public report, put into the captured PTX, MLIR
or tensor types of a variant or of another project's kernel, `lint_external`) is found by the
check it names, at the instruction it names. Each variant is compiled once per process
(`tmakit.linter.kernels.captured`); another project's kernel is skipped where it cannot be built."""

from __future__ import annotations

import json
import random
import re
from unittest import mock

import pytest

from lint_external import EXTERNAL, built
from lint_mutations import MUTATIONS, Mutation, edited
from tmakit import TmaConfigError, cli
from tmakit.linter import CHECKS, Tally, lint_text
from tmakit.linter.kernels import captured, lint_variant, variants

pytest.importorskip("cutlass")

VARIANTS = list(variants())
PROVEN_SHARE = 0.9  # of expect_tx sites, over the corpus and in each kernel


@pytest.mark.parametrize("name", VARIANTS)
def test_every_kernel_variant_lints_clean_with_its_expect_tx_proven(name):
    report = lint_variant(name)
    assert report.findings == [], "\n".join(map(str, report.findings))
    expect = report.tallies["expect-tx"]
    assert expect.sites >= 1, "a TMA kernel declares bytes somewhere"
    assert expect.proven_share >= PROVEN_SHARE, [u for u in report.unchecked if u.check == "expect-tx"]
    assert report.tallies["orphan-copy"].found == 0 and report.tallies["init-fence"].proven >= 1
    json.dumps(report.to_dict())  # what --json writes


def test_every_kernel_a_profiler_shows_carries_tmakit_in_its_name():
    """The DSL names a kernel by its function and module: each `.entry` of every variant reads
    as tmakit's in a profiler's trace (`kernel_cutlass_<function>_tmakit...`)."""
    for name in VARIANTS:
        entries = re.findall(r"\.entry\s+(\w+)", captured(name).ptx)
        assert entries and all("_tmakit" in entry for entry in entries), (name, entries)


def test_the_corpus_proves_nine_in_ten_expect_tx_sites_and_waits():
    """Over every variant: the share of expect_tx sites and of waits proven, and each check's
    counts."""
    totals = {check: Tally() for check in CHECKS}
    for name in VARIANTS:
        for check, tally in lint_variant(name).tallies.items():
            totals[check].proven += tally.proven
            totals[check].unchecked += tally.unchecked
            totals[check].found += tally.found
    assert totals["expect-tx"].proven_share >= PROVEN_SHARE
    assert all(tally.found == 0 for tally in totals.values())
    assert totals["multicast-mask"].proven >= 4 and totals["reduce-type"].proven >= 5
    for check in ("wait-parity", "wait-order"):
        assert totals[check].sites >= 60 and totals[check].proven_share >= PROVEN_SHARE


def test_tmakit_lint_all_prints_a_line_a_variant_and_their_reports_as_json(capsys):
    """In this process, where the variants are compiled already (tests/test_cli.py runs the
    command through its entry point)."""
    assert cli.main(["lint", "--kernel", "all"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["kernel", "findings", "expect_tx", "proven", "all", "sites", "proven"]
    assert [line.split()[0] for line in table[1:]] == VARIANTS
    assert cli.main(["lint", "--kernel", "all", "--json", "-"]) == 0
    kernels = json.loads(capsys.readouterr().out)["kernels"]
    assert list(kernels) == VARIANTS and all(report["ok"] for report in kernels.values())
    families = {
        "load",
        "copy",
        "rows-gather",
        "many",
        "reduce",
        "im2col",
        "multicast",
        "cluster-dot",
        "moe-dispatch",
    }
    assert families <= set(kernels)


def test_the_corpus_covers_every_family_and_kernel_kind():
    ptx = {name: captured(name).ptx for name in VARIANTS}
    kinds = {
        "tensor load": r"cp\.async\.bulk\.tensor\.\dd\.shared::\w+\.global\.tile",
        "im2col load": r"cp\.async\.bulk\.tensor\.\dd\.shared::\w+\.global\.im2col",
        "multicast load": r"\.multicast::cluster",
        "bulk load": r"cp\.async\.bulk\.shared::cluster\.global",
        "tensor store": r"cp\.async\.bulk\.tensor\.\dd\.global\.shared::cta",
        "bulk store": r"cp\.async\.bulk\.global\.shared::cta",
        "tensor reduce": r"cp\.reduce\.async\.bulk\.tensor",
        "bulk reduce": r"cp\.reduce\.async\.bulk\.global",
    }
    for kind, pattern in kinds.items():
        assert any(re.search(pattern, text) for text in ptx.values()), kind


def mutated(mutation: Mutation):
    if mutation.variant in EXTERNAL:
        external = built(mutation.variant)
        if external.captured is None:
            pytest.skip(f"{mutation.variant}: {external.skipped}")
        found, reduce_dtype = external.captured, EXTERNAL[mutation.variant].reduce_dtype
    else:
        found, reduce_dtype = captured(mutation.variant), variants()[mutation.variant].reduce_dtype
    ptx = edited(found.ptx, mutation.ptx)
    mlir = edited(found.mlir, mutation.mlir)
    elements = mutation.tensor_elements if mutation.tensor_elements is not None else found.tensor_elements
    assert len(elements) == len(found.tensor_elements)
    return ptx, lint_text(ptx, mlir, elements, reduce_dtype)


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda mutation: mutation.name)
def test_each_mutation_is_found_by_its_check_at_its_instruction(mutation):
    ptx, report = mutated(mutation)
    lines = ptx.splitlines()
    targets = [i + 1 for i, line in enumerate(lines) if re.search(mutation.target, line)]
    assert targets, f"{mutation.target!r} names no line of the mutated PTX"
    ours = [f for f in report.findings if f.check == mutation.check]
    assert ours, f"{mutation.name}: no {mutation.check} finding in {report.findings}"
    named = [f for f in ours if f.line in targets]
    assert named, [(f.line, f.instruction) for f in ours]
    for finding in named:
        assert finding.instruction == " ".join(lines[finding.line - 1].split()).rstrip(";")
    assert all(f.check in CHECKS for f in report.findings)


def test_the_mutations_are_many_cited_and_span_the_checks():
    assert len(MUTATIONS) >= 30 and len({m.name for m in MUTATIONS}) == len(MUTATIONS)
    assert {m.check for m in MUTATIONS} >= set(CHECKS)
    for mutation in MUTATIONS:
        assert mutation.cites and mutation.variant in {*variants(), *EXTERNAL}, mutation.name
        for citation in mutation.cites:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+", citation.repo) and citation.number > 0
            assert citation.title and citation.point
            assert citation.url == f"https://github.com/{citation.repo}/issues/{citation.number}"


def test_a_signed_max_the_dsl_encodes_unsigned_is_found_in_a_real_compile():
    """The DSL's tensor maps of Int32 tensors say U32 (tmakit refuses signed min and max for it:
    `plan.reduce_ops.SIGNED_ORDER_REFUSED`); with the refusal lifted, the compiled kernel's reduce
    store is found by its atom's format and the tensors' type, not by a text edit."""
    import tmakit
    from tmakit.plan import CopyOptions, reduce_ops
    from tmakit.plan.copy_defaults import copy_tile
    from tmakit.reduce.launch import compile_reduce
    from tmakit.reduce.plan import reduce_class

    lifted = {"max": (*reduce_ops.REDUCE_DTYPES["max"], "int32")}
    with (
        mock.patch.dict(reduce_ops.REDUCE_DTYPES, lifted),
        mock.patch.object(reduce_ops, "SIGNED_ORDER_REFUSED", set()),
    ):
        plan = reduce_class(CopyOptions(), "max", "int32", 2, "row", False, copy_tile("int32"), 132, False)
        build = compile_reduce.__wrapped__(plan, shape_generic=True)
    report = tmakit.lint(*build)
    (finding,) = report.findings
    assert finding.check == "reduce-type" and ".max." in finding.instruction
    assert (finding.expected, finding.actual) == ("tma_format S32", "tma_format U32")


def test_lint_of_a_build_is_the_variants_lint():
    import tmakit
    from tmakit.load.launch import compile_tile_load
    from tmakit.plan import LoadPlan

    report = tmakit.lint(*compile_tile_load.__wrapped__(LoadPlan(tmakit.SEED)))
    assert report.to_dict() == lint_variant("load").to_dict()


@pytest.mark.parametrize("seed", range(6))
def test_a_variants_ptx_with_lines_dropped_or_repeated_lints_without_a_raw_error(seed):
    """What a hand edit or a half-written kernel looks like: the lint answers (findings,
    unchecked sites) or refuses with a TmaConfigError, within its budget."""
    rng = random.Random(seed)
    name = ("copy", "load", "multicast-ring", "rows-gather", "copy-generic", "moe-combine")[seed]
    found = captured(name)
    lines = found.ptx.splitlines()
    body = [i for i, line in enumerate(lines) if line.startswith("\t") and ";" in line]
    for _ in range(4):
        i, j = rng.choice(body), rng.choice(body)
        lines[i] = "" if rng.random() < 0.5 else lines[j]
    try:
        report = lint_text("\n".join(lines), found.mlir, found.tensor_elements, variants()[name].reduce_dtype)
    except TmaConfigError:
        return
    json.dumps(report.to_dict())
