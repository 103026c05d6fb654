"""The many-tensors study (`bench.many`): `copy_many_`, `pack` and `unpack_` on a transformer
layer's parameters (4096x4096 x4, 11008x4096 x3, 4096 x2, bf16), 1,000 tensors of random sizes
from 1 KiB to 1 MiB and 10,000 tensors of 4 KiB, against `torch._foreach_copy_`, `torch.cat` and
`torch.split_with_sizes_copy`. `--only` picks cases by the start of their names. Its JSON is the
study: one row a case, with the same run's copy rate of the list's bytes as one buffer (torch's
and tmakit's `copy_`)."""

from __future__ import annotations

import random

from ..bench.many import EAGER, PEERS, PREPARED, SINGLE, UNCHECKED, ManyCase, bench_many
from ..bench.report import BenchRow
from . import case_study, eager_columns, medians, tabled_study

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
