"""Kernel families as data: one `Family` record a family, which `tmakit bench` (and its `--kernel`
choices) read instead of naming each family in code.

A study is found, not listed: each family's `bench` part (`tmakit.registry`) and every module of
this package (and of any folder added to its `__path__`) that defines `STUDIES`, a sequence of
`Family`, contribute theirs.

The load-shaped studies (loads, copies, a cluster's loads, reduces) share their plans
(`load_plans`: a `LoadPlan` of each --shape and --sizes) and the ring rows timed beside their own
(`ring_rows`: --pipeline's variants, the load family's, and --cluster's multicast loads, the
cluster family's, each read by name from its `bench` part)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, TypeVar

from .. import registry
from ..bench.report import BenchRow
from ..bench.suites import STREAM_TIMED
from ..bench.timing import EAGER
from ..config import LoadConfig, dtype_named
from ..plan import CopyOptions, LoadPlan
from ..runtime.compile import CompiledKernel

Options = argparse.Namespace  # the bench command's options, as parsed
T = TypeVar("T")
CLUSTER_STAGES = 4  # ring stages per CTA for --cluster without --stages
# What --pipeline and --cluster read: every load-shaped family times them beside its own rows.
RING_OPTIONS = frozenset({"pipeline", "prefetch", "cluster", "stages", "persistent_clusters", "ncu"})


@dataclass(frozen=True)
class Family:
    """One kernel family, as the tools read it.

    `plans(options)` builds every plan a bench run times from the command's options (so that a
    wrong one is refused before any GPU work); `bench(plan, options, l2_bytes)` times one of them
    beside its torch baselines, each tmakit row verified in the same run; `compared_with(options)`
    names the baseline rows the table and JSON divide by. `reads` are the bench options the family
    uses besides the common ones (the others are refused). `compile(plan, keep_ptx)` compiles its
    kernel for sm_90a on any machine, `example()` is a small plan for that; `verify(plan)` runs it
    on position-hashed inputs against its reference (GPU). `baselines`: torch's fastest
    expressions of the same result, by name. `study(results, context)`, where a family has one,
    is the JSON its bench writes instead of the common report: `results` pairs each plan with its
    rows."""

    name: str
    summary: str
    plot_title: str
    plans: Callable[[Options], Sequence[Any]]
    bench: Callable[[Any, Options, int], list[BenchRow]]
    compared_with: Callable[[Options], list[str]]
    reads: frozenset[str] = frozenset()
    compile: Callable[[Any, bool], CompiledKernel] | None = None
    example: Callable[[], Any] | None = None
    verify: Callable[[Any], Any] | None = None
    baselines: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    study: Callable[[list[tuple[Any, list[BenchRow]]], dict], dict] | None = None


def families() -> dict[str, Family]:
    """Every study, by name: the families' (`registry.parts("bench")`), then those of the modules
    on this package's path (sorted by module name)."""
    found: dict[str, Family] = {}
    listed = sorted(pkgutil.iter_modules(__path__, f"{__name__}."), key=lambda m: m.name)
    for module in [*registry.parts("bench"), *(importlib.import_module(m.name) for m in listed)]:
        for family in getattr(module, "STUDIES", ()):
            if family.name in found:
                raise ValueError(f"two kernel families are named {family.name!r} (one in {module.__name__})")
            found[family.name] = family
    return found


def family_named(name: str) -> Family:
    known = families()
    if name not in known:
        raise ValueError(f"no kernel family is named {name!r}; the families: {', '.join(known)}")
    return known[name]


def bench_shape(mebibytes: float, itemsize: int) -> tuple[int, int]:
    """A matrix of about `mebibytes`: 4096 columns up to 64 MiB, 16384 beyond (1 GiB fp16 is the
    32768 x 16384 of the reference numbers)."""
    cols = 4096 if mebibytes <= 64 else 16384
    return max(1, round(mebibytes * 2**20 / itemsize / cols)), cols


def bench_shapes(options: Options, itemsize: int) -> list[tuple[int, ...]]:
    """--shape and a matrix of each --sizes, of elements of `itemsize` bytes."""
    sizes = (bench_shape(size, itemsize) for size in options.sizes)
    return [*([options.shape] if options.shape else []), *sizes]


