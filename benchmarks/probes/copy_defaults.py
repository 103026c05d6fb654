"""The defaults that no committed results compare, each timed beside a few values around it on one
GPU: the same-layout copy's tile (`COPY_TILE_ROW_BYTES`, `COPY_TILE_ROWS` again) and ring
(`BYTES_IN_FLIGHT`, `MIN_STORES_IN_FLIGHT`), the transposing copy's tile rows
(`TRANSPOSE_TILE_ROWS`) and ring (`MIN_STAGES`, `MIN_STORES_IN_FLIGHT`), the rows view's tiles
(`ROWS_VIEW_TILE_BYTES`, `ROWS_VIEW_MIN_TILE_BYTES`, `ROWS_VIEW_TILES_PER_SM`), the copy options
`pdl` and `evict_first`, and the rows-by-index ring's depth (`DEFAULT_ROW_STAGES`).

    python benchmarks/probes/copy_defaults.py --out copy-defaults.json [--only GROUP,...] [--samples 20]
    python benchmarks/probes/copy_defaults.py --dry-run        (the planned cases; no GPU needed)

Copies go through `tmakit.copy_` (strict: always TMA) with the options named; the rows ring, which
no option reaches, through `RowsPlan`s of other depths (as `rows.call` builds its own). Device
time: interleaved CUDA-graph replays over buffers rotated past 4x the L2 (`bench.timing`),
medians; every result compared byte for byte with torch's first, on a poisoned destination.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

COLUMNS = 8192  # a case's tensors are (rows, COLUMNS)
PAD = 64  # elements a strided case's source rows are padded by: not compact, so copied in its own tiles


@dataclass(frozen=True)
class Case:
    """A copy of `mib` MiB of `dtype` (torch's name) between "compact" tensors, from a "strided"
    source (rows padded) or a "transpose" (a column-major source into a row-major destination)."""

    layout: str
    dtype: str
    mib: int

    @property
    def name(self) -> str:
        return f"{self.layout} {self.dtype} {self.mib} MiB"


@dataclass(frozen=True)
class Group:
    """The defaults at `studies` (dotted paths of their values) timed at each of `cases`: the call
    with `base` options (the defaults' own call) beside it with each of `variants` added."""

    name: str
    studies: tuple[str, ...]
    cases: tuple[Case, ...]
    variants: tuple[dict, ...]
    base: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RowsCase:
    """`op` ("gather", or an int32 "add") of `count` rows of `row_bytes` by a random index into a
    table of `table_rows` rows."""

    op: str
    row_bytes: int
    table_rows: int
    count: int

    @property
    def name(self) -> str:
        return f"{self.op} {self.count} x {self.row_bytes} B rows of {self.table_rows}"


DEFAULTS = "tmakit.plan.copy_defaults"
FP16, FP32 = "float16", "float32"
GROUPS = (
    Group(
        "copy-tile-fp16",
        (f"{DEFAULTS}.COPY_TILE_ROWS", f"{DEFAULTS}.COPY_TILE_ROW_BYTES"),
        (Case("compact", FP16, 1), Case("compact", FP16, 16), Case("strided", FP16, 256)),
        ({"tile": (8, 256)}, {"tile": (32, 256)}, {"tile": (16, 128)}),
    ),
    Group(  # 4-byte types: the row bytes, which fp16's box limit hides
        "copy-tile-fp32",
        (f"{DEFAULTS}.COPY_TILE_ROWS", f"{DEFAULTS}.COPY_TILE_ROW_BYTES"),
        (Case("compact", FP32, 16), Case("strided", FP32, 256)),
        (
            {"tile": (8, 128)},
            {"tile": (32, 128)},
            {"tile": (16, 64)},
            {"tile": (16, 256)},
            {"tile": (8, 256)},
        ),
    ),
    Group(
        "copy-ring",
        (f"{DEFAULTS}.BYTES_IN_FLIGHT", f"{DEFAULTS}.MIN_STORES_IN_FLIGHT"),
        (Case("compact", FP16, 16), Case("strided", FP16, 256)),
        ({"stages": 4}, {"stages": 6}, {"stages": 12}, {"stages": 16}, {"store_depth": 2}),
    ),
    Group(  # at the same 32 KiB: other rows, the columns following
        "transpose-tile-fp16",
        (f"{DEFAULTS}.TRANSPOSE_TILE_ROWS",),
        (Case("transpose", FP16, 16), Case("transpose", FP16, 256)),
        ({"tile": (64, 256)}, {"tile": (256, 64)}),
    ),
    Group(
        "transpose-tile-fp32",
        (f"{DEFAULTS}.TRANSPOSE_TILE_ROWS",),
        (Case("transpose", FP32, 16), Case("transpose", FP32, 256)),
        ({"tile": (32, 256)}, {"tile": (128, 64)}, {"tile": (256, 32)}),
    ),
    Group(  # 32 KiB tiles, where MIN_STAGES, not BYTES_IN_FLIGHT, sets the depth
        "transpose-ring",
        (f"{DEFAULTS}.MIN_STAGES", f"{DEFAULTS}.MIN_STORES_IN_FLIGHT"),
        (Case("transpose", FP16, 16), Case("transpose", FP16, 256)),
        ({"stages": 2}, {"stages": 3}, {"stages": 5}, {"store_depth": 1}, {"store_depth": 4}),
    ),
    Group(  # past the L2, where a compact copy takes the rows view by default
        "rows-view",
        (f"{DEFAULTS}.ROWS_VIEW_TILE_BYTES", f"{DEFAULTS}.MIN_STAGES"),
        (Case("compact", FP16, 256), Case("compact", FP16, 1024)),
        (
            {"as_rows": True, "tile": (16, 256)},
            {"as_rows": True, "tile": (32, 256)},
            {"as_rows": True, "tile": (128, 256)},
            {"as_rows": True, "stages": 3},
            {"as_rows": True, "stages": 6},
        ),
    ),
    Group(  # small copies asked for as rows: the tile halved to reach every SM
        "rows-view-small",
        (f"{DEFAULTS}.ROWS_VIEW_MIN_TILE_BYTES", f"{DEFAULTS}.ROWS_VIEW_TILES_PER_SM"),
        (Case("compact", FP16, 1), Case("compact", FP16, 4)),
        ({"tile": (4, 256)}, {"tile": (8, 256)}, {"tile": (16, 256)}, {"tile": (32, 256)}),
        base={"as_rows": True},
    ),
    Group(  # `CopyOptions`' own defaults: evict-first within the L2, programmatic dependent launch
        "copy-options",
        ("tmakit.CopyOptions.pdl", "tmakit.CopyOptions.evict_first"),
        (Case("compact", FP16, 1), Case("compact", FP16, 16)),
        ({"pdl": False}, {"evict_first": False}),
    ),
)
ROWS_RING = "rows-ring"
ROWS_STUDIES = ("tmakit.rows.plan.DEFAULT_ROW_STAGES",)
ROWS_CASES = (RowsCase("gather", 256, 1 << 20, 1 << 19), RowsCase("add", 1024, 1 << 18, 1 << 17))
ROWS_STAGES = (2, 3, 6)  # beside the default (at most 7 stages of 32 KiB fit)


def resolve(path: str) -> object:
    """The value at a dotted path: its longest importable module, then attributes."""
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:]:
            value = getattr(value, name)
        return value
    raise ImportError(f"no module in {path}")


def label(options: dict) -> str:
    """A variant's name, as `CopyOptions` describes it ("default", "tile=8x256,as_rows=true")."""
    from tmakit import CopyOptions

    return CopyOptions(**options).describe()


def copy_variants(group: Group) -> dict[str, dict]:
    """label -> copy_ keywords: the base call first, then each variant added to it."""
    calls = [group.base, *({**group.base, **variant} for variant in group.variants)]
    return {label(options): options for options in calls}


def studied(groups: tuple[Group, ...], rows: bool) -> dict[str, object]:
    """Each studied default's path and its value now (an unknown path fails here)."""
    paths = [path for group in groups for path in group.studies] + (list(ROWS_STUDIES) if rows else [])
    return {path: resolve(path) for path in dict.fromkeys(paths)}


def dry_run(groups: tuple[Group, ...], rows: bool) -> None:
    for path, value in studied(groups, rows).items():
        print(f"{path} = {value!r}")
    timed = 0
    for group in groups:
        variants = copy_variants(group)
        print(f"\n{group.name}: {', '.join(path.rsplit('.', 1)[1] for path in group.studies)}")
        for case in group.cases:
            print(f"  {case.name}: {' | '.join(variants)}")
            timed += len(variants)
    if rows:
        stages = sorted({resolve(ROWS_STUDIES[0]), *ROWS_STAGES})
        print(f"\n{ROWS_RING}: DEFAULT_ROW_STAGES")
        for case in ROWS_CASES:
            print(f"  {case.name}: {' | '.join(f'stages={s}' for s in stages)}")
            timed += len(stages)
    print(f"\n{timed} variants timed")


def copy_pairs(case: Case, count: int) -> list:
    """`count` (dst, src) pairs of the case, each its own memory."""
    import torch

    dtype = getattr(torch, case.dtype)
    rows = case.mib * 2**20 // dtype.itemsize // COLUMNS
    pairs = []
    for _ in range(count):
        if case.layout == "transpose":
            src = torch.randn(COLUMNS, rows, device="cuda").to(dtype).t()
        elif case.layout == "strided":
            src = torch.randn(rows, COLUMNS + PAD, device="cuda").to(dtype)[:, :COLUMNS]
        else:
            src = torch.randn(rows, COLUMNS, device="cuda").to(dtype)
        pairs.append((torch.empty(rows, COLUMNS, dtype=dtype, device="cuda"), src))
    return pairs


def same_bytes(dst, src) -> bool:
    import torch

    return torch.equal(dst.view(torch.uint8), src.contiguous().view(torch.uint8))


def timed_rows(variants: dict[str, list], verified: dict[str, str], samples: int, moved: int) -> list[dict]:
    """Interleaved graph samples of the variants that ran right; one row each, refused or wrong
    ones too (untimed)."""
    from tmakit.bench.timing import interleaved_graph_samples_us

    taken = interleaved_graph_samples_us(variants, samples) if variants else {}
    rows = []
    for name, verdict in verified.items():
        us = taken.get(name)
        median = statistics.median(us) if us else None
        rows.append(
            {
                "variant": name,
                "verified": verdict,
                "median_us": median,
                "min_us": min(us) if us else None,
                "max_us": max(us) if us else None,
                "gb_per_s": moved / median / 1e3 if median else None,
                "samples_us": us,
            }
        )
    return rows


def run_copy_case(group: Group, case: Case, samples: int, l2_bytes: int) -> list[dict]:
    import torch

    import tmakit
    from tmakit.bench.suites import rotation_buffers

    nbytes = case.mib * 2**20
    pairs = copy_pairs(case, rotation_buffers(2 * nbytes, l2_bytes))
    launches, verified = {}, {}
    for name, options in copy_variants(group).items():
        try:
            for dst, src in pairs:
                dst.view(torch.uint8).fill_(0xFF)
                tmakit.copy_(dst, src, strict=True, **options)
        except tmakit.TmaConfigError as error:  # an option this case's plan refuses: said, not timed
            verified[name] = f"refused: {error}"
            continue
        torch.cuda.synchronize()
        if not all(same_bytes(dst, src) for dst, src in pairs):
            verified[name] = "MISMATCH"
            continue
        verified[name] = "ok: every byte"
        launches[name] = [
            lambda d=dst, s=src, o=options: tmakit.copy_(d, s, strict=True, **o) for dst, src in pairs
        ]
    rows = timed_rows(launches, verified, samples, 2 * nbytes)
    default = label(group.base)
    for row in rows:
        options = copy_variants(group)[row["variant"]]
        row.update(
            group=group.name,
            studies=list(group.studies),
            case=case.name,
            layout=case.layout,
            dtype=case.dtype,
            mib=case.mib,
            shape=list(pairs[0][0].shape),
            options={
                key: list(value) if isinstance(value, tuple) else value for key, value in options.items()
            },
            default=row["variant"] == default,
            rotated_buffers=len(pairs),
        )
    return rows


def run_rows_case(case: RowsCase, samples: int, l2_bytes: int, sm_count: int) -> list[dict]:
    import torch

    import tmakit
    from tmakit.bench.suites import rotation_buffers
    from tmakit.rows.launch import rows_launcher
    from tmakit.rows.plan import DEFAULT_ROW_STAGES, RowsPlan

    generator = torch.Generator(device="cuda").manual_seed(2026)
    words = case.row_bytes // 4
    sets = []
    for _ in range(rotation_buffers(2 * case.count * case.row_bytes, l2_bytes)):
        table = torch.randint(
            -1000, 1000, (case.table_rows, words), dtype=torch.int32, device="cuda", generator=generator
        )
        index = torch.randint(0, case.table_rows, (case.count,), device="cuda", generator=generator)
        compact = torch.randint(
            -1000, 1000, (case.count, words), dtype=torch.int32, device="cuda", generator=generator
        )
        sets.append((table, index, compact))
    dtype = "int32" if case.op == "add" else None
    launches, verified, chosen = {}, {}, {}
    for stages in sorted({DEFAULT_ROW_STAGES, *ROWS_STAGES}):
        name = f"stages={stages}"
        chosen[name] = stages
        try:
            plan = RowsPlan(
                case.op, 1, case.row_bytes, 1 << 20, stages=stages, sm_count=sm_count, dtype=dtype
            )
        except tmakit.TmaConfigError as error:
            verified[name] = f"refused: {error}"
            continue
        launch = rows_launcher(plan.kernel_plan(), "int64", "cuda:0")
        right = True
        for table, index, compact in sets:
            if case.op == "add":
                expected = table.clone().index_add_(0, index, compact)
            else:
                compact.view(torch.uint8).fill_(0xFF)
                expected = table[index]
            launch(table.view(torch.uint8), index, compact.view(torch.uint8))
            torch.cuda.synchronize()
            right &= torch.equal(table if case.op == "add" else compact, expected)
        verified[name] = "ok: every byte" if right else "MISMATCH"
        if right:
            launches[name] = [
                lambda t=t, i=i, c=c, f=launch: f(t.view(torch.uint8), i, c.view(torch.uint8))
                for t, i, c in sets
            ]
    moved = (3 if case.op == "add" else 2) * case.count * case.row_bytes  # an add reads its rows too
    rows = timed_rows(launches, verified, samples, moved)
    for row in rows:
        row.update(
            group=ROWS_RING,
            studies=list(ROWS_STUDIES),
            case=case.name,
            options={"stages": chosen[row["variant"]]},
            default=chosen[row["variant"]] == DEFAULT_ROW_STAGES,
            rotated_buffers=len(sets),
        )
    return rows


def summary(rows: list[dict]) -> dict:
    """Per group and case: the default's median beside the fastest variant's."""
    cases: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        cases.setdefault((row["group"], row["case"]), []).append(row)
    out: dict[str, dict] = {}
    for (group, case), found in cases.items():
        timed = [row for row in found if row["median_us"] is not None]
        default = next((row for row in timed if row["default"]), None)
        fastest = min(timed, key=lambda row: row["median_us"], default=None)
        out.setdefault(group, {})[case] = {
            "default": default and default["variant"],
            "default_us": default and default["median_us"],
            "fastest": fastest and fastest["variant"],
            "fastest_us": fastest and fastest["median_us"],
            "default_over_fastest": default["median_us"] / fastest["median_us"]
            if default and fastest
            else None,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--out", "--json", dest="out", type=Path, help="where the study is written")
    parser.add_argument(
        "--only", help=f"groups, comma-separated: {', '.join(g.name for g in GROUPS)}, {ROWS_RING}"
    )
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--commit", default=os.environ.get("TMAKIT_COMMIT"), help="recorded in the context")
    parser.add_argument("--dry-run", action="store_true", help="print the planned cases and exit")
    args = parser.parse_args(argv)
    names = [g.name for g in GROUPS] + [ROWS_RING]
    only = names if args.only is None else args.only.split(",")
    unknown = sorted(set(only) - set(names))
    if unknown:
        parser.error(f"unknown group {', '.join(unknown)}; the groups are {', '.join(names)}")
    groups = tuple(group for group in GROUPS if group.name in only)
    if args.dry_run:
        dry_run(groups, ROWS_RING in only)
        return 0
    if args.out is None:
        parser.error("--out is required (or --dry-run)")

    import torch

    from tmakit.bench.report import device_context

    properties = torch.cuda.get_device_properties(0)
    l2_bytes, sm_count = properties.L2_cache_size, properties.multi_processor_count
    runs = [
        partial(run_copy_case, group, case, args.samples, l2_bytes)
        for group in groups
        for case in group.cases
    ]
    if ROWS_RING in only:
        runs += [partial(run_rows_case, case, args.samples, l2_bytes, sm_count) for case in ROWS_CASES]
    rows = []
    for run in runs:
        found = run()
        rows += found
        for row in found:
            timed = "" if row["median_us"] is None else f"{row['median_us']:9.2f} us"
            print(
                f"{row['group']:20s} {row['case']:34s} {row['variant']:28s} {timed:12s} {row['verified']}",
                flush=True,
            )
        torch.cuda.empty_cache()
    context = device_context(args.commit)
    context.update(
        python=platform.python_version(),
        step=None,
        hot_l2=False,
        samples=args.samples,
        groups=only,
        defaults={
            path: value if isinstance(value, (int, bool, type(None))) else repr(value)
            for path, value in studied(groups, ROWS_RING in only).items()
        },
    )
    document = {
        "study": "copy-defaults",
        "what": __doc__.split("\n\n")[0].replace("\n", " "),
        "context": context,
        "rows": rows,
        "summary": {"groups": summary(rows), "source": "benchmarks/probes/copy_defaults.py"},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
