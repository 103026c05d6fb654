"""What the OpInfo tests share: torch's OpInfo database (a test module importing this is skipped
where torch's internal test modules do not import: they need `expecttest`, in the test extra),
the dtypes they run, and the GPU run that prints how many samples took each path."""

from __future__ import annotations

from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")
try:
    from torch.testing._internal.common_methods_invocations import op_db
except ImportError as error:  # expecttest missing, or another torch build's layout
    pytest.skip(f"torch's OpInfo database does not import: {error}", allow_module_level=True)

DTYPES = (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int16,
    torch.int32, torch.int64, torch.bool, torch.complex64,
)  # fmt: skip

__all__ = ["DTYPES", "op_db", "on_the_gpu", "torch"]


def on_the_gpu(run: Callable[[str], dict], capsys, what: str) -> dict:
    """`run("cuda")`'s count of samples by path, finished on the GPU and printed."""
    paths = run("cuda")
    torch.cuda.synchronize()
    with capsys.disabled():
        print(f"\nOpInfo {what} samples by path: {paths}")
    return paths
