"""What tmakit's kernels are compared with, in the same process and by the same timer:
torch `copy_` (read + write), torch `sum` (read), torch's in-place ops beside the reduce
stores (`TORCH_IN_PLACE`), the dot expressions (`TORCH_DOTS`), and, when Triton is importable, a
Triton copy and a Triton fp32 row sum through TMA tensor descriptors. Each returns one launch callable per
rotated buffer."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config import LoadConfig

if TYPE_CHECKING:
    import torch


def torch_copy_launches(sources: list[torch.Tensor]) -> list[Callable[[], Any]]:
    destinations = [source.clone() for source in sources]
    return [lambda s=s, d=d: d.copy_(s) for s, d in zip(sources, destinations, strict=True)]


def _out_is_dst(name: str) -> Callable[[Any, Any], Any]:
    """torch.`name`(dst, src, out=dst): torch's elementwise op written into dst in place."""

    def reduce(dst: torch.Tensor, src: torch.Tensor) -> Any:
        import torch

        return getattr(torch, name)(dst, src, out=dst)

    return reduce


# torch's in-place form of each reduce op it has, dst = dst op src (inc and dec it lacks): the
# baseline's name in the bench's rows, and the call.
TORCH_IN_PLACE = {
    "add": ("torch add_", lambda dst, src: dst.add_(src)),
    "min": ("torch minimum (out=dst)", _out_is_dst("minimum")),
    "max": ("torch maximum (out=dst)", _out_is_dst("maximum")),
    "and": ("torch bitwise_and_", lambda dst, src: dst.bitwise_and_(src)),
    "or": ("torch bitwise_or_", lambda dst, src: dst.bitwise_or_(src)),
    "xor": ("torch bitwise_xor_", lambda dst, src: dst.bitwise_xor_(src)),
}


def torch_reduce_launches(
    op: str, sources: list[torch.Tensor], destinations: list[torch.Tensor]
) -> list[Callable[[], Any]]:
    """torch's in-place `op` of each source into its destination (`TORCH_IN_PLACE`)."""
    function = TORCH_IN_PLACE[op][1]
    return [lambda s=s, d=d: function(d, s) for s, d in zip(sources, destinations, strict=True)]


def torch_sum_launches(sources: list[torch.Tensor]) -> list[Callable[[], Any]]:
    return [lambda s=s: s.sum() for s in sources]


def _einsum(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.einsum("bmk,mk->bm", a, x)


def _bmm_fp32(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """One (B, K) x (K,) product per row m, fp32 accumulated and out (`out_dtype`: a TypeError
    where this torch lacks it)."""
    import torch

    return torch.bmm(a.transpose(0, 1), x.unsqueeze(-1), out_dtype=torch.float32).squeeze(-1).t()


def _mul_sum(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.mul(a, x).sum(-1, dtype=torch.float32)


# torch's ways to write out[b, m] = sum_k A[b, m, k] * X[m, k] (A (B, M, K), X (M, K)): name ->
# (call, how it rounds). "output": the result in the input dtype (cuBLAS accumulates in fp32, then
# rounds); "products": each product rounded to the input dtype (a (B, M, K) temporary) before an
# fp32 sum; "fp32": fp32 accumulation and output. The bench times each one this torch has.
TORCH_DOTS: dict[str, tuple[Callable[[Any, Any], Any], str]] = {
    "torch einsum bmk,mk->bm": (_einsum, "output"),
    "torch bmm out_dtype=fp32": (_bmm_fp32, "fp32"),
    "torch mul+sum(dtype=fp32)": (_mul_sum, "products"),
}


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:
        return False
    return True


def triton_supports(config: LoadConfig) -> bool:
    """Whether the Triton baselines run here on this configuration (2-D, 16- or 32-bit floats)."""
    return triton_available() and len(config.shape) == 2 and config.dtype in ("fp16", "bf16", "fp32")


def triton_tma_copy_launches(sources: list[torch.Tensor], tile: tuple[int, int]) -> list[Callable[[], Any]]:
    """A Triton copy through TMA descriptors: each program loads one tile and stores it."""
    import triton
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor

    @triton.jit
    def tma_copy(in_desc, out_desc, TILE_ROWS: tl.constexpr, TILE_COLS: tl.constexpr):
        row, col = tl.program_id(0) * TILE_ROWS, tl.program_id(1) * TILE_COLS
        out_desc.store([row, col], in_desc.load([row, col]))

    launches = []
    for source in sources:
        destination = source.clone()
        rows, cols = source.shape
        grid = (triton.cdiv(rows, tile[0]), triton.cdiv(cols, tile[1]))
        in_desc = TensorDescriptor.from_tensor(source, list(tile))
        out_desc = TensorDescriptor.from_tensor(destination, list(tile))
        launches.append(
            lambda i=in_desc, o=out_desc, g=grid: tma_copy[g](i, o, TILE_ROWS=tile[0], TILE_COLS=tile[1])
        )
    return launches


def triton_tma_rowsum_launches(
    sources: list[torch.Tensor], block: tuple[int, int] = (64, 256)
) -> list[Callable[[], Any]]:
    """A Triton fp32 row sum through TMA descriptors: each program owns `block[0]` rows and walks
    their columns `block[1]` at a time (2-D inputs)."""
    import torch
    import triton
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor

    @triton.jit
    def tma_rowsum(in_desc, out, rows, cols, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
        row = tl.program_id(0) * BLOCK_ROWS
        total = tl.zeros([BLOCK_ROWS], dtype=tl.float32)
        for col in range(0, cols, BLOCK_COLS):
            total += tl.sum(in_desc.load([row, col]).to(tl.float32), axis=1)
        offsets = row + tl.arange(0, BLOCK_ROWS)
        tl.store(out + offsets, total, mask=offsets < rows)

    launches = []
    for source in sources:
        rows, cols = source.shape
        out = torch.empty(rows, dtype=torch.float32, device=source.device)
        in_desc = TensorDescriptor.from_tensor(source, list(block))
        grid = (triton.cdiv(rows, block[0]),)
        launches.append(
            lambda i=in_desc, o=out, r=rows, c=cols, g=grid: tma_rowsum[g](
                i, o, r, c, BLOCK_ROWS=block[0], BLOCK_COLS=block[1]
            )
        )
    return launches
