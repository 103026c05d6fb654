"""The timing experiment: device time of tmakit's kernels beside torch (and Triton), same run,
same timer. The arithmetic and the reports are pure Python (tested on a CPU); `measure_*` need a GPU.

Why a hand-written timer: a compiled CuTe DSL call costs ~10 us of host time, as long as a small
kernel, so per-launch events measure the host. `triton.testing.do_bench` times each call with
events (host-bound for short kernels), `do_bench_cudagraph` does not rotate buffers, and
`cutlass.testing.benchmark` rotates workspaces and replays graphs but returns only a mean. Here:
one CUDA graph replays a pass over enough rotated buffers that the working set exceeds 4x the L2,
and each replay is one sample of device time per launch.
"""

from __future__ import annotations

import datetime
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .plan import H200_SMS, PipelinePlan

# Datasheet DRAM bandwidth in bytes/s, by a substring of the device name.
PEAK_BANDWIDTH = {"H200": 4.8e12, "H100 80GB HBM3": 3.35e12, "H100 SXM": 3.35e12}
L2_BYTES_DEFAULT = 60 * 1024 * 1024  # H200; the GPU path reads the real size
MIN_SAMPLES = 50


def peak_bandwidth(device_name: str) -> float | None:
    """Datasheet DRAM bandwidth of the card, or None for a card we have no figure for."""
    for key, peak in PEAK_BANDWIDTH.items():
        if key in device_name:
            return peak
    return None


def bytes_moved(kind: str, tensor_bytes: int) -> int:
    """The fewest bytes that must cross DRAM: each input read once, each output written once."""
    return {"load": 1, "sum": 1, "copy": 2}[kind] * tensor_bytes


def rotation_buffers(bytes_per_launch: int, l2_bytes: int, hot_l2: bool = False) -> int:
    """Buffers to rotate over so a pass touches more than 4x the L2 (1 when timing L2-hot)."""
    if hot_l2:
        return 1
    return max(2, 4 * l2_bytes // bytes_per_launch + 1)


def rotated_sources(plan: Any, l2_bytes: int, hot_l2: bool) -> list:
    """The plan's position-dependent input and copies of it (copies, not views: each buffer must
    be its own memory for the rotation to defeat the L2), `rotation_buffers` in all."""
    from . import gpu

    first = gpu.make_input_tensor(plan)
    return [first] + [first.clone() for _ in range(rotation_buffers(plan.tensor_bytes, l2_bytes, hot_l2) - 1)]


@dataclass
class BenchRow:
    """One kernel on one size: device-time samples (us per launch) and what they mean."""

    kernel: str  # e.g. "tmakit load", "torch copy_"
    kind: str  # "load", "copy" or "sum": decides the bytes counted
    shape: tuple[int, ...]
    dtype: str
    tensor_bytes: int
    samples_us: list[float]
    verified: str | None = None  # the same run's verification verdict, if any
    compile_seconds: float | None = None
    notes: dict = field(default_factory=dict)
    host_us: float | None = None  # host cost of one call of the compiled kernel (measured apart)

    @property
    def bytes_moved(self) -> int:
        return bytes_moved(self.kind, self.tensor_bytes)

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples_us)

    @property
    def gbps(self) -> float:
        return self.bytes_moved / self.median_us / 1e3

    def percent_of_peak(self, peak: float | None) -> float | None:
        return None if peak is None else 100.0 * self.gbps * 1e9 / peak

    def summary(self, peak: float | None) -> dict:
        return {
            "kernel": self.kernel,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "tensor_bytes": self.tensor_bytes,
            "bytes_moved": self.bytes_moved,
            "median_us": self.median_us,
            "min_us": min(self.samples_us),
            "max_us": max(self.samples_us),
            "samples": len(self.samples_us),
            "gbps": self.gbps,
            "percent_of_peak": self.percent_of_peak(peak),
            "verified": self.verified,
            "compile_seconds": self.compile_seconds,
            "host_us_per_call": self.host_us,
            **self.notes,
        }


def ratios(rows: list[BenchRow], baseline: str) -> dict[tuple, float]:
    """GB/s of each row over the baseline row of the same shape and dtype (same run)."""
    base = {(r.shape, r.dtype): r.gbps for r in rows if r.kernel == baseline}
    return {
        (r.kernel, r.shape, r.dtype): r.gbps / base[(r.shape, r.dtype)]
        for r in rows
        if (r.shape, r.dtype) in base
    }


