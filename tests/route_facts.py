"""A tensor pair's route facts written as flat fields, as route tests state them: the
destination's shape, then the source's, strides, dtypes, one element size, addresses, devices."""

from __future__ import annotations

from tmakit.plan.route import PairFacts, TensorFacts


def flat_pair(
    shape: tuple[int, ...],
    src_shape: tuple[int, ...],
    src_strides: tuple[int, ...],
    dst_strides: tuple[int, ...],
    src_dtype: str,
    dst_dtype: str,
    nbytes: int,
    src_address: int,
    dst_address: int,
    src_device: int,
    dst_device: int,
    lazy: str | None = None,
) -> PairFacts:
    """`PairFacts` of a destination of `shape` and a source of `src_shape`, each `nbytes` an element."""
    dst = TensorFacts(shape, dst_strides, dst_dtype, nbytes, dst_address, dst_device)
    src = TensorFacts(src_shape, src_strides, src_dtype, nbytes, src_address, src_device)
    return PairFacts(dst, src, lazy)
