"""The peers of the MoE study (`moe.bench`): the torch expressions a practitioner writes for a
dispatch, a combine and a layer's forward (their gradients by torch's autograd), and
TransformerEngine's Triton permutation kernels, loaded from the git-ignored `.peers/`
(`scripts/fetch_peers.py`), with the autograd pair its torch wrappers make of them and the map from
its rows to tmakit's."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ..bench.peers import PEERS, PEERS_VARIABLE, Peer, load_peer, peer_folders

# TransformerEngine's Triton permutation kernels: the version fetched, where they are unpacked
# (`scripts/fetch_peers.py`), the module imported.
TE_VERSION = "2.20.2"
TE_MODULE = "transformer_engine.pytorch.triton.permutation"
FETCH = (
    f"fetch them with `python scripts/fetch_peers.py` (pip download transformer_engine=={TE_VERSION} "
    f"--no-deps; the permutation kernels unpacked into {PEERS}/) and carry {PEERS} to the GPU machine "
    f"(or name a folder holding them in ${PEERS_VARIABLE})"
)


# -- the routing and the torch expressions --------------------------------------------------------
def make_routing(tokens: int, topk: int, experts: int, generator, device) -> tuple:
    """(ids (T, topk) int64, probs (T, topk) fp32): each token's top-k of softmax scores over
    `experts` random logits, seeded by `generator`."""
    import torch

    logits = torch.randn(tokens, experts, generator=generator, device=device)
    probs, ids = logits.softmax(dim=1).topk(topk, dim=1)
    return ids, probs


def source_index(ids) -> Any:
    """The expert-major source index (T*topk,) int64: the token of each permuted row, experts in
    order, tokens in order within one (a stable sort of the flat ids)."""
    import torch

    return torch.argsort(ids.reshape(-1), stable=True) // ids.shape[1]


def torch_dispatch(x, source):
    """The dispatch as a practitioner writes it, its source index given."""
    return x.index_select(0, source)


def torch_sorted_dispatch(x, ids):
    """The dispatch with its source index built from the ids (the argsort) in the same call."""
    return x.index_select(0, source_index(ids))


def torch_combine(y, rows, token_of_row, weights, tokens: int):
    """The combine as a practitioner writes it: the rows gathered token-major, weighted and added
    into an fp32 sum by token, cast back to y's dtype."""
    import torch

    total = torch.zeros((tokens, y.shape[1]), dtype=torch.float32, device=y.device)
    return total.index_add_(0, token_of_row, y.index_select(0, rows).float() * weights[:, None]).to(y.dtype)


def torch_layer(x, ids, probs):
    """The layer's forward as a practitioner writes it in torch, the expert the identity: x
    gathered by the expert-major source index (the stable argsort of the ids, in the call), each
    row weighted by its slot's probability and added into an fp32 sum by its token (`index_add_`),
    cast back to x's dtype. torch's autograd differentiates it in x and probs."""
    import torch

    tokens, topk = ids.shape
    order = torch.argsort(ids.reshape(-1), stable=True)
    source = order // topk
    y = x.index_select(0, source)  # the dispatch; the identity expert hands y to the combine
    weights = probs.reshape(-1).index_select(0, order)
    total = torch.zeros((tokens, x.shape[1]), dtype=torch.float32, device=x.device)
    return total.index_add_(0, source, y.float() * weights[:, None]).to(x.dtype)


def with_gradients(out, leaves: tuple, grad) -> tuple:
    """(out, the gradient of each of `leaves`): autograd's backward of `out` for the output
    gradient `grad`, the gradients returned (`torch.autograd.grad`) rather than accumulated into
    `.grad` (`out.backward(grad)` would add each into the leaf's `.grad`, one more pass over x's):
    in a model x is an activation whose gradient flows on, and a graph replay then depends on no
    `.grad` left by an earlier call."""
    import torch

    return (out, *torch.autograd.grad(out, leaves, grad))


def combine_indices(row_map, probs) -> tuple:
    """torch's combine's (rows, token_of_row, weights): each slot's row of y, its token, its
    probability, token-major."""
    import torch

    tokens, topk = row_map.shape
    token_of_row = torch.arange(tokens * topk, device=row_map.device) // topk
    return row_map.reshape(-1).long(), token_of_row, probs.reshape(-1)


def routing_mask(ids, experts: int) -> Any:
    """The (T, E) bool mask of the ids, as a router hands TransformerEngine's permute."""
    import torch

    return torch.zeros((ids.shape[0], experts), dtype=torch.bool, device=ids.device).scatter_(1, ids, True)


def merging_probs(ids, probs, experts: int) -> Any:
    """The (T, E) fp32 probabilities TransformerEngine's unpermute weighs each expert's row by."""
    import torch

    spread = torch.zeros((ids.shape[0], experts), dtype=torch.float32, device=ids.device)
    return spread.scatter_(1, ids, probs.float())