def table_rows(rows: list[BenchRow], peak: float | None, baselines: list[str]) -> list[list[str]]:
    """Printable cells: kernel, size, median/min/max us, GB/s, % peak, ratios, verified."""
    ratio_maps = {b: ratios(rows, b) for b in baselines}
    cells = []
    for row in rows:
        pct = row.percent_of_peak(peak)
        cells.append(
            [
                row.kernel,
                "x".join(map(str, row.shape)) + f" {row.dtype}",
                f"{row.tensor_bytes / 2**20:.1f}",
                f"{row.median_us:.2f}",
                f"{min(row.samples_us):.2f}-{max(row.samples_us):.2f}",
                f"{row.gbps:.0f}",
                "-" if pct is None else f"{pct:.1f}",
                "-" if row.host_us is None else f"{row.host_us:.1f}",
                *(
                    f"{ratio_maps[b].get((row.kernel, row.shape, row.dtype), float('nan')):.2f}"
                    for b in baselines
                ),
                row.verified or "-",
            ]
        )
    return cells


TABLE_HEADER = ["kernel", "shape", "MiB", "median us", "min-max us", "GB/s", "% peak", "host us/call"]


def report(rows: list[BenchRow], context: dict, baselines: list[str]) -> dict:
    """The JSON report: context (card, versions, commit, date), every sample, every summary."""
    peak = context.get("peak_bandwidth")
    return {
        "context": {**context, "date": context.get("date") or _now()},
        "baselines": baselines,
        "rows": [{**row.summary(peak), "samples_us": row.samples_us} for row in rows],
        "ratios": {
            b: {f"{k[0]} {'x'.join(map(str, k[1]))} {k[2]}": v for k, v in ratios(rows, b).items()}
            for b in baselines
        },
    }


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def plot(rows: list[BenchRow], path: str, peak: float | None, title: str) -> None:
    """PNG of GB/s against size, one line per kernel, the datasheet peak as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    for kernel in dict.fromkeys(r.kernel for r in rows):
        points = sorted((r.tensor_bytes, r.gbps) for r in rows if r.kernel == kernel)
        axes.plot([p[0] / 2**20 for p in points], [p[1] for p in points], marker="o", label=kernel)
    if peak:
        axes.axhline(peak / 1e9, linestyle="--", color="gray", label=f"datasheet peak {peak / 1e12:.2f} TB/s")
    axes.set_xscale("log", base=2)
    axes.set_xlabel("tensor size (MiB)")
    axes.set_ylabel("GB/s (bytes that must move / median device time)")
    axes.set_title(title)
    axes.legend()
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


# -- on the GPU --------------------------------------------------------------------------------
def graph_samples_us(
    launches: list[Callable[[], Any]], samples: int = MIN_SAMPLES, min_launches: int = 20
) -> list[float]:
    """Device time per launch: `launches` (one per rotated buffer) captured as passes into one
    CUDA graph of at least `min_launches` launches; each replay, timed with events, is a sample."""
    return _pass_samples_us(launches, samples, min_launches, graph=True)


def stream_samples_us(
    launches: list[Callable[[], Any]], samples: int = MIN_SAMPLES, min_launches: int = 20
) -> list[float]:
    """Device time per launch as a user's eager loop gets it: passes of at least `min_launches`
    launches queued on a stream (no graph), events around each pass. Only device time while the
    host queues launches faster than the GPU runs them (copies of >= 16 MiB here); a CUDA graph
    can run an operation differently (torch's `copy_` becomes a graph memcpy node)."""
    return _pass_samples_us(launches, samples, min_launches, graph=False)


def _pass_samples_us(
    launches: list[Callable[[], Any]], samples: int, min_launches: int, graph: bool
) -> list[float]:
    """Events around each of `samples` passes over `launches` (at least `min_launches` launches
    a pass) on a side stream, replayed from one CUDA graph or launched eagerly; us per launch."""
    import torch

    passes = max(1, math.ceil(min_launches / len(launches)))

    def run_pass() -> None:
        for _ in range(passes):
            for launch in launches:
                launch()

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for launch in launches:  # warm-up outside any capture (first calls load modules)
            launch()
        torch.cuda.synchronize()
        timed = run_pass
        if graph:
            captured = torch.cuda.CUDAGraph()
            with torch.cuda.graph(captured, stream=stream):
                run_pass()
            timed = captured.replay  # each pass is one replay
        for _ in range(3):
            timed()
        torch.cuda.synchronize()
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(samples)
        ]
        for start, end in events:
            start.record(stream)
            timed()
            end.record(stream)
        torch.cuda.synchronize()
    per_pass = passes * len(launches)
    return [start.elapsed_time(end) * 1000.0 / per_pass for start, end in events]


def host_launch_us(launch: Callable[[], Any], calls: int = 1000, repeats: int = 7) -> float:
    """Host cost of one call of an already compiled kernel (`host_costs_us` of this one)."""
    return host_costs_us({"launch": launch}, calls, repeats)["launch"]


