import os
import sys

import pytest

# The DSL falls back to sm_100a when it finds no driver; tmakit names sm_90a itself, this is a
# second guard for anything that compiles without going through tmakit.runtime.compile.
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

# tmakit keeps TVM-FFI kernels on disk ($TMAKIT_CACHE_DIR, else ~/.cache/tmakit). Set at import, so
# the whole session, its pytest-xdist workers and every process a test starts (they inherit the
# environment) write into one temporary folder, removed at exit. "off" keeps nothing and is kept.
SESSION_CACHE_MARK = "TMAKIT_TEST_SESSION_CACHE"  # the folder this session made: its workers reuse it


def _cache_compiled_kernels_in_a_session_folder() -> None:
    configured = os.environ.get("TMAKIT_CACHE_DIR")
    if configured in ("", "off") or (configured and configured == os.environ.get(SESSION_CACHE_MARK)):
        return
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="tmakit-test-cache-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    os.environ["TMAKIT_CACHE_DIR"] = os.environ[SESSION_CACHE_MARK] = folder


_cache_compiled_kernels_in_a_session_folder()


def _drop_the_dsl_folder_from_the_path() -> None:
    """nvidia-cutlass-dsl 4.8.0 appends its `cutlass/base_dsl` folder to sys.path when imported
    (4.8.1 does not). That folder holds a `torch.py`: without torch, `import torch` then raises
    ImportError instead of ModuleNotFoundError, and `pytest.importorskip("torch")` errors instead of
    skipping. The tests run at both ends of the DSL range pyproject.toml declares."""
    import cutlass.base_dsl

    folder = os.path.dirname(os.path.abspath(cutlass.base_dsl.__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != folder]


_drop_the_dsl_folder_from_the_path()

# The lab beside tmakit (benchmarks/timeline/: the instrumented and comparison rings), imported by
# the tests that check it as the package `timeline`.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))


def pytest_collection_modifyitems(config, items):
    from tmakit.runtime.device import find_hopper_gpu

    name, why = find_hopper_gpu()
    if name is not None:
        return
    skip = pytest.mark.skip(reason=f"needs a Hopper GPU: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def forget_known_calls():
    """Each test plans its own calls: an op's table of known calls
    (`tmakit.runtime.dispatch.CallTable`) starts empty, so that what a test planned with
    stand-ins (a CPU tensor passing as a GPU one, a launcher that launches nothing) is not found
    by the next."""
    from tmakit.runtime.dispatch import forget_calls

    forget_calls()


@pytest.fixture
def redispatched(monkeypatch):
    """The names of tmakit's `copy` and `load_tiles` ops each time their Autograd kernel
    redispatches below autograd (a second Python kernel), recorded by a spy around it."""
    torch = pytest.importorskip("torch")
    import tmakit.ops  # noqa: F401  # registers torch.ops.tmakit

    seen = []
    for op in (torch.ops.tmakit.copy.default, torch.ops.tmakit.load_tiles.default):

        def spy(keyset, *args, _redispatch=op.redispatch, _name=op._opname):
            seen.append(_name)
            return _redispatch(keyset, *args)

        monkeypatch.setattr(op, "redispatch", spy)
    return seen


@pytest.fixture
def reduces_as_gpu(monkeypatch):
    """CPU tensors pass as tensors on CUDA device 0 of an H200 with TVM-FFI for the reduce ops:
    (compiled, launched), each compile's (plan, destination, shape-generic) and each launch's (op,
    shape, strides the kernel was given), recorded, nothing run."""
    pytest.importorskip("torch", reason="the torch API needs torch (pip install 'tmakit[gpu]')")

    from tmakit.api import tensors as api_tensors
    from tmakit.reduce import call as api_reduce
    from tmakit.reduce import launch as reduce_launch
    from tmakit.runtime.launch import Launcher

    compiled, launched = [], []

    def reduce_launcher(reduce, destination, device, shape_generic=False):
        compiled.append((reduce, destination, shape_generic))

        def launch(dst, src):
            launched.append((reduce.op, tuple(src.shape), src.stride(), dst.stride()))

        return Launcher(launch, checks_arguments=True)

    monkeypatch.setattr(api_tensors, "check_on_gpu", lambda tensor, name: None)
    monkeypatch.setattr(api_tensors, "cuda_index", lambda tensor: 0)  # the route's device: CUDA 0
    monkeypatch.setattr(api_reduce, "device_facts", lambda device: (132, 60 * 2**20))
    monkeypatch.setattr(api_reduce, "tvm_ffi_available", lambda: True)
    for module in (reduce_launch, api_reduce):  # the class's compile (its class_launcher) and a shape's
        monkeypatch.setattr(module, "reduce_launcher", reduce_launcher)
    reduce_launch.class_launcher.cache_clear()
    yield compiled, launched
    reduce_launch.class_launcher.cache_clear()
