"""A reference for the mixture-of-experts tests, written from the definitions in plain Python:
the row each routed slot lands on (expert-major, tokens in order within an expert, groups padded
to a multiple of `align`), and the combine in float64."""

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