def host_costs_us(
    launches: dict[str, Callable[[], Any]], calls: int = 1000, repeats: int = 7
) -> dict[str, float]:
    """Host microseconds per call of each of `launches` (already compiled): back-to-back calls of
    a tiny problem (the GPU finishes each before the host issues the next), wall time / calls,
    the median of `repeats` rounds after a warm-up round. The rounds interleave the launches, each
    round in another order: the host's speed drifts within a run (the first round of a process
    ran up to 1.6x slower; launches timed one after another differed by up to 1.5 us), and
    interleaving spreads the drift over all of them."""
    import torch

    names = list(launches)
    rounds: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(repeats + 1):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            launch = launches[name]
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                launch()
            torch.cuda.synchronize()
            rounds[name].append((time.perf_counter() - start) * 1e6 / calls)
    return {name: statistics.median(samples[1:]) for name, samples in rounds.items()}


def device_context(commit: str | None) -> dict:
    """Card, driver, versions, L2 size and peak: the JSON's context."""
    import subprocess

    import torch

    from .compile import installed_dsl_version

    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        driver = None
    return {
        "device": props.name,
        "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", L2_BYTES_DEFAULT),
        "driver": driver,
        "cuda_runtime": torch.version.cuda,
        "torch": torch.__version__,
        "nvidia_cutlass_dsl": installed_dsl_version(),
        "commit": commit,
        "peak_bandwidth": peak_bandwidth(props.name),
        "date": _now(),
    }


def bench_size(
    plan: Any, l2_bytes: int, hot_l2: bool, samples: int, baselines: bool = True
) -> list[BenchRow]:
    """tmakit's load kernel and the baselines on one configuration, verified in the same run."""
    import torch

    from . import gpu
    from .baselines import torch_copy_launches, torch_sum_launches, triton_supports, triton_tma_copy_launches
    from .compile import to_cute_tensor
    from .loads import compile_tile_load, verify_tile_load

    config = plan.config
    tensor_bytes = plan.tensor_bytes
    verdict = verify_tile_load(plan)  # the same configuration's output, checked in this run
    compiled = compile_tile_load(plan, consumer="none")
    sources = rotated_sources(plan, l2_bytes, hot_l2)
    count = len(sources)
    cute_sources = [to_cute_tensor(s) for s in sources]
    row = lambda name, kind, launches, **extra: BenchRow(  # noqa: E731
        name,
        kind,
        tuple(config.shape),
        config.dtype,
        tensor_bytes,
        graph_samples_us(launches, samples),
        **extra,
    )
    rows = [
        row(
            "tmakit load",
            "load",
            [lambda s=s: compiled(s, s, gpu.current_stream()) for s in cute_sources],
            verified=str(verdict),
            compile_seconds=compiled.compile_seconds,
            notes={"rotated_buffers": count, "tile": list(config.tile)},
        )
    ]
    if baselines:
        rows.append(row("torch copy_", "copy", torch_copy_launches(sources)))
        rows.append(row("torch sum", "sum", torch_sum_launches(sources)))
        if triton_supports(config):
            rows.append(row("triton TMA copy", "copy", triton_tma_copy_launches(sources, config.tile)))
    del sources, cute_sources
    torch.cuda.empty_cache()
    return rows


@dataclass(frozen=True)
class PipelineVariant:
    """A pipelined kernel to time: `consumer` "none" (load-only) or "rowsum" (load + row sums)."""

    stages: int
    consumer_warps: int = 1
    persistent: bool = False
    consumer: str = "none"
    prefetch_tiles: int = 0
    prefetch_descriptor: bool = False

    def pipeline(self, load: Any, sm_count: int = H200_SMS) -> Any:
        """The `PipelinePlan` this variant runs on `load`."""
        return PipelinePlan(
            load, self.stages, self.consumer_warps, self.persistent, sm_count,
            prefetch_tiles=self.prefetch_tiles, prefetch_descriptor=self.prefetch_descriptor,
        )  # fmt: skip

    @property
    def name(self) -> str:
        grid = ", persistent" if self.persistent else ""
        what = {"rowsum": "load+rowsum", "copy": "copy"}.get(self.consumer, "load")
        prefetch = f", prefetch {self.prefetch_tiles}" if self.prefetch_tiles else ""
        prefetch += ", descriptor prefetch" if self.prefetch_descriptor else ""
        return f"tmakit {what} {self.stages}st x{self.consumer_warps}w{grid}{prefetch}"