def load_plans(options: Options, dtype: str | None = None) -> list[LoadPlan]:
    """A `LoadPlan` of each shape (--shape, --sizes) of `dtype` (default --dtype), with every
    ring `ring_rows` will time on it planned now (`check_pipelines`, `check_clusters`: a wrong one
    is refused before any GPU work)."""
    element = dtype_named(dtype or options.dtype)
    shapes = bench_shapes(options, element.nbytes)
    plans = [LoadPlan(LoadConfig(shape, element.name, options.tile, options.swizzle)) for shape in shapes]
    check_pipelines = registry.exporting("check_pipelines", "bench").check_pipelines
    check_clusters = registry.exporting("check_clusters", "bench").check_clusters
    for plan in plans:
        check_pipelines(plan, options)
        check_clusters(plan, options)
    return plans


def ring_rows(plan: LoadPlan, options: Options, l2_bytes: int) -> list[BenchRow]:
    """--pipeline's variants (`pipeline_rows`) and --cluster's multicast loads (`cluster_rows`)
    on `plan`: none without those options."""
    rows = registry.exporting("pipeline_rows", "bench").pipeline_rows(plan, options, l2_bytes)
    return rows + registry.exporting("cluster_rows", "bench").cluster_rows(plan, options, l2_bytes)


def chosen(options: Options, parts: Sequence[T], name: Callable[[T], str] = attrgetter("name")) -> list[T]:
    """The parts of a study that --only's prefixes choose, by `name` (all without)."""
    prefixes = [p for p in (options.only or "").split(",") if p]
    return [part for part in parts if not prefixes or any(name(part).startswith(p) for p in prefixes)]


def copy_options(options: Options) -> list[CopyOptions]:
    """--copy's configurations (the defaults without): what the copy and reduce studies time."""
    return [CopyOptions.parse(text) for text in options.copy or ["default"]]


def torch_rows(name: str) -> list[str]:
    """A torch row graph-timed and its eager twin on a stream (`bench.suites.STREAM_TIMED`)."""
    return [name, f"{name} {STREAM_TIMED}"]


def medians(rows: list[BenchRow]) -> tuple[dict[str, BenchRow], dict[str, float]]:
    """A case's rows by name, and each row's median microseconds by name."""
    by_name = {row.kernel: row for row in rows}
    return by_name, {name: statistics.median(row.samples_us) for name, row in by_name.items()}


def eager_columns(us: dict[str, float], peer: str) -> dict[str, float]:
    """The eager calls' columns of a study row: tmakit's and `peer`'s median call (`EAGER` rows)
    and their ratio (above 1: tmakit faster)."""
    ours, theirs = us[f"tmakit {EAGER}"], us[f"{peer} {EAGER}"]
    return {"tmakit_eager_us": ours, "torch_eager_us": theirs, "eager_vs_torch": theirs / ours}


def case_study(
    name: str,
    summary: str,
    plot_title: str,
    cases: Callable[[], Sequence[Any]],
    bench_case: Callable[[Any, int, int], list[BenchRow]],
    peers: Sequence[str],
    study: Callable[[list[tuple[Any, list[BenchRow]]], dict], dict],
) -> Family:
    """The family of a study of named cases (no kernel of its own to compile): `--only` picks
    `cases()` by the start of their names, `bench_case(case, l2_bytes, samples)` times one beside
    `peers` (the rows the table divides by), and `study` writes its JSON."""
    return Family(
        name=name,
        summary=summary,
        plot_title=plot_title,
        plans=lambda options: chosen(options, cases()),
        bench=lambda case, options, l2_bytes: bench_case(case, l2_bytes, options.samples),
        compared_with=lambda options: list(peers),
        reads=frozenset({"only"}),
        study=study,
    )


def tabled_study(
    name: str, what: str, row: Callable[[Any, list[BenchRow]], dict], **fields: Any
) -> Callable[[list[tuple[Any, list[BenchRow]]], dict], dict]:
    """A family's `study`: the JSON of study `name` (`what` it times, its other `fields`, the
    run's context), one row a part (`row(part, its bench rows)`)."""

    def study(results: list[tuple[Any, list[BenchRow]]], context: dict) -> dict:
        rows = [row(part, part_rows) for part, part_rows in results]
        return {"study": name, "what": what, **fields, "context": context, "rows": rows}

    return study
