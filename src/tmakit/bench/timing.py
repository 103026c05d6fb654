"""The timer: device time per launch from CUDA-graph replays (or an eager loop on a stream), and
host time per call. A leaf: it imports nothing else of tmakit.

Why a hand-written timer: a compiled CuTe DSL call costs as much host time as a small kernel takes
(host-cost.json), so per-launch events measure the host. `triton.testing.do_bench` times each call with
events (host-bound for short kernels), `do_bench_cudagraph` does not rotate buffers, and
`cutlass.testing.benchmark` rotates workspaces and replays graphs but returns only a mean. Here:
one CUDA graph replays a pass over enough rotated buffers that the working set exceeds 4x the L2,
and each replay is one sample of device time per launch.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

MIN_SAMPLES = 50


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


def interleaved_graph_samples_us(
    variants: dict[str, list[Callable[[], Any]]], samples: int = MIN_SAMPLES, min_launches: int = 20
) -> dict[str, list[float]]:
    """`graph_samples_us` of several kernels compared with one another: each captured into its
    own graph, then the samples taken in rounds, one replay of every graph per round (in a
    rotating order), so that a drift of the GPU's clocks during the run falls on all of them
    alike. For differences of a few percent: timed one after another, the same kernel differed
    by up to 4% between runs on the H200."""
    import torch

    names = list(variants)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        passes = {name: _prepare_pass(variants[name], min_launches, True, stream) for name in names}
        taken: dict[str, list[float]] = {name: [] for name in names}
        for round_index in range(samples):
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                timed, per_pass = passes[name]
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record(stream)
                timed()
                end.record(stream)
                taken[name].append((start, end, per_pass))
        torch.cuda.synchronize()
    return {name: [a.elapsed_time(b) * 1000.0 / n for a, b, n in taken[name]] for name in names}


def _prepare_pass(
    launches: list[Callable[[], Any]], min_launches: int, graph: bool, stream: Any
) -> tuple[Callable[[], Any], int]:
    """(one pass over `launches`, at least `min_launches` launches: a graph's replay or the eager
    loop; launches per pass), warmed up, on `stream` (current)."""
    import torch

    passes = max(1, math.ceil(min_launches / len(launches)))

    def run_pass() -> None:
        for _ in range(passes):
            for launch in launches:
                launch()

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
    return timed, passes * len(launches)


def captured(launch: Callable[[], Any]) -> tuple[Any, Any]:
    """(a CUDA graph of one call of `launch`, what that call returned): the call made once on a
    side stream first, outside the capture (what a first call makes lazily: a compile, autograd's
    state for the stream), as a timed pass is warmed up. Nothing of the captured call runs until
    the graph is replayed; the graph holds its outputs' memory."""
    import torch

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        launch()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            outputs = launch()
    torch.cuda.synchronize()
    return graph, outputs


def _pass_samples_us(
    launches: list[Callable[[], Any]], samples: int, min_launches: int, graph: bool
) -> list[float]:
    """Events around each of `samples` passes over `launches` (at least `min_launches` launches
    a pass) on a side stream, replayed from one CUDA graph or launched eagerly; us per launch."""
    import torch

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        timed, per_pass = _prepare_pass(launches, min_launches, graph, stream)
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(samples)
        ]
        for start, end in events:
            start.record(stream)
            timed()
            end.record(stream)
        torch.cuda.synchronize()
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
    round in another order: the host's speed drifts within a run (a process's first round runs
    slower, and launches timed one after another differ), and interleaving spreads the drift over
    all of them."""
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


EAGER = "eager"  # the suffix of an eager row's name: "tmakit eager" beside the graph row "tmakit"


def eager_samples_us(
    launches: dict[str, list[Callable[[], Any]]], repeats: int = 15, min_calls: int = 20
) -> dict[str, list[float]]:
    """Wall time per call as a user's eager loop gets it, host included: rounds of back-to-back
    calls (at least `min_calls`, over every rotated buffer), the GPU synchronised before and after
    each round, interleaved between the callers in a rotating order; a warm-up round first."""
    import torch

    names = list(launches)
    rounds: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(repeats + 1):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            calls = launches[name] * max(1, math.ceil(min_calls / len(launches[name])))
            torch.cuda.synchronize()
            start = time.perf_counter()
            for launch in calls:
                launch()
            torch.cuda.synchronize()
            if round_index:
                rounds[name].append((time.perf_counter() - start) * 1e6 / len(calls))
    return rounds