def parse_variants(text: str) -> list[PipelineVariant]:
    """ "4", "4x2p", "4x4r", "4pc", "1f3t" ... -> variants: stages, x consumer warps, p persistent,
    r row sums (or c: a TMA-store copy), fN prefetch N tiles ahead, t prefetch the descriptor."""
    import re

    variants = []
    for item in filter(None, text.split(",")):
        match = re.fullmatch(r"(\d+)(?:x(\d+))?(p?)([rc]?)(?:f(\d+))?(t?)", item)
        if not match:
            raise ValueError(f"pipeline variant {item!r} is not STAGES[xWARPS][p][r|c][fN][t]")
        stages, warps, persistent, use, prefetch, descriptor = match.groups()
        variants.append(
            PipelineVariant(
                int(stages),
                int(warps or 1),
                bool(persistent),
                {"r": "rowsum", "c": "copy", "": "none"}[use],
                int(prefetch or 0),
                bool(descriptor),
            )  # fmt: skip
        )
    return variants


def bench_pipelines(
    plan: Any, variants: list[PipelineVariant], l2_bytes: int, hot_l2: bool, samples: int
) -> list:
    """Pipelined variants on one configuration, each verified in the same run (store-back for
    load-only variants, torch's row sums for row-sum variants); torch's fp32 row sum beside them."""
    import torch

    from . import gpu
    from .compile import to_cute_tensor
    from .pipelines import compile_pipelined_load, new_guard, verify_pipelined_load

    config = plan.config
    tensor_bytes = plan.tensor_bytes
    sources = rotated_sources(plan, l2_bytes, hot_l2)
    count = len(sources)
    guard = to_cute_tensor(new_guard())
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for variant in variants:
        pipeline = variant.pipeline(plan, sm_count)
        # Guarded: a schedule bug raises here instead of hanging the timing below.
        verified = verify_pipelined_load(
            pipeline, "store" if variant.consumer == "none" else variant.consumer, hang_guard=True
        )
        compiled = compile_pipelined_load(pipeline, variant.consumer)
        make_out = {
            "rowsum": lambda s, p=pipeline: torch.zeros(p.rowsum_shape, dtype=torch.float32, device="cuda"),
            "copy": lambda s: torch.empty_like(s),  # a destination per source: the copy writes it
        }.get(variant.consumer, lambda s: s)
        outs = [make_out(s) for s in sources]
        pairs = [(to_cute_tensor(s), to_cute_tensor(o)) for s, o in zip(sources, outs, strict=True)]
        if variant.consumer == "rowsum":  # the kernel adds into its output: zeroing it is part of the time
            launches = [
                lambda p=p, o=o, c=compiled: (o.zero_(), c(p[0], p[1], guard, gpu.current_stream()))
                for p, o in zip(pairs, outs, strict=True)
            ]
        else:
            launches = [lambda p=p, c=compiled: c(p[0], p[1], guard, gpu.current_stream()) for p in pairs]
        rows.append(
            BenchRow(
                variant.name,
                "copy" if variant.consumer == "copy" else "load",
                tuple(config.shape),
                config.dtype,
                tensor_bytes,
                graph_samples_us(launches, samples),
                str(verified),
                compiled.compile_seconds,
                {
                    "stages": variant.stages,
                    "consumer_warps": variant.consumer_warps,
                    "persistent": variant.persistent,
                    "grid": pipeline.grid,
                    "rotated_buffers": count,
                },
            )  # fmt: skip
        )
    if any(v.consumer == "rowsum" for v in variants):
        from .baselines import triton_supports, triton_tma_rowsum_launches

        baselines = {"torch row-sum fp32": [lambda s=s: s.sum(dim=-1, dtype=torch.float32) for s in sources]}
        if triton_supports(config):
            baselines["triton TMA row-sum fp32"] = triton_tma_rowsum_launches(sources)
        for name, launches in baselines.items():
            rows.append(
                BenchRow(
                    name,
                    "sum",
                    tuple(config.shape),
                    config.dtype,
                    tensor_bytes,
                    graph_samples_us(launches, samples),
                )  # fmt: skip
            )
    del sources, outs, pairs, launches  # every reference to the buffers, so the cache can free them
    torch.cuda.empty_cache()
    return rows


