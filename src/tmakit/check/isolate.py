"""Run GPU checks in a worker process under a time limit, so a hang is a result, not a stuck CLI.

A TMA wait whose bytes never arrive spins forever on the GPU; the only safe response from the
host is to kill the process that owns the context. The parent feeds configurations one per line
to `python -m tmakit.check.isolate`, reads one JSON result per line, and on a timeout kills the worker,
records a hang and starts a fresh worker for the rest.
"""

from __future__ import annotations

import dataclasses
import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Callable, Iterable

from .. import registry
from ..config import LoadConfig

WORKER_START_SECONDS = 120.0  # importing torch and the DSL, creating the CUDA context


def config_to_json(config: LoadConfig) -> str:
    return json.dumps(dataclasses.asdict(config))


def config_from_json(text: str) -> LoadConfig:
    fields = json.loads(text)
    for key in ("shape", "tile", "strides"):
        if fields.get(key) is not None:
            fields[key] = tuple(fields[key])
    return LoadConfig(**fields)


class _Worker:
    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.process.stdout, selectors.EVENT_READ)
        self.ready = self.read_line(WORKER_START_SECONDS) == "ready"

    def read_line(self, timeout: float) -> str | None:
        """The next line, "" if the worker exited, None if nothing came within `timeout`."""
        if not self.selector.select(timeout):
            return None
        return self.process.stdout.readline().strip()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


def run_isolated(
    configs: Iterable[LoadConfig],
    timeout_seconds: float,
    on_result: Callable[[LoadConfig, dict], None] | None = None,
    worker_command: list[str] | None = None,
) -> list[dict]:
    """Check each configuration in a worker process (`python -m tmakit.check.isolate` unless
    `worker_command` names another); a check over `timeout_seconds` is a hang, and a worker that
    dies (a CUDA fault poisons its context, so the worker exits) is an error; either way the
    next configuration gets a fresh worker."""
    command = worker_command or [sys.executable, "-m", "tmakit.check.isolate"]
    results = []
    worker = None
    for config in configs:
        if worker is None:
            worker = _Worker(command)
            if not worker.ready:
                worker.kill()
                raise RuntimeError(f"the GPU worker process ({' '.join(command)}) did not start")
        start = time.perf_counter()
        worker.process.stdin.write(config_to_json(config) + "\n")
        worker.process.stdin.flush()
        line = worker.read_line(timeout_seconds)
        if line:
            result = json.loads(line)
            if result.get("fatal"):  # the worker reported, then exits: its CUDA context is gone
                worker.kill()
                worker = None
        else:
            worker.kill()
            worker = None
            result = (
                {"status": "hang", "detail": f"no result within {timeout_seconds:.0f} s; worker killed"}
                if line is None
                else {"status": "error", "detail": "the worker process died"}
            )
        result["seconds"] = round(time.perf_counter() - start, 3)
        results.append(result)
        if on_result:
            on_result(config, result)
    if worker is not None:
        worker.process.stdin.close()
        worker.process.wait(timeout=30)
    return results


def _serve() -> None:
    """Worker side: read configurations, check each on the GPU (the load family's `check_on_gpu`:
    the tile load's every element and shared-memory byte), answer one JSON line each."""
    import torch  # noqa: F401  (create the CUDA context before saying ready)

    check_on_gpu = registry.exporting("check_on_gpu", "check").check_on_gpu
    torch.cuda.init()
    print("ready", flush=True)
    for line in sys.stdin:
        try:
            result = check_on_gpu(config_from_json(line))
        except Exception as error:  # noqa: BLE001 - reported per configuration
            result = {"status": "error", "detail": f"{type(error).__name__}: {error}"}
            # A CUDA fault is sticky: every later call in this process would fail too.
            result["fatal"] = "CUDA error" in str(error) or "CUDA_ERROR" in str(error)
        print(json.dumps(result), flush=True)
        if result.get("fatal"):
            sys.exit(1)


if __name__ == "__main__":
    _serve()
