"""`tmakit.enable()`: tmakit's routes installed under torch's own ops, so that a model gains
without a line of its code changed.

torch lets a library register a kernel for an aten op on a dispatch key and keep the kernel that
was there (`torch.library.get_kernel`, torch 2.9 and newer). Each family's `op` part lists what it
serves in `ATEN_OVERRIDES`: an aten op's name -> `serve(*args, **kwargs)`, which returns the op's
result where tmakit's route takes the call, or `HandedBack(reason)` where it does not (a cheap
condition, no plan built, before anything is written); the kept kernel then serves the call.

The kernels run below autograd: torch has already recorded the call and bumps the version counter
itself, so a tensor that requires grad is normal there and `serve` writes through `.detach()`ed
views of the same memory. A guard per thread sends every aten call made while a `serve` runs on
that thread (tmakit's own fallbacks to torch's op) to the kept kernel: an override never re-enters
itself. Calls are counted per op and path (`stats`).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from . import registry
from .errors import TmaConfigError

KEY = "CUDA"  # the dispatch key the overrides sit on: tmakit serves CUDA tensors alone
SERVED = "tmakit"  # the path a call `serve` took counts under


class HandedBack:
    """What `serve` returns for a call it leaves to torch's kernel, and why (`reason`)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"HandedBack({self.reason!r})"


Serve = Callable[..., Any]


class Unrecoverable(RuntimeError):
    """A serve's failure torch's kernel cannot repair (it wrote what a second run would change):
    raised to the caller, never handed back."""


def available() -> dict[str, Serve]:
    """Every family's overrides (its op part's `ATEN_OVERRIDES`), by aten op name."""
    found: dict[str, Serve] = {}
    for module in registry.parts("op"):
        found.update(getattr(module, "ATEN_OVERRIDES", {}))
    return found


class _Inside(threading.local):
    """Whether a `serve` runs on this thread (its aten calls go to the kept kernels)."""

    serving = False


_INSIDE = _Inside()
_COUNTS: dict[str, dict[str, int]] = {}  # op name -> reason (SERVED_REASON: served) -> calls
SERVED_REASON = ""
_INSTALLED: dict[str, Any] = {}  # op name -> the torch.library.Library holding its override


# A wrapped number (a Python scalar torch holds as a 0-D tensor, `x.copy_(2.0)` inside autograd)
# reaches a Python kernel as the scalar; the kept kernel takes it back as the tensor it was.
_WRAPPED = {bool: torch.bool, int: torch.int64, float: torch.float64, complex: torch.complex128}


def _tensor_arguments(name: str) -> tuple[int, ...]:
    """The positions of aten op `name`'s Tensor arguments."""
    schema = getattr(torch.ops.aten, name).default._schema
    return tuple(i for i, argument in enumerate(schema.arguments) if str(argument.type) == "Tensor")


def _kept_call(kept: Any, tensors: tuple[int, ...], keyset: Any, args: tuple, kwargs: dict) -> Any:
    """The kept kernel's call, a wrapped number given back as its 0-D tensor."""
    for i in tensors:
        if i < len(args) and type(args[i]) in _WRAPPED:
            args = tuple(_rewrapped(value) if k in tensors else value for k, value in enumerate(args))
            break
    return kept.call_boxed(keyset, *args, **kwargs)


def _rewrapped(value: Any) -> Any:
    """A wrapped number's 0-D tensor (any other value as it is)."""
    wrapped = _WRAPPED.get(type(value))
    return value if wrapped is None else torch.scalar_tensor(value, dtype=wrapped)


def _failed(name: str, error: Exception) -> HandedBack:
    """A `serve` that raised: its call handed back, the error warned about once. A serve raises
    only where torch's kernel may then serve the call whole: before writing, or having written
    what the kept kernel writes again (a copy's rows); one that accumulated raises an error this
    module does not catch (`rows.op.AddedBeforeRaising`)."""
    reason = f"tmakit's path failed: {type(error).__name__}"
    if reason not in _COUNTS.get(name, {}):
        warnings.warn(
            f"tmakit.enable(): {name} handed to torch's kernel: {error}", RuntimeWarning, stacklevel=3
        )
    return HandedBack(reason)