@dataclass(frozen=True)
class CopyOption:
    """A `tmakit.copy_` configuration to time; None takes the API's default (tile, ring stages,
    TMA stores in flight per block); blocks per SM of the persistent grid; `as_rows`: compact
    tensors copied as rows of their memory (the tile is then a tile of that view); `evict_first`:
    L2 evict-first hints on the loads and stores (None: the API's choice); `hints`: (load, store)
    L2 hints overriding that; `tile_order`: the persistent grid's walk (`plan.TILE_ORDERS`); `bulk`:
    the rows view copied with non-tensor bulk copies (no tensor maps)."""

    tile: tuple[int, int] | None = None
    stages: int | None = None
    store_depth: int | None = None
    blocks_per_sm: int = 1
    as_rows: bool = False
    evict_first: bool | None = None
    pdl: bool | None = None
    hints: tuple[str | None, str | None] = (None, None)
    tile_order: str = "interleaved"
    bulk: bool = False

    @property
    def name(self) -> str:
        parts = [
            "default tile" if self.tile is None else f"{self.tile[0]}x{self.tile[1]}",
            "default stages" if self.stages is None else f"{self.stages}st",
        ]
        if self.store_depth is not None:
            parts.append(f"{self.store_depth} stores")
        if self.blocks_per_sm != 1:
            parts.append(f"{self.blocks_per_sm}/SM")
        if self.bulk:
            parts.append("bulk copies")
        elif self.as_rows:
            parts.append("rows view")
        if self.evict_first is not None:
            parts.append("evict first" if self.evict_first else "no evict hint")
        if self.pdl is not None:
            parts.append("PDL" if self.pdl else "no PDL")
        for side, hint in zip(("loads", "stores"), self.hints, strict=True):
            if hint is not None:
                parts.append(f"{side} {hint.replace('_', ' ')}")
        if self.tile_order != "interleaved":
            parts.append(f"{self.tile_order} order")
        return ", ".join(parts)

    @property
    def knobs(self) -> dict:
        """`tmakit.copy_`'s keyword arguments (those left None take the API's default)."""
        knobs = {
            "store_depth": self.store_depth,
            "blocks_per_sm": self.blocks_per_sm,
            "as_rows": self.as_rows,
            "evict_first": self.evict_first,
        }
        if self.pdl is not None:
            knobs["pdl"] = self.pdl
        if self.hints != (None, None):
            knobs["load_hint"], knobs["store_hint"] = self.hints
        if self.tile_order != "interleaved":
            knobs["tile_order"] = self.tile_order
        if self.bulk:
            knobs["bulk"] = True
        return knobs


# A copy option's one-letter L2 hints ("-": the API's choice).
HINT_LETTERS = {"f": "evict_first", "l": "evict_last", "n": "evict_normal", "0": "none", "-": None}


def parse_copy_options(text: str) -> list[CopyOption]:
    """ "auto,64x256s4,32x256s6d4,s3b2,r,r32x256s8,16x256s8e,n,p0,hfl,c" -> options:
    [r|k][ROWSxCOLS][sSTAGES][dSTORES][bBLOCKS_PER_SM][e|n][p0|p1][hLS][c|v], each part left out
    taking the API's default ("auto": all of them); a leading "r" copies compact tensors as rows
    of their memory, "k" copies those rows with bulk copies instead of tensor maps, "e" hints L2
    to evict the copy's lines first, "n" gives no hint; "p1"/"p0":
    programmatic dependent launch on/off; "hLS": the loads' and the stores' L2 hints, each one of
    f(irst), l(ast), n(ormal), 0 (none), - (the API's); "c": blocked tile order, "v": columns."""
    import re

    options = []
    grammar = "[r|k][ROWSxCOLS][sSTAGES][dSTORES][bBLOCKS][e|n][p0|p1][hLS][c|v]"
    for item in filter(None, text.split(",")):
        pattern = (
            r"([rk])?(?:(\d+)x(\d+))?(?:s(\d+))?(?:d(\d+))?(?:b(\d+))?([en])?(?:p([01]))?"
            r"(?:h([-fln0]{2}))?([cv])?"
        )
        match = re.fullmatch(pattern, item.replace("auto", ""))
        if not match:
            raise ValueError(f"copy option {item!r} is not auto or {grammar}")
        as_rows, rows, cols, stages, depth, blocks, evict_first, pdl, hints, order = match.groups()
        tile = (int(rows), int(cols)) if rows else None
        number = lambda text: int(text) if text else None  # noqa: E731
        hint = None if evict_first is None else evict_first == "e"
        launch = None if pdl is None else pdl == "1"
        sides = tuple(HINT_LETTERS[letter] for letter in hints or "--")
        knobs = (
            number(stages),
            number(depth),
            int(blocks or 1),
            bool(as_rows),
            hint,
            launch,
            sides,
            {None: "interleaved", "c": "blocked", "v": "columns"}[order],
            as_rows == "k",
        )
        options.append(CopyOption(tile, *knobs))
    return options


def first_wrong_tile(found: Any, expected: Any, tile: tuple[int, int]) -> str | None:
    """None when `found` equals `expected` bit for bit; else the first wrong element and its tile
    (batch..., row block, column tile)."""
    import torch

    bits = signed_bits(found)
    wrong = bits(found) != bits(expected)
    if not bool(wrong.any()):
        return None
    index = [int(i) for i in torch.nonzero(wrong)[0]]
    *batch, row, col = index
    return (
        f"{int(wrong.sum())} wrong elements; first at {tuple(index)}, tile "
        f"{(*batch, row // tile[0], col // tile[1])}: "
        f"{found[tuple(index)].item()} vs {expected[tuple(index)].item()}"
    )


