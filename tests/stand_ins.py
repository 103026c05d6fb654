"""CPU tensors standing in for GPU ones (the device rule waived, an H200's properties, launchers
that launch nothing), so that a CPU machine reaches the checks and plans behind the device rule;
nothing compiles or launches."""

from __future__ import annotations

import contextlib
import importlib
from types import SimpleNamespace


def gpu_stand_ins(monkeypatch) -> None:
    """Patch tmakit (through `monkeypatch`) so CPU tensors pass as tensors on CUDA device 0 of an
    H200 whose launchers launch nothing."""
    import torch

    from tmakit.api import tensors as api_tensors
    from tmakit.copies import api as copies_api
    from tmakit.copies import call as copies_call
    from tmakit.load import api as api_load
    from tmakit.moe import call as moe_call
    from tmakit.reduce import call as api_reduce
    from tmakit.rows import call as api_rows
    from tmakit.runtime.dispatch import CallTable, Dispatch
    from tmakit.runtime.launch import Launcher

    api_im2col = importlib.import_module("tmakit.patches.api")  # the module: tmakit.im2col is the function
    op_im2col = importlib.import_module("tmakit.patches.op")

    def launch(dst: object, src: object) -> None:
        pass

    launcher = Launcher(launch, checks_arguments=True, shape_generic=True)
    properties = SimpleNamespace(multi_processor_count=132, L2_cache_size=60 * 2**20)
    monkeypatch.setattr(api_tensors, "check_on_gpu", lambda tensor, name: None)
    monkeypatch.setattr("tmakit.copies.op.check_traced", lambda op, **tensors: None)
    monkeypatch.setattr("tmakit.ops_base.check_traced", lambda op, **tensors: None)  # a pair's fake check
    monkeypatch.setattr("tmakit.load.op.check_traced", lambda op, **tensors: None)
    monkeypatch.setattr(op_im2col, "check_traced", lambda op, **tensors: None)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: properties)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(api_reduce, "class_launcher", lambda *args: launcher)
    monkeypatch.setattr(copies_call, "copy_launcher", lambda *args, **kwargs: launcher)
    monkeypatch.setattr(api_reduce, "reduce_launcher", lambda *args, **kwargs: launcher)
    monkeypatch.setattr(api_im2col, "im2col_launcher", lambda *args: launcher)
    monkeypatch.setattr(api_tensors, "cuda_index", lambda tensor: 0)
    monkeypatch.setattr(api_rows, "cuda_index", lambda tensor: 0)
    monkeypatch.setattr(api_reduce, "cuda_index", lambda tensor: 0)
    monkeypatch.setattr(api_rows, "device_name", lambda index: "a stand-in GPU")
    monkeypatch.setattr(api_rows, "_launcher", lambda *args: lambda table, index, compact: None)
    monkeypatch.setattr(api_rows, "_KNOWN", CallTable())
    monkeypatch.setattr(moe_call, "cuda_index", lambda tensor: 0)
    launch_any = Launcher(lambda *tensors: None, checks_arguments=True, shape_generic=True)
    monkeypatch.setattr(moe_call, "dispatch_launcher", lambda *args: launch_any)
    monkeypatch.setattr(moe_call, "combine_launcher", lambda *args: launch_any)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    compiled = SimpleNamespace(function=launcher)
    monkeypatch.setattr(api_load, "compile_tile_load", lambda *args, **kwargs: compiled)
    copies = Dispatch(copies_call.plan_copy, copies_call.check_copy_tensors)
    monkeypatch.setattr(copies_api, "_COPIES", copies)
    monkeypatch.setattr(copies_call, "_CLASSES", CallTable())


def strictly(function):
    """`function` as an op calls it, strict: the call asserts `strict=True` was passed and runs the
    function's own path (torch's op for CPU tensors, which does what the kernel does)."""

    def call(*args, strict, **kwargs):
        assert strict is True  # every op is strict
        return function(*args, **kwargs)

    return call


def calling_timer(launches: dict, *args: object) -> dict:
    """A stand-in for the bench's timers: every launch called once, three samples of 1-3 us each."""
    for calls in launches.values():
        for launch in calls:
            launch()
    return {name: [1.0, 2.0, 3.0] for name in launches}