def _kernel(name: str, serve: Serve, kept: Any) -> Callable[..., Any]:
    """The kernel registered for aten op `name`: `serve`, or the kept kernel `kept`. Its calls
    are counted by reason (`SERVED_REASON` for a served one) in `_COUNTS[name]`, a string key
    whose hash Python keeps."""
    tensors = _tensor_arguments(name)
    counts = _COUNTS.setdefault(name, {})
    inside = _INSIDE

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if inside.serving:
            return _kept_call(kept, tensors, keyset, args, kwargs)
        inside.serving = True
        try:
            result = serve(*args, **kwargs)
        except Unrecoverable:
            raise
        except Exception as error:  # tmakit's path failed (a compile, a launch): torch's serves the call
            result = _failed(name, error)
        finally:
            inside.serving = False
        if type(result) is HandedBack:
            reason = result.reason
            counts[reason] = counts.get(reason, 0) + 1
            return _kept_call(kept, tensors, keyset, args, kwargs)
        counts[SERVED_REASON] = counts.get(SERVED_REASON, 0) + 1
        return result

    kernel.__name__ = kernel.__qualname__ = f"tmakit_{name}"
    return kernel


def chosen(ops: object) -> dict[str, Serve]:
    """The overrides `ops` names (None: all), each checked against `available`."""
    overrides = available()
    if ops is None:
        return overrides
    names = [ops] if isinstance(ops, str) else ops
    try:
        names = list(names)  # type: ignore[call-overload]
    except TypeError:
        raise TmaConfigError(
            f"enable(ops={ops!r}): ops is a list of aten op names; pass e.g. ops=['copy_']"
        ) from None
    unknown = [name for name in names if name not in overrides]
    if unknown:
        raise TmaConfigError(
            f"enable(ops=...): {', '.join(map(repr, unknown))} is not an op tmakit overrides; "
            f"it overrides {', '.join(sorted(overrides))}"
        )
    return {name: overrides[name] for name in names}


def enable(ops: object = None, key: str = KEY) -> list[str]:
    """Install tmakit's overrides of `ops` (None: every one) on torch's `key` kernels; an op
    already installed stays as it is, one without a kernel on `key` in this build (a CPU build of
    torch has no CUDA kernel of index_select) is not installed. `key` is for tests (the CPU key on
    a machine without a GPU). Returns the ops installed now, sorted."""
    if not hasattr(torch.library, "get_kernel"):
        raise TmaConfigError(
            f"tmakit.enable() needs torch 2.9 or newer (torch.library.get_kernel keeps torch's kernel); "
            f"this is torch {torch.__version__}: upgrade torch, or call tmakit's functions directly"
        )
    for name, serve in chosen(ops).items():
        if name in _INSTALLED:
            continue
        try:
            kept = torch.library.get_kernel(f"aten::{name}", key)
        except RuntimeError:  # no kernel on `key` in this build (CUDA's in a CPU build): none to serve
            continue
        library = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():  # replacing torch's kernel is the point; it is kept
            warnings.filterwarnings("ignore", "Warning only once for all operators")
            library.impl(name, _kernel(name, serve, kept), key, with_keyset=True)
        _INSTALLED[name] = library
    return sorted(_INSTALLED)


def disable(ops: object = None) -> list[str]:
    """Remove the overrides of `ops` (None: every one installed); torch's kernels serve again.
    Returns the ops still installed."""
    for name in list(_INSTALLED) if ops is None else list(chosen(ops)):
        library = _INSTALLED.pop(name, None)
        if library is not None:
            library._destroy()
    return sorted(_INSTALLED)


@contextlib.contextmanager
def enabled(ops: object = None, key: str = KEY) -> Iterator[list[str]]:
    """`enable(ops)` for the block, the overrides installed by it removed after."""
    before = set(_INSTALLED)
    installed = enable(ops, key)
    try:
        yield installed
    finally:
        disable([name for name in installed if name not in before])


def stats(reset: bool = False) -> dict[tuple[str, str, str], int]:
    """Calls the overrides saw, by (op, path, reason): path "tmakit" (its route served the call:
    TMA, or torch's op where the route chose it) or "torch" (handed back, the reason why)."""
    found = {
        (name, SERVED if reason == SERVED_REASON else "torch", reason): calls
        for name, counts in list(_COUNTS.items())
        for reason, calls in list(counts.items())  # a copy: other threads may count meanwhile
    }
    if reset:
        for counts in _COUNTS.values():
            counts.clear()
    return found