def signed_bits(tensor: Any) -> Callable[[Any], Any]:
    """A view of a tensor's raw bits as the signed integer type of its width (exact compares)."""
    from . import gpu
    from .api import tmakit_dtype
    from .config import DTYPES

    bits_dtype = gpu.signed_view_dtype(DTYPES[tmakit_dtype(tensor.dtype)])
    return lambda t: t.view(bits_dtype)


# Copies at least this large are also timed eagerly (`stream_samples_us`): long enough that the
# host's ~6 us per call stays ahead of the GPU.
STREAM_TIMED_BYTES = 16 * 2**20
STREAM_TIMED = "[stream]"


def bench_copy(
    plan: Any, transpose: bool, options: list[CopyOption], l2_bytes: int, hot_l2: bool, samples: int
) -> list:
    """`tmakit.copy_` as a user calls it (TVM-FFI launch, torch's stream), each option verified
    element for element in the same run (destination poisoned first), beside torch's `copy_` of
    the same pair. `transpose`: the source is the column-major view `x.t()` of each rotated
    buffer and the destination row-major - torch's `dst.copy_(x.t())`."""
    import torch

    from . import api

    config = plan.config
    sources = rotated_sources(plan, l2_bytes, hot_l2)
    if transpose:
        sources = [s.t() for s in sources]  # column-major views; the buffers stay distinct memory
    destinations = [torch.empty(s.shape, dtype=s.dtype, device="cuda") for s in sources]
    bits = signed_bits(sources[0])
    what = "transpose" if transpose else "copy"
    shape = tuple(sources[0].shape)
    rows, eager = [], []  # eager: (graph-timed row, its launches), timed on a stream after the graphs
    for option in options:
        bits(destinations[0]).fill_(-1)  # poison: every element the copy must write
        start = time.perf_counter()
        api.copy_(destinations[0], sources[0], option.tile, option.stages, **option.knobs)  # compiles once
        torch.cuda.synchronize()
        first_call = time.perf_counter() - start
        wrong = first_wrong_tile(
            destinations[0], sources[0], option.tile or api.copy_tile(config.dtype, transpose)
        )
        launches = [
            lambda s=s, d=d, o=option: api.copy_(d, s, o.tile, o.stages, **o.knobs)
            for s, d in zip(sources, destinations, strict=True)
        ]
        rows.append(
            BenchRow(
                f"tmakit.copy_ {what} ({option.name})",
                "copy",
                shape,
                config.dtype,
                plan.tensor_bytes,
                graph_samples_us(launches, samples),
                f"ok: every element bit-exact ({sources[0].numel()})" if wrong is None else f"WRONG: {wrong}",
                first_call,
                {
                    "tile": list(option.tile) if option.tile else "default",
                    "stages": option.stages,
                    "rotated_buffers": len(sources),
                    "transpose": transpose,
                    "bulk": option.bulk,
                },
            )  # fmt: skip
        )
        eager.append((rows[-1], launches))
    name = "torch copy_ (transpose)" if transpose else "torch copy_"
    torch_launches = [lambda s=s, d=d: d.copy_(s) for s, d in zip(sources, destinations, strict=True)]
    rows.append(
        BenchRow(
            name, "copy", shape, config.dtype, plan.tensor_bytes, graph_samples_us(torch_launches, samples)
        )
    )
    if plan.tensor_bytes >= STREAM_TIMED_BYTES:  # the eager loop beside the graph, every row
        for graph_row, timed in [*eager, (rows[-1], torch_launches)]:
            samples_us = stream_samples_us(timed, samples)
            rows.append(replace(graph_row, kernel=f"{graph_row.kernel} {STREAM_TIMED}", samples_us=samples_us,
                                compile_seconds=None))  # fmt: skip
    del sources, destinations, launches, eager, torch_launches
    torch.cuda.empty_cache()
    return rows


