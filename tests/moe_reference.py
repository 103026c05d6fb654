"""A reference for the mixture-of-experts tests, written from the definitions in plain Python:
the row each routed slot lands on (expert-major, tokens in order within an expert, groups padded
to a multiple of `align`), and the combine in float64; the routings the routing kernels are
checked on and the check, which names the first wrong slot."""

from __future__ import annotations


def expected_rows(
    ids: list[list[int]], experts: int, align: int
) -> tuple[list[list[int]], list[int], list[int]]:
    """(row map, tokens per expert, expert offsets) of `ids` (T lists of topk ids; an id outside
    [0, experts) has no row: -1)."""
    tokens_of = [[] for _ in range(experts)]
    for token, slots in enumerate(ids):
        for slot, expert in enumerate(slots):
            if 0 <= expert < experts:
                tokens_of[expert].append((token, slot))
    row_map = [[-1] * len(slots) for slots in ids]
    offsets, row = [0], 0
    for expert in range(experts):
        for rank, (token, slot) in enumerate(tokens_of[expert]):
            row_map[token][slot] = row + rank
        row += -(-len(tokens_of[expert]) // align) * align
        offsets.append(row)
    return row_map, [len(t) for t in tokens_of], offsets


def mask_ids(mask: list[list[bool]], topk: int) -> list[list[int]]:
    """Each token's experts in order, at most topk, -1 past its last."""
    out = []
    for row in mask:
        chosen = [e for e, on in enumerate(row) if on][:topk]
        out.append(chosen + [-1] * (topk - len(chosen)))
    return out


def combine_reference(y, row_map, probs):
    """out[t] = sum_j probs[t, j] * y[row_map[t, j]] in float64 (torch tensors on any device),
    and the bound of fp32 accumulation's error: (topk + 1) units of fp32 rounding of the sum of
    magnitudes."""
    import torch

    tokens, topk = row_map.shape
    rows = y.shape[0]
    total = torch.zeros((tokens, y.shape[1]), dtype=torch.float64, device=y.device)
    magnitude = torch.zeros_like(total)
    for slot in range(topk):
        named = (row_map[:, slot] >= 0) & (row_map[:, slot] < rows)
        values = y.index_select(0, torch.where(named, row_map[:, slot], 0).long()).double()
        if probs is not None:
            values = values * probs[:, slot].double()[:, None]
        values = torch.where(named[:, None], values, 0)
        total += values
        magnitude += values.abs()
    bound = (topk + 1) * 2.0**-23 * magnitude
    return total, bound


def within_output_rounding(out, total, bound) -> bool:
    """Whether `out` equals `total` within the fp32 bound plus one rounding to out's dtype."""
    import torch

    eps = {torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}[out.dtype]
    allowed = bound + eps * (total.abs() + bound) + 1e-30
    if out.dtype == torch.float16:  # subnormal spacing
        allowed = allowed + 2.0**-24
    return bool(((out.double() - total).abs() <= allowed).all())


ROUTING_CASES = [
    # tokens, topk, experts, align
    (1, 1, 1, 1),
    (1, 8, 3, 16),
    (7, 1, 1, 128),
    (40, 6, 9, 16),
    (300, 8, 256, 128),  # more than a block's warps, most experts one token or none
    (600, 4, 512, 1),
    (2049, 1, 8, 16),  # past one block, a partial last block and warp
    (3000, 8, 256, 128),  # 12 blocks
    (2000, 3, 1024, 1),  # the most experts
]


def routing_ids(rng, tokens: int, topk: int, experts: int, dtype, spoiled: float = 0.1):
    """(T, topk) ids: mostly experts, some -1 (no expert) and some outside [0, E) (dropped),
    among them values past 32 bits for int64 ids (the kernel must not cut them to 32)."""
    import torch

    wide = dtype == torch.int64
    bad = [-2, experts, experts + 7, -(2**31)] + ([2**32, 2**32 + 1, -(2**40)] if wide else [2**31 - 1])
    rows = []
    for _ in range(tokens):
        row = []
        for _ in range(topk):
            draw = rng.random()
            row.append(
                -1 if draw < spoiled else rng.choice(bad) if draw < 2 * spoiled else rng.randrange(experts)
            )
        rows.append(row)
    return torch.tensor(rows, dtype=dtype)


def assert_routings_equal(got, expected, what: str) -> None:
    """Every field bit for bit; the first wrong slot named."""
    import torch

    names = ("row_map", "tokens_per_expert", "expert_offsets", "dropped")
    for name, have, want in zip(names, got, expected, strict=True):
        if isinstance(have, torch.Tensor) and isinstance(want, torch.Tensor):
            assert (have.dtype, have.device) == (want.dtype, want.device), f"{what}: {name}'s dtype or device"
        have, want = torch.as_tensor(have).to(torch.int64), torch.as_tensor(want).to(torch.int64)
        assert have.shape == want.shape, f"{what}: {name} is {tuple(have.shape)}, not {tuple(want.shape)}"
        wrong = have != want
        if wrong.any():
            where = [int(v) for v in wrong.nonzero()[0]] if have.dim() else []
            place = f"[{', '.join(map(str, where))}]" if where else ""
            raise AssertionError(
                f"{what}: {name}{place} is {int(have[tuple(where)])}, torch's routing has "
                f"{int(want[tuple(where)])} ({int(wrong.sum())} wrong)"
            )
