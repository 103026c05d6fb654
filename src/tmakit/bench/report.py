"""The benchmark's rows and reports: bytes counted, GB/s, ratios to the baselines of the same
run, the printed table, the JSON (context first: card, driver, versions, commit, date) and the plot.
Pure Python but for `device_context` and `plot`."""

from __future__ import annotations

import datetime
import statistics
import subprocess
from dataclasses import dataclass, field

from ..limits import DEFAULT_L2_BYTES, PEAK_BANDWIDTH
from ..runtime.compile import installed_dsl_version


def peak_bandwidth(device_name: str) -> float | None:
    """Datasheet DRAM bandwidth of the card, or None for a card we have no figure for."""
    for key, peak in PEAK_BANDWIDTH.items():
        if key in device_name:
            return peak
    return None


# Tensors' worth of bytes each kind must move across DRAM at least: a reduce reads src, and reads
# and writes dst.
TENSORS_MOVED = {"load": 1, "sum": 1, "copy": 2, "reduce": 3}


def bytes_moved(kind: str, tensor_bytes: int) -> int:
    """The fewest bytes that must cross DRAM: each input read once, each output written once."""
    return TENSORS_MOVED[kind] * tensor_bytes


@dataclass
class BenchRow:
    """One kernel on one size: device-time samples (us per launch) and what they mean."""

    kernel: str  # e.g. "tmakit load", "torch copy_"
    kind: str  # "load", "copy", "sum" or "reduce": decides the bytes counted (`TENSORS_MOVED`)
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
    """GB/s of each row over the baseline row of the same shape and dtype (same run), and of the
    same reduce op where rows name one (`notes["op"]`: a min is not compared with torch's add_)."""
    base = {(r.shape, r.dtype, r.notes.get("op")): r.gbps for r in rows if r.kernel == baseline}
    return {
        (r.kernel, r.shape, r.dtype): r.gbps / base[(r.shape, r.dtype, r.notes.get("op"))]
        for r in rows
        if (r.shape, r.dtype, r.notes.get("op")) in base
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


def report(rows: list[BenchRow], context: dict, baselines: list[str], study: str, what: str) -> dict:
    """The JSON of a study, in the one schema of `benchmarks/results` (benchmarks/README.md):
    study, what, context (card, versions, commit, date, run parameters), rows (every sample),
    summary (the baselines and each row's ratio to them)."""
    peak = context.get("peak_bandwidth")
    return {
        "study": study,
        "what": what,
        "context": {**context, "date": context.get("date") or _now()},
        "rows": [{**row.summary(peak), "samples_us": row.samples_us} for row in rows],
        "summary": {
            "baselines": baselines,
            "ratios": {
                b: {f"{k[0]} {'x'.join(map(str, k[1]))} {k[2]}": v for k, v in ratios(rows, b).items()}
                for b in baselines
            },
        },
    }


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


PLOT_EXTRA = "pip install 'tmakit[plot]'"


def check_plotting() -> None:
    """ImportError naming the `plot` extra when matplotlib, which `plot` needs, is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ImportError(f"plotting needs matplotlib, which is not installed ({PLOT_EXTRA})") from None


def plot(rows: list[BenchRow], path: str, peak: float | None, title: str) -> None:
    """PNG of GB/s against size, one line per kernel, the datasheet peak as a dashed line."""
    check_plotting()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    several_dtypes = len({r.dtype for r in rows}) > 1  # (a reduce bench): one line per kernel and dtype
    for kernel, dtype in dict.fromkeys((r.kernel, r.dtype) for r in rows):
        points = sorted((r.tensor_bytes, r.gbps) for r in rows if (r.kernel, r.dtype) == (kernel, dtype))
        label = f"{kernel} {dtype}" if several_dtypes else kernel
        axes.plot([p[0] / 2**20 for p in points], [p[1] for p in points], marker="o", label=label)
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
def device_context(commit: str | None) -> dict:
    """Card, driver, versions, L2 size and peak: the JSON's context."""
    import torch

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
        "l2_bytes": getattr(props, "L2_cache_size", DEFAULT_L2_BYTES),
        "driver": driver,
        "cuda_runtime": torch.version.cuda,
        "torch": torch.__version__,
        "nvidia_cutlass_dsl": installed_dsl_version(),
        "commit": commit,
        "peak_bandwidth": peak_bandwidth(props.name),
        "date": _now(),
    }
