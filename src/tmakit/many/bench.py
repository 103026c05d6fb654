"""The many-tensors study: `copy_many_`, `pack` and `unpack_` on a transformer layer's parameters
(4096x4096 x4, 11008x4096 x3, 4096 x2, bf16), 1,000 tensors of random sizes from 1 KiB to 1 MiB
and 10,000 tensors of 4 KiB, timed beside torch's copies of the same lists: `copy_many_` against
`torch._foreach_copy_`, `pack` against `torch.cat` of the flattened tensors, `unpack_` against
`torch.split_with_sizes_copy`; device time from interleaved CUDA-graph replays, then eager
back-to-back calls (and tmakit's `GroupedCopy` prepared once), every tmakit result checked first;
a torch copy of the list's bytes as one buffer in the same run is the copy rate the grouped copy
is measured against, and tmakit's `copy_` of that buffer its own single-tensor rate. `--only`
picks cases by the start of their names. Its JSON: one row a case."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from .. import registry
from ..bench.report import BenchRow
from ..bench.suites import rotation_buffers
from ..bench.timing import EAGER, eager_samples_us, interleaved_graph_samples_us
from ..families import case_study, eager_columns, medians, tabled_study
from . import api

PREPARED = "tmakit prepared"
UNCHECKED = "tmakit prepared unchecked"  # check_addresses=False
SINGLE = "tmakit copy_"  # the list's bytes as one buffer, by tmakit's own single-tensor copy
PEERS = {"copy_many_": "torch _foreach_copy_", "pack": "torch cat", "unpack_": "torch split_with_sizes_copy"}


@dataclass(frozen=True)
class ManyCase:
    """One row of the study: `op` on a list of bf16 tensors of `shapes`."""

    op: str
    label: str
    shapes: tuple[tuple[int, ...], ...]

    @property
    def name(self) -> str:
        return f"{self.op} {self.label}"

    @property
    def tensor_bytes(self) -> int:
        return sum(math.prod(shape) for shape in self.shapes) * 2


def lists(case: ManyCase, generator) -> tuple[list, list]:
    """(sources, destinations) of the case: bf16 tensors of its shapes, seeded."""
    import torch

    srcs = [
        torch.randn(shape, device="cuda", generator=generator).to(torch.bfloat16) for shape in case.shapes
    ]
    return srcs, [torch.empty_like(s) for s in srcs]


@dataclass(frozen=True)
class Calls:
    """One list's calls, each taking nothing: tmakit's, torch's, tmakit's prepared once
    (`GroupedCopy`), a check of what tmakit wrote against the sources, and the outputs (what the
    calls write: `dsts` for copy_many_ and unpack_, the flat buffer for pack)."""

    ours: Callable[[], object]
    theirs: Callable[[], object]
    prepared: Callable[[], object]
    unchecked: Callable[[], object]
    check: Callable[[], bool]
    outputs: list


def calls(case: ManyCase, srcs: list, dsts: list) -> Calls:
    """The calls of `case` on one list."""
    import torch

    sizes = [s.numel() for s in srcs]
    same = lambda: all(torch.equal(d, s) for d, s in zip(dsts, srcs, strict=True))  # noqa: E731
    if case.op == "copy_many_":
        return Calls(
            lambda: api.copy_many_(dsts, srcs),
            lambda: torch._foreach_copy_(dsts, srcs),
            api.GroupedCopy(dsts, srcs),
            api.GroupedCopy(dsts, srcs, check_addresses=False),
            same,
            dsts,
        )
    flat, offsets = api.pack(srcs)
    if case.op == "pack":
        cat = torch.empty(sum(sizes), dtype=torch.bfloat16, device="cuda")
        flat_srcs = [s.reshape(-1) for s in srcs]
        return Calls(
            lambda: api.pack(srcs, flat),
            lambda: torch.cat(flat_srcs, out=cat),
            api.GroupedCopy.packing(srcs, flat),
            api.GroupedCopy.packing(srcs, flat, check_addresses=False),
            lambda: all(
                torch.equal(flat[o : o + s.numel()], s.reshape(-1))
                for o, s in zip(offsets, srcs, strict=True)
            ),
            [flat],
        )
    outs = [d.view(-1) for d in dsts]
    return Calls(
        lambda: api.unpack_(flat, dsts),
        lambda: torch.split_with_sizes_copy(flat[: sum(sizes)], sizes, out=outs),
        api.GroupedCopy.unpacking(flat, dsts),
        api.GroupedCopy.unpacking(flat, dsts, check_addresses=False),
        same,
        dsts,
    )


def verify(built: Calls) -> str:
    """tmakit's call and its prepared call, each into poisoned (NaN) outputs, checked against
    the sources."""
    import torch

    for name, call in (("called", built.ours), ("prepared", built.prepared), ("unchecked", built.unchecked)):
        for output in built.outputs:
            output.fill_(float("nan"))
        call()
        torch.cuda.synchronize()
        if not built.check():
            return f"MISMATCH ({name})"
    return "ok: every tensor equal to its source, called and prepared (checked and not)"


def bench_many(case: ManyCase, l2_bytes: int, samples: int) -> list[BenchRow]:
    """tmakit, torch and a one-buffer copy of the same bytes on `case`, device time then eager;
    enough lists rotated that a pass moves more than 4x the L2."""
    import torch

    generator = torch.Generator(device="cuda").manual_seed(2026)
    count = rotation_buffers(2 * case.tensor_bytes, l2_bytes)
    sets = [lists(case, generator) for _ in range(count)]
    built = [calls(case, srcs, dsts) for srcs, dsts in sets]
    verdict = verify(built[0])
    flats = [torch.empty(case.tensor_bytes // 2, dtype=torch.bfloat16, device="cuda") for _ in range(count)]
    copies = [torch.empty_like(f) for f in flats]
    copy_ = registry.exporting("copy_").copy_  # the copy family's (a family imports no other)
    launches = {
        "tmakit": [b.ours for b in built],
        PEERS[case.op]: [b.theirs for b in built],
        "torch copy_": [lambda f=f, c=c: c.copy_(f) for f, c in zip(flats, copies, strict=True)],
        SINGLE: [lambda f=f, c=c: copy_(c, f) for f, c in zip(flats, copies, strict=True)],
    }
    device = interleaved_graph_samples_us(launches, samples)
    eager_launches = {name: launches[name] for name in list(launches)[:2]}
    eager_launches[PREPARED] = [b.prepared for b in built]
    eager_launches[UNCHECKED] = [b.unchecked for b in built]
    eager = eager_samples_us(eager_launches, repeats=7, min_calls=4)
    notes = {"op": case.name, "tensors": len(case.shapes), "rotated_buffers": count}
    row = lambda name, us, verified=None: BenchRow(  # noqa: E731
        name, "copy", (len(case.shapes),), "bf16", case.tensor_bytes, us, verified, None, notes
    )
    rows = [row(name, us, verdict if name == "tmakit" else None) for name, us in device.items()]
    rows += [row(f"{name} {EAGER}", us) for name, us in eager.items()]
    del sets, built, flats, copies, launches
    torch.cuda.empty_cache()
    return rows


LAYER = ((4096, 4096),) * 4 + ((11008, 4096),) * 3 + ((4096,),) * 2


def random_sizes(count: int = 1000, seed: int = 2026) -> tuple[tuple[int, ...], ...]:
    """`count` bf16 tensors of 1 KiB to 1 MiB, sizes drawn log-uniformly, seeded."""
    rng = random.Random(seed)
    return tuple((int(2 ** rng.uniform(9, 19)),) for _ in range(count))


def cases() -> list[ManyCase]:
    lists = (("layer", LAYER), ("1000 random", random_sizes()), ("10000 x 4 KiB", ((2048,),) * 10000))
    return [ManyCase(op, label, shapes) for label, shapes in lists for op in PEERS]


def case_row(case: ManyCase, rows: list[BenchRow]) -> dict:
    by_name, us = medians(rows)
    peer = PEERS[case.op]
    tmakit, copy, single = by_name["tmakit"], by_name["torch copy_"], by_name[SINGLE]
    return {
        "case": case.name,
        "tensors": len(case.shapes),
        "bytes": case.tensor_bytes,
        "verified": tmakit.verified,
        "tmakit_graph_us": us["tmakit"],
        "torch_graph_us": us[peer],
        "device_vs_torch": us[peer] / us["tmakit"],
        "tmakit_tb_per_s": tmakit.gbps / 1e3,
        "copy_tb_per_s": copy.gbps / 1e3,
        "of_copy_rate": tmakit.gbps / copy.gbps,
        "single_copy_tb_per_s": single.gbps / 1e3,
        "of_single_copy_rate": tmakit.gbps / single.gbps,
        **eager_columns(us, peer),
        "prepared_eager_us": us[f"{PREPARED} {EAGER}"],
        "prepared_eager_vs_torch": us[f"{peer} {EAGER}"] / us[f"{PREPARED} {EAGER}"],
        "unchecked_eager_us": us[f"{UNCHECKED} {EAGER}"],
        "unchecked_eager_vs_torch": us[f"{peer} {EAGER}"] / us[f"{UNCHECKED} {EAGER}"],
        "rotated_buffers": tmakit.notes["rotated_buffers"],
    }


study = tabled_study(
    "many",
    "lists of tensors in one launch against torch's _foreach_copy_ / cat / split_with_sizes_copy "
    "in CUDA graphs (device time) and eagerly (back-to-back calls, host included; tmakit's call and "
    "its GroupedCopy prepared once), L2 cold, bytes read "
    "plus written, beside a one-buffer torch copy of the same bytes; every tmakit result checked first",
    case_row,
)


STUDIES = (
    case_study(
        "many",
        "copy_many_, pack and unpack_ on a transformer layer, 1,000 random and 10,000 small tensors "
        "against torch's _foreach_copy_, cat and split_with_sizes_copy (see --only)",
        "many tensors in one launch against torch",
        cases,
        bench_many,
        list(PEERS.values()),
        study,
    ),
)
