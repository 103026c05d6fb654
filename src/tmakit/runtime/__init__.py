"""Between the plans and the GPU: compiling for sm_90a (with or without a GPU; the one compile
cache), launching each kernel family, `copy_`'s dispatch, and the torch side of a launch.

The helpers a user's own kernel needs to compile and call it, one import path:

    from tmakit.runtime import compile_kernel, fake_tensor, fake_source, placeholder_stream, current_stream
"""

from .compile import (
    CompiledKernel,
    compile_kernel,
    fake_source,
    fake_tensor,
    placeholder_stream,
    to_cute_tensor,
)
from .device import current_stream, find_hopper_gpu

__all__ = [
    "CompiledKernel",
    "compile_kernel",
    "current_stream",
    "fake_source",
    "fake_tensor",
    "find_hopper_gpu",
    "placeholder_stream",
    "to_cute_tensor",
]
