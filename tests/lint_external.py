"""The lint's corpus of kernels nobody here wrote: CuTe DSL kernels of other projects, each at the
version tmakit's `lint` extra pins (torch's at the torch installed, 2.13 or later), compiled for
sm_90a on this machine (no GPU) as their own code compiles them, with what the lint reads kept.

Each is built in a child process of its own: the projects set process-wide state (the DSL's
target, QuACK's arch override, a stand-in module in torch's namespace) and a compile that crashes
or hangs costs one entry, not the test run. An entry that cannot be built (its package not
installed, a compile error, the time limit) is skipped with a one-line reason.

Run as `python tests/lint_external.py NAME OUT.json`, this file is the child: it builds entry
NAME and writes {"ptx", "mlir", "tensor_elements", "version"} or {"skipped": reason} to OUT.json.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tmakit.linter import Captured, LintReport, lint_text

TIME_LIMIT = 300  # seconds a child may take to import its project and compile (each takes < 15)
HOPPER = {"CUTE_DSL_ARCH": "sm_90a"}  # the DSL's target where no GPU says which


@dataclass(frozen=True)
class External:
    """One kernel of another project: what it is (`summary`), the distribution that ships it
    (`distribution`), whether tmakit's `lint` extra installs that distribution (`in_lint_extra`;
    torch comes from the torch installed), the environment its compile reads (`environment`),
    the dtype its bulk reduce stores combine (`reduce_dtype`, for `lint_text`), and `build`:
    run in the child, it returns what the project's own code passes to `cute.compile` (the host
    function, its example arguments, the compile options)."""

    summary: str
    distribution: str
    build: Callable[[], tuple[Any, tuple, str]]
    environment: dict[str, str] = field(default_factory=lambda: dict(HOPPER))
    in_lint_extra: bool = True
    reduce_dtype: str | None = None


@dataclass(frozen=True)
class Built:
    """An entry's build: the `captured` text (None where `skipped`, with the reason), the
    `version` of its distribution and the `seconds` the child took."""

    captured: Captured | None
    skipped: str | None = None
    version: str | None = None
    seconds: float = 0.0


class _Compiling(Exception):
    """Raised by the stand-in `cute.compile`: the project's arguments are taken, its compile is
    not run (`capture` compiles them again with the PTX and MLIR kept)."""


def _asked(call: Callable[[], object]) -> tuple[Any, tuple, str]:
    """What `call`, the project's own compile function, passes to `cute.compile`: the host
    function, its arguments and options (the kernel as the project ships it, flags included)."""
    import cutlass.cute as cute

    asked: list[tuple[Any, tuple, str]] = []

    def compile_(host_function, *args, options=""):
        asked.append((host_function, args, options))
        raise _Compiling

    original = cute.compile
    cute.compile = compile_
    try:
        call()
    except _Compiling:
        pass
    finally:
        cute.compile = original
    if not asked:
        raise RuntimeError("its compile function called no cute.compile")
    return asked[0]


def _cutlass_gemm() -> tuple[Any, tuple, str]:
    """The kernel class its `Sm90StaticPersistentGemmOperator` compiles, called as the operator
    calls it; the operator itself asks a GPU for the clusters that fit (132 SMs, clusters of 2)."""
    import cutlass
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor
    from cutlass.operators.providers.cutedsl.gemm.implementations.sm90_static_persistent_impl import (
        Sm90StaticPersistentGemmKernel,
    )

    batches, m, n, k = 1, 512, 512, 256
    a = make_fake_tensor(cutlass.Float16, (batches, m, k), (m * k, k, 1), assumed_align=16)
    b = make_fake_tensor(cutlass.Float16, (batches, k, n), (k * n, 1, k), assumed_align=16)
    c = make_fake_tensor(cutlass.Float16, (batches, m, n), (m * n, n, 1), assumed_align=16)
    cluster = (2, 1)  # B's tile multicast to the two CTAs that share it
    gemm = Sm90StaticPersistentGemmKernel(cutlass.Float32, (128, 128), cluster)
    return gemm, (a, b, c, 132 // 2, make_fake_stream()), ""


def _quack_gemm() -> tuple[Any, tuple, str]:
    """Its GEMM's compile (`quack.gemm._compile_gemm`, past its compile cache) for Hopper: bf16
    A (k-major) times B (k-major), 128x192 tiles, clusters of 2 (B multicast through the block
    copy), persistent, ping-pong warp groups."""
    import cutlass
    from quack import gemm
    from quack.rounding import RoundingMode

    compile_gemm = gemm._compile_gemm.__wrapped__
    return _asked(
        lambda: compile_gemm(
            cutlass.BFloat16,
            cutlass.BFloat16,
            cutlass.BFloat16,
            None,
            "k",
            "k",
            "n",
            None,
            tile_shape_mn=(128, 192),
            cluster_shape_mnk=(2, 1, 1),
            pingpong=True,
            persistent=True,
            is_dynamic_persistent=False,
            rowvec_dtype=None,
            colvec_dtype=None,
            colvec_ndim=0,
            alpha_mode=0,
            beta_mode=0,
            add_to_output=False,
            concat_layout=None,
            varlen_m=False,
            varlen_k=False,
            gather_A=False,
            use_tma_gather=False,
            has_batch_idx_permute=False,
            device_capacity=(9, 0),
            rounding_mode=RoundingMode.RN,
            sr_seed_mode=0,
            num_warps=None,
        )
    )


def _torch_scatter_add() -> tuple[Any, tuple, str]:
    """Its TMA scatter_add's compile for bf16 rows of 1000 (512-byte chunks, the last one
    partial: a box past the row's end). Its compile cache, the QuACK torch vendors, is replaced
    by the identity: under DSL 4.8 it does not import (it needs a newer DSL), and a cache hit
    would skip the compile this takes its arguments from."""
    import types

    vendored = types.ModuleType("torch._vendor.quack")
    vendored.__path__ = []
    cache = types.ModuleType("torch._vendor.quack.cache")
    cache.jit_cache = lambda function: function
    sys.modules.update({vendored.__name__: vendored, cache.__name__: cache})

    import torch
    from torch._native.ops.scatter_add import tma_kernel

    return _asked(lambda: tma_kernel._compile_tma_scatter(torch.bfloat16, 1000, True))


EXTERNAL: dict[str, External] = {
    "cutlass-gemm": External(
        "nvidia-cutlass-operators' Hopper persistent GEMM (Sm90StaticPersistentGemmKernel): fp16, "
        "128x128 tiles, clusters of 2",
        "nvidia-cutlass-operators",
        _cutlass_gemm,
    ),
    "quack-gemm": External(
        "QuACK's Hopper GEMM (GemmSm90): bf16, 128x192 tiles, clusters of 2, ping-pong",
        "quack-kernels",
        _quack_gemm,
        environment={**HOPPER, "QUACK_ARCH": "90"},
    ),
    "torch-scatter-add": External(
        "torch's TMA scatter_add (torch/_native/ops/scatter_add/tma_kernel.py): bf16 rows of 1000",
        "torch",
        _torch_scatter_add,
        in_lint_extra=False,
        reduce_dtype="bf16",
    ),
}


def lint_extra_installed() -> bool:
    """Whether a distribution tmakit's `lint` extra installs is here (CI's torch pass installs
    them: there, an entry built is required)."""
    return any(installed_version(entry.distribution) for entry in EXTERNAL.values() if entry.in_lint_extra)


@functools.cache
def built(name: str) -> Built:
    """Entry `name` built in a child process, once per process."""
    entry = EXTERNAL[name]
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tmakit-lint-external-") as folder:
        out = Path(folder) / "captured.json"
        try:
            child = subprocess.run(
                [sys.executable, __file__, name, str(out)],
                env={**os.environ, **entry.environment},
                capture_output=True,
                text=True,
                timeout=TIME_LIMIT,
            )
        except subprocess.TimeoutExpired:
            return Built(None, f"not built within {TIME_LIMIT} s", seconds=time.monotonic() - start)
        seconds = time.monotonic() - start
        if not out.exists():
            last = (child.stderr.strip().splitlines() or ["no output"])[-1]
            return Built(None, f"the child exited with status {child.returncode}: {last}", seconds=seconds)
        found = json.loads(out.read_text())
    if "skipped" in found:
        return Built(None, found["skipped"], found.get("version"), seconds)
    captured = Captured(found["ptx"], found["mlir"], tuple(found["tensor_elements"]))
    return Built(captured, None, found["version"], seconds)


def lint_external(name: str) -> LintReport:
    """The lint of entry `name`, which was built (`built(name).captured` is not None)."""
    found = built(name).captured
    assert found is not None, built(name).skipped
    return lint_text(found.ptx, found.mlir, found.tensor_elements, EXTERNAL[name].reduce_dtype)


def installed_version(distribution: str) -> str | None:
    """The version of `distribution` installed here, or None."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _build(name: str) -> dict:
    """The child's work: entry `name` captured, or why not."""
    from tmakit.linter import capture

    entry = EXTERNAL[name]
    version = installed_version(entry.distribution)
    if version is None:
        where = "tmakit's lint extra: pip install 'tmakit[lint]'" if entry.in_lint_extra else "torch >= 2.13"
        return {"skipped": f"{entry.distribution} is not installed ({where})"}
    try:
        host_function, args, options = entry.build()
        found = capture(host_function, *args, options=options)
    except Exception as error:  # what a project's import or compile raises is why it is skipped
        reason = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:200]}"
        if isinstance(error, ModuleNotFoundError):
            reason = f"no module named {error.name!r}"
        return {"skipped": f"{entry.distribution} {version}: {reason}", "version": version}
    return {
        "ptx": found.ptx,
        "mlir": found.mlir,
        "tensor_elements": list(found.tensor_elements),
        "version": version,
    }


if __name__ == "__main__":
    name, out = sys.argv[1:]
    Path(out).write_text(json.dumps(_build(name)))