def measure_copy_host_cost(transpose: bool = False) -> dict:
    """Host microseconds per `tmakit.copy_` call on a tiny tensor, the configuration repeated
    call after call (what a user's loop pays: the whole public call, its launcher tried first);
    beside it the parts and variants of that call (alternating configurations pay the full
    lookup and alignment check) and torch's own calls, all timed interleaved."""
    import torch

    from . import api

    x = torch.randn(256, 512, device="cuda").to(torch.float16)
    src = x.t() if transpose else x
    dst = torch.empty(src.shape, dtype=src.dtype, device="cuda")
    prefix = f"tmakit_copy_{'transpose_' if transpose else ''}"
    launches = {}
    # The default copy, without PDL (a plain launch), and (same layout) the bulk copy, whose
    # launch encodes no tensor maps: what each part of the launch costs.
    variants = {"": {}, "no_pdl_": {"pdl": False}}
    if not transpose:
        variants.update({"bulk_": {"bulk": True}, "bulk_no_pdl_": {"bulk": True, "pdl": False}})
    for label, knobs in variants.items():
        api.copy_(dst, src, **knobs)
        launcher = api._plan_copy(dst, src, **knobs)  # the compiled launch this call looks up
        launches[f"{prefix}{label}call_us"] = lambda k=knobs: api.copy_(dst, src, **k)
        # The launcher alone (tmakit's closure around the compiled TVM-FFI function).
        launches[f"{prefix}{label}compiled_launch_us"] = lambda f=launcher: f(src, dst)
    # `tmakit.copy`: a new tensor each call, then the copy.
    launches[f"{prefix}new_tensor_call_us"] = lambda: api.copy(src)
    # A caller alternating between two configurations (per copy: half of each call here).
    other_src = torch.empty(tuple(s + 16 for s in src.shape), dtype=src.dtype, device="cuda")
    other_src = other_src.t().contiguous().t() if transpose else other_src
    other_dst = torch.empty(other_src.shape, dtype=src.dtype, device="cuda")
    api.copy_(other_dst, other_src)
    launches[f"{prefix}alternating_pair_us"] = lambda: (api.copy_(dst, src), api.copy_(other_dst, other_src))
    # What torch's own calls cost the host, for scale.
    launches[f"torch_copy_{'transpose_' if transpose else ''}call_us"] = lambda: dst.copy_(src)
    launches["torch_clone_call_us"] = lambda: src.clone()
    launches["torch_empty_like_us"] = lambda: torch.empty_like(src)
    launches["torch_empty_strided_us"] = lambda: torch.empty_strided(
        src.size(), src.stride(), dtype=src.dtype, device=src.device
    )
    result = host_costs_us(launches)
    result[f"{prefix}alternating_call_us"] = result.pop(f"{prefix}alternating_pair_us") / 2
    return result


def host_cost_report(commit: str | None) -> dict:
    """What `scripts/device_run.sh hostcost` writes: the device context, the host cost of copies
    and transposing copies (`measure_copy_host_cost`) and of plain compiled calls."""
    return {
        **device_context(commit),
        "copy": measure_copy_host_cost(),
        "transpose": measure_copy_host_cost(transpose=True),
        "plain": measure_host_overhead(),
    }


def bench_multicast(
    plan: Any, cluster: tuple[int, int], stages: int, l2_bytes: int, hot_l2: bool, samples: int
) -> list:
    """The cluster kernel's loads alone (ring of `stages` per CTA, consumers only wait and
    release), with multicast and without (each CTA loading every whole tile itself), each first
    verified with its store-back in the same run. Every CTA of a cluster receives the whole
    strip, so SMs receive cluster-size x the tensor either way; multicast reads it from L2 once."""
    import torch

    from . import gpu
    from .compile import to_cute_tensor
    from .loads import compile_multicast_load, verify_multicast_load
    from .plan import MulticastPlan

    config = plan.config
    sources = rotated_sources(plan, l2_bytes, hot_l2)
    count = len(sources)
    rows = []
    for multicast in (True, False):
        cluster_plan = MulticastPlan(plan, cluster, multicast, stages=max(stages, 2))
        verdicts = verify_multicast_load(cluster_plan)
        ok = sum(v.ok for v in verdicts)
        compiled = compile_multicast_load(cluster_plan, store=False)
        scratch = torch.empty(cluster_plan.copies_shape, dtype=sources[0].dtype, device="cuda")
        pairs = [(to_cute_tensor(s), to_cute_tensor(scratch)) for s in sources]  # scratch: never written
        launches = [lambda p=p, c=compiled: c(p[0], p[1], gpu.current_stream()) for p in pairs]
        what = "multicast" if multicast else "no-multicast"
        name = f"tmakit {what} {cluster[0]}x{cluster[1]} {cluster_plan.stages}st"
        rows.append(
            BenchRow(
                name,
                "load",
                tuple(config.shape),
                config.dtype,
                plan.tensor_bytes,
                graph_samples_us(launches, samples),
                f"{ok}/{len(verdicts)} CTAs of the cluster hold every tile ({verdicts[0]})",
                compiled.compile_seconds,
                {
                    "cluster": list(cluster),
                    "stages": cluster_plan.stages,
                    "multicast": multicast,
                    "bytes_to_sms": cluster_plan.cluster_size * plan.tensor_bytes,
                    "rotated_buffers": count,
                },
            )  # fmt: skip
        )
    del sources, pairs, scratch, launches
    torch.cuda.empty_cache()
    return rows