def te_row_order(te_map, ids, row_map, experts: int) -> Any:
    """For each row of TransformerEngine's permuted output, the row of tmakit's holding the same
    (token, expert) (-1: none): its row map (T, 2E + 1) holds each token's destination rows, then
    their experts, then their count."""
    import torch

    tokens, topk = row_map.shape
    slots = torch.full((tokens, experts + 1), -1, dtype=torch.int64, device=row_map.device)
    slots.scatter_(1, torch.where(ids >= 0, ids, experts).long(), row_map.long())
    counts = te_map[:, 2 * experts].long()
    routed = torch.arange(experts, device=te_map.device)[None, :] < counts[:, None]
    te_rows = te_map[:, :experts][routed].long()
    te_experts = te_map[:, experts : 2 * experts][routed].long()
    token = torch.arange(tokens, device=te_map.device)[:, None].expand(tokens, experts)[routed]
    order = torch.full((tokens * topk,), -1, dtype=torch.int64, device=te_map.device)
    order[te_rows] = slots[token, te_experts]
    return order


# -- TransformerEngine's kernels ------------------------------------------------------------------
def load_transformer_engine(folders: list[Path]) -> Peer:
    """TransformerEngine's permutation module from the first of `folders` holding it (`load_peer`:
    its package `__init__`s are the fetch's empty stand-ins, nothing else of TransformerEngine is
    there); a note saying why not where it is absent or does not import."""
    return load_peer(folders, "transformer_engine", TE_MODULE, "permutation kernels", FETCH)


def te_layer_functions(te: ModuleType) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(permute, unpermute): TransformerEngine's permute (no probabilities) and its unpermute with
    (T, E) merging probabilities as autograd functions, each backward TransformerEngine's own
    kernel as its torch wrappers pair them: the permute's is its unpermute without probabilities
    (each token's rows of the gradient summed in fp32), the unpermute's is
    `unpermute_with_mask_map_bwd_with_merging_probs` (y's gradient: the output's gradient scaled by
    each slot's probability; the probabilities': each slot's dot product of the output's gradient
    with its row, in fp32, zero off the routed experts). Both take the row map built before them
    (`make_row_id_map`, nothing to differentiate)."""
    import torch

    class Permute(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, te_map, rows):
            tokens, hidden = x.shape
            experts = (te_map.shape[1] - 1) // 2
            ctx.save_for_backward(te_map)
            ctx.sizes = (tokens, experts, hidden)
            permuted = te.permute_with_mask_map(
                x, te_map, None, None, None, tokens, experts, rows, hidden, None
            )
            return permuted[0]

        @staticmethod
        def backward(ctx, grad):
            (te_map,) = ctx.saved_tensors
            tokens, experts, hidden = ctx.sizes
            summed = te.unpermute_with_mask_map(
                grad.contiguous(), te_map, None, None, None, tokens, experts, hidden
            )[0]
            return summed, None, None

    class Unpermute(torch.autograd.Function):
        @staticmethod
        def forward(ctx, y, te_map, merging):
            tokens, experts = merging.shape
            ctx.save_for_backward(y, te_map, merging)
            return te.unpermute_with_mask_map(y, te_map, merging, None, None, tokens, experts, y.shape[1])[0]

        @staticmethod
        def backward(ctx, grad):
            y, te_map, merging = ctx.saved_tensors
            tokens, experts = merging.shape
            grad_y, grad_merging = te.unpermute_with_mask_map_bwd_with_merging_probs(
                grad.contiguous(), te_map, y, merging, None, tokens, experts, y.shape[0], y.shape[1]
            )
            return grad_y, None, grad_merging

    return Permute.apply, Unpermute.apply


def te_layer(te: ModuleType, functions: tuple, x, mask, merging, rows: int):
    """The layer's forward by TransformerEngine, the expert the identity: its row map of the mask
    (`make_row_id_map`), its permute, its unpermute weighted by the (T, E) merging probabilities,
    differentiable through `te_layer_functions`."""
    permute, unpermute = functions
    tokens, experts = mask.shape
    te_map = te.make_row_id_map(mask, tokens, experts)
    return unpermute(permute(x, te_map, rows), te_map, merging)


@functools.cache
def transformer_engine() -> Peer:
    """TransformerEngine's kernels for this process (`load_transformer_engine` of `peer_folders`)."""
    return load_transformer_engine(peer_folders())


def peer_context() -> dict:
    """What the results record of the peers: TransformerEngine's version and source, Triton's."""
    peer = transformer_engine()
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"transformer_engine": {"version": peer.version, "note": peer.note}, "triton": triton_version}
