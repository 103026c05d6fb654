"""The drop-in study: each public op as a PyTorch user swaps it in, against the fastest torch
expression of the same result eagerly and against the faster of that expression and its
`torch.compile` (inductor) version in CUDA graphs, all in one run, L2 cold (rotated buffers),
every tmakit result checked element for element first, each row naming the path tmakit took.

The ops: `copy_` (the same layout), the transposing `copy_` (a column-major source into a
row-major destination), `add_`, and `im2col` (torch: `F.pad` + `as_strided`, written into the
patch matrix: the im2col family's `strided_patches`, the expression `im2col` itself falls back
to); the families' functions are read through `registry.exporting`. Eager times
are back-to-back calls, host included (wall time per call of a loop, the GPU synchronised at its
ends); device times are CUDA-graph replays.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import registry
from ..config import DTYPES
from .report import BenchRow
from .suites import rotation_buffers
from .timing import EAGER, eager_samples_us, interleaved_graph_samples_us

OPS = ("copy", "transpose", "add", "im2col")
KINDS = {"copy": "copy", "transpose": "copy", "add": "reduce", "im2col": "load"}  # bytes counted
# The kernel each op runs where tmakit has no planner that names its path.
FAMILY_PATHS = {"copy": "tma-ring", "transpose": "tma-transpose", "add": "tma-reduce"}


@dataclass(frozen=True)
class DropinCase:
    """One row of the study: an op on a shape (an im2col's NHWC activation, with its square
    filter, stride and padding)."""

    op: str
    shape: tuple[int, ...]
    dtype: str
    conv: tuple[int, int, int] | None = None  # im2col: (filter, stride, padding)

    @property
    def name(self) -> str:
        if self.op == "im2col":
            r, stride, padding = self.conv
            return f"im2col {'x'.join(map(str, self.shape))} {r}x{r} stride {stride} pad {padding}"
        mib = math.prod(self.shape) * DTYPES[self.dtype].nbytes / 2**20
        return f"{self.op} {mib:g} MiB {self.dtype}"

    @property
    def tensor_bytes(self) -> int:
        """The bytes `KINDS` counts from: the tensor's, or an im2col's patch matrix's."""
        if self.op == "im2col":
            n, h, w, c = self.shape
            r, stride, padding = self.conv
            p, q = (h + 2 * padding - r) // stride + 1, (w + 2 * padding - r) // stride + 1
            return n * p * q * r * r * c * DTYPES[self.dtype].nbytes
        return math.prod(self.shape) * DTYPES[self.dtype].nbytes


def operands(case: DropinCase, count: int) -> tuple[list, list, Callable, Callable]:
    """(inputs, outputs, tmakit's call, torch's call) on `count` rotated buffers, seeded: each call
    takes (input, output)."""
    import torch

    element = getattr(torch, DTYPES[case.dtype].torch_name)
    generator = torch.Generator(device="cuda").manual_seed(2026)
    new = lambda shape: torch.randn(shape, generator=generator, device="cuda").to(element)  # noqa: E731
    if case.op == "im2col":
        r, stride, padding = case.conv
        xs = [new(case.shape) for _ in range(count)]
        rows = case.tensor_bytes // (r * r * case.shape[3] * DTYPES[case.dtype].nbytes)
        outs = [torch.empty(rows, r * r * case.shape[3], dtype=element, device="cuda") for _ in range(count)]
        family = registry.exporting("im2col")
        ours = lambda x, o: family.im2col(x, r, stride, padding, out=o)  # noqa: E731
        conv = family.im2col_conv(case.shape, r, stride, padding)
        theirs = lambda x, o: family.strided_patches(x, conv, o)  # noqa: E731
        return xs, outs, ours, theirs
    if case.op == "transpose":
        xs = [new(case.shape[::-1]).t() for _ in range(count)]  # column-major views
    else:
        xs = [new(case.shape) for _ in range(count)]
    outs = [new(case.shape) for _ in range(count)]
    if case.op == "add":
        add_ = registry.exporting("add_").add_
        return xs, outs, (lambda x, o: add_(o, x)), (lambda x, o: o.add_(x))
    copy_ = registry.exporting("copy_").copy_
    return xs, outs, (lambda x, o: copy_(o, x)), (lambda x, o: o.copy_(x))


def path_of(case: DropinCase, x: Any, out: Any) -> str:
    """The path tmakit takes for this call, as its planner names it (`tmakit.copy_path` and
    the like where tmakit has one), else the kernel family."""
    named = {"copy": "copy_path", "transpose": "copy_path", "add": "reduce_path", "im2col": "im2col_path"}
    explain = getattr(registry.exporting(named[case.op]), named[case.op], None)
    if explain is None:
        return FAMILY_PATHS[case.op]
    if case.op == "im2col":
        r, stride, padding = case.conv
        return str(explain(x, r, stride, padding, out=out).path)
    return str((explain(out, x, "add") if case.op == "add" else explain(out, x)).path)


def check(case: DropinCase, ours: Callable, theirs: Callable, x: Any, out: Any) -> str:
    """tmakit's result against torch's on the first buffers, every element (bits compared;
    `add_` from the same starting values): "ok" or where the first difference is."""
    import torch

    start = out.clone()
    expected = out.clone()
    theirs(x, expected)
    if case.op != "add":
        out.view(torch.uint8).fill_(0xFF)  # poisoned: every element must be written
    ours(x, out)
    torch.cuda.synchronize()
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}.get(out.element_size(), torch.uint8)
    wrong = (out.view(bits) != expected.view(bits)).nonzero()
    out.copy_(start)
    if len(wrong):
        return f"MISMATCH first at {tuple(wrong[0].tolist())}"
    return "ok: bit-exact against torch"


def inductor(function: Callable) -> Callable:
    """`torch.compile` of a torch expression, compiled for each case anew (no recompile limit)."""
    import torch

    torch._dynamo.reset()
    return torch.compile(function, dynamic=False)


def bench_dropin(case: DropinCase, l2_bytes: int, samples: int) -> list[BenchRow]:
    """tmakit, torch and inductor on `case`: device time (interleaved graph replays), then eager
    back-to-back calls of tmakit and torch (interleaved rounds). Each row's notes: the path,
    the rotated buffers."""
    import torch

    written = 2 * case.tensor_bytes
    count = rotation_buffers(written, l2_bytes)
    xs, outs, ours, theirs = operands(case, count)
    verdict = check(case, ours, theirs, xs[0], outs[0])
    compiled = inductor(theirs)
    compiled(xs[0], outs[0].clone())  # compiled now, not in a capture
    calls = {"tmakit": ours, "torch": theirs, "inductor": compiled}
    pairs = list(zip(xs, outs, strict=True))
    launches = {name: [lambda x=x, o=o, f=f: f(x, o) for x, o in pairs] for name, f in calls.items()}
    device = interleaved_graph_samples_us(launches, samples)
    eager = eager_samples_us({name: launches[name] for name in ("tmakit", "torch")})
    # notes["op"]: the report compares rows of one case only (`report.ratios`).
    notes = {"op": case.name, "path": path_of(case, xs[0], outs[0]), "rotated_buffers": count}
    row = lambda name, samples_us, verified=None: BenchRow(  # noqa: E731
        name, KINDS[case.op], case.shape, case.dtype, case.tensor_bytes, samples_us, verified, None, notes
    )
    rows = [row(name, us, verdict if name == "tmakit" else None) for name, us in device.items()]
    rows += [row(f"{name} {EAGER}", us) for name, us in eager.items()]
    del xs, outs, pairs, launches, compiled
    torch.cuda.empty_cache()
    return rows