def measure_host_overhead() -> dict:
    """Host microseconds per call of a compiled tiny load kernel, by the plain path and, when the
    apache-tvm-ffi package is importable, by the DSL's TVM-FFI path (the compiled functions
    called directly in both)."""
    from . import gpu
    from .compile import to_cute_tensor
    from .config import LoadConfig
    from .loads import compile_tile_load
    from .plan import LoadPlan

    plan = LoadPlan(LoadConfig((64, 256)))
    src = gpu.make_input_tensor(plan)
    plain = compile_tile_load(plan, consumer="none").function
    stream = gpu.current_stream()
    prepared = to_cute_tensor(src)
    result = {
        "plain_prepared_tensors_us": host_launch_us(lambda: plain(prepared, prepared, stream)),
        "plain_from_dlpack_each_call_us": host_launch_us(
            lambda: plain(to_cute_tensor(src), to_cute_tensor(src), stream)
        ),
    }
    try:
        ffi = compile_tile_load(plan, consumer="none", tvm_ffi=True).function
        result["tvm_ffi_torch_tensors_us"] = host_launch_us(lambda: ffi(src, src))  # torch's stream
    except Exception as error:  # noqa: BLE001 - reported, the plain path still stands
        result["tvm_ffi_error"] = f"{type(error).__name__}: {error}"[:300]
    return result


# Nsight Compute's units, to microseconds and bytes.
NCU_UNIT_SCALE = {
    "ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
    "byte": 1.0, "B": 1.0, "Kbyte": 1e3, "KB": 1e3, "Mbyte": 1e6, "MB": 1e6, "Gbyte": 1e9, "GB": 1e9,
}  # fmt: skip


def parse_ncu_csv(text: str) -> dict[str, list[float]]:
    """Metric name -> values (times in us, sizes in bytes) from `ncu --csv` output, one value per
    profiled kernel; lines that are not CSV records (the program's own output) are skipped."""
    import csv
    import io

    lines = [line for line in text.splitlines() if line.startswith('"')]
    values: dict[str, list[float]] = {}
    for record in csv.DictReader(io.StringIO("\n".join(lines))):
        if record["Metric Value"] in ("n/a", ""):  # a counter this kernel never touched
            continue
        unit = record.get("Metric Unit", "")
        if unit not in NCU_UNIT_SCALE and ("second" in unit or "byte" in unit):  # counts pass as they are
            raise ValueError(f"unknown Nsight Compute unit {unit!r} for {record['Metric Name']}")
        value = float(record["Metric Value"].replace(",", "")) * NCU_UNIT_SCALE.get(unit, 1.0)
        values.setdefault(record["Metric Name"], []).append(value)
    return values


def ncu_kernel_times(plan: Any, launches: int = 10) -> dict:
    """Nsight Compute's gpu__time_duration and dram__bytes_read for the load-only kernel, caches
    flushed before each launch (ncu's default), clocks left alone (--clock-control none)."""
    import json
    import subprocess
    import sys

    from .isolate import config_to_json

    command = ncu_command(
        ["--metrics", "gpu__time_duration.sum,dram__bytes_read.sum"],
        lambda total: [sys.executable, "-m", "tmakit.bench", config_to_json(plan.config), str(total)],
        skip=2,
        count=launches,
    )
    completed = subprocess.run(command, capture_output=True, text=True)
    values = parse_ncu_csv(completed.stdout)
    times = values.get("gpu__time_duration.sum", [])
    reads = values.get("dram__bytes_read.sum", [])
    if not times:
        return {"error": (completed.stderr or completed.stdout)[-1500:], "command": json.dumps(command)}
    return {
        "gpu_time_us": times,
        "median_us": statistics.median(times),
        "dram_bytes_read": reads,
        "median_dram_bytes_read": statistics.median(reads) if reads else None,
    }


def ncu_command(
    arguments: list[str], target, skip: int, count: int, kernels: str = "regex:kernel_cutlass"
) -> list[str]:
    """An Nsight Compute command line: tmakit's kernels only (or those `kernels` names), clocks
    left alone, CSV out, `skip` warm-up launches then `count` profiled; `target(total)` is the
    program's argv, asked to launch `skip + count` times."""
    return [
        "ncu", "--clock-control", "none", "--csv", "-k", kernels,
        "--launch-skip", str(skip), "--launch-count", str(count), *arguments, *target(skip + count),
    ]  # fmt: skip


def _ncu_target(config_json: str, launches: int) -> None:
    """What ncu profiles: the load-only kernel launched `launches` times."""
    import torch

    from . import gpu
    from .compile import to_cute_tensor
    from .isolate import config_from_json
    from .loads import compile_tile_load
    from .plan import LoadPlan

    plan = LoadPlan(config_from_json(config_json))
    compiled = compile_tile_load(plan, consumer="none")
    src = to_cute_tensor(gpu.make_input_tensor(plan))
    for _ in range(launches):
        compiled(src, src, gpu.current_stream())
    torch.cuda.synchronize()


if __name__ == "__main__":
    import sys

    _ncu_target(sys.argv[1], int(sys.argv[2]))
