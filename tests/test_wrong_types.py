"""Wrong argument types at every public entry: every name in `tmakit.__all__` that takes
arguments, every `torch.ops.tmakit` op, the plan and option classes and `copy_class`, each given
200 derandomized draws of one argument replaced by a float (NaN and infinities included), a bool,
a string, a list, a tuple of the wrong length, None, a dict, a huge or negative integer or a
foreign object. Each call returns or raises TmaConfigError, nothing else; a numpy integer is taken
as the int it holds (the same outcome as the int). The CLI's commands have their own property
test (tests/test_cli_property.py).

The torch entries run on CPU tensors standing in for GPU ones (the device rule waived, an H200's
properties, launchers that launch nothing), so that the checks behind the device rule are reached;
nothing compiles."""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tmakit
from stand_ins import gpu_stand_ins
from tmakit import (
    CopyOptions,
    Im2colPlan,
    LoadConfig,
    LoadPlan,
    MulticastPlan,
    PipelinePlan,
    ReducePlan,
    TmaConfigError,
)
from tmakit.cluster.plan import ClusterDotPlan
from tmakit.plan import CopyPlan, copy_class

EXAMPLES = 200
HAS_TORCH = importlib.util.find_spec("torch") is not None
WRONG = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=6),
    st.lists(st.integers(-3, 300), max_size=4),
    st.tuples(st.integers(-3, 300)),
    st.tuples(st.integers(-3, 300), st.integers(-3, 300), st.integers(-3, 300)),
    st.none(),
    st.dictionaries(st.text(max_size=2), st.integers(0, 3), max_size=2),
    st.integers(-(2**70), 2**70),
    st.integers(-4, 300).map(np.int64),
    st.builds(object),
)
SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

LOAD = LoadPlan(LoadConfig())
RING = PipelinePlan(LOAD)


@dataclasses.dataclass
class Entry:
    """A public entry: `call(**arguments)` with `arguments` valid, any one of which a draw replaces."""

    name: str
    call: Callable[..., object]
    arguments: dict[str, object]
    torch: bool = False


def fields_of(cls: type, **given: object) -> dict[str, object]:
    """A dataclass's fields with their defaults, `given` for those without one."""
    values = {}
    for field in dataclasses.fields(cls):
        if field.name in given:
            values[field.name] = given[field.name]
        elif field.default is not dataclasses.MISSING:
            values[field.name] = field.default
    return values


# A kernel `tmakit.lint_text` reads: one barrier initialised, fenced, declared and waited on.
LINTED_PTX = """\
.version 8.8
.target sm_90a
.address_size 64
.extern .shared .align 1024 .b8 __dynamic_shmem__0[];
.visible .entry k(
    .param .u64 k_param_0
)
{
    mov.b32 %r1, __dynamic_shmem__0;
    mov.b32 %r2, 1;
    mbarrier.init.shared.b64 [%r1], %r2;
    fence.mbarrier_init.release.cluster;
    mbarrier.arrive.expect_tx.shared.b64 %rd1, [%r1], 0;
    mbarrier.try_wait.parity.shared.b64 %p1, [%r1], 0;
    ret;
}
"""

CLASS_ARGUMENTS = {
    "options": CopyOptions(),
    "dtype": "fp16",
    "rank": 2,
    "major": "row",
    "transpose": False,
    "tile": (16, 256),
    "sm_count": 132,
    "fits_l2": False,
    "rows_width": None,
}


PURE = [
    Entry("CopyOptions", CopyOptions.of, fields_of(CopyOptions)),
    Entry("LoadConfig", lambda **kw: LoadPlan(LoadConfig(**kw)), fields_of(LoadConfig)),
    Entry("LoadPlan", LoadPlan, {"config": LoadConfig()}),
    Entry("PipelinePlan", PipelinePlan, fields_of(PipelinePlan, load=LOAD)),
    Entry("CopyPlan", CopyPlan, fields_of(CopyPlan, ring=RING)),
    Entry("ReducePlan", ReducePlan, fields_of(ReducePlan, copy=CopyPlan(RING))),
    Entry("Im2colPlan", Im2colPlan, fields_of(Im2colPlan, shape=(2, 8, 8, 16), dtype="fp16", filter=3)),
    Entry("MulticastPlan", MulticastPlan, fields_of(MulticastPlan, load=LOAD)),
    Entry("ClusterDotPlan", ClusterDotPlan, fields_of(ClusterDotPlan, shape=(2, 4096, 4096))),
    Entry("copy_class", copy_class, dict(CLASS_ARGUMENTS)),
    Entry(
        "lint_text",
        tmakit.lint_text,
        {"ptx": LINTED_PTX, "mlir": None, "tensor_elements": ("Float16",), "reduce_dtype": "fp16"},
    ),
    # lint's refusals before it compiles: a host that is no function (the base one, None, too: so
    # nothing compiles here; tests/test_lint_corpus.py compiles) and a dtype tmakit does not know.
    Entry(
        "lint",
        lambda **kw: tmakit.lint(kw["host_function"], reduce_dtype=kw["reduce_dtype"]),
        {"host_function": None, "reduce_dtype": "int32"},
    ),
    Entry("sm_budget", lambda sms: tmakit.sm_budget(sms).__enter__(), {"sms": 16}),  # refused on entry
]


def torch_entries() -> list[Entry]:
    import torch

    def half(*shape: int) -> object:
        return torch.zeros(*shape, dtype=torch.float16)

    pair = {"dst": half(64, 64), "src": half(64, 64), "tile": None, "stages": None}
    entries = [
        Entry("copy_", tmakit.copy_, {**pair, "strict": False, "sms": 8}),
        Entry("copy_ strict", tmakit.copy_, {**pair, "strict": True}),
        Entry("copy", tmakit.copy, {"src": half(64, 64), "tile": None, "stages": None, "strict": False}),
        Entry("copy_path", tmakit.copy_path, dict(pair)),
        Entry("add_", tmakit.add_, dict(pair)),
        Entry("reduce_into_", tmakit.reduce_into_, {**pair, "op": "max"}),
        Entry("reduce_into_ strict", tmakit.reduce_into_, {**pair, "op": "add", "strict": True}),
        Entry("reduce_path", tmakit.reduce_path, {**pair, "op": "min", "strict": False}),
        Entry(
            "config_for",
            tmakit.config_for,
            {"tensor": half(64, 64), "tile": (64, 64), "swizzle": 0, "on_gpu": True},
        ),
        Entry("load_tiles", tmakit.load_tiles, {"tensor": half(64, 64), "tile": (64, 64), "swizzle": 0}),
        Entry(
            "padded_empty",
            tmakit.padded_empty,
            {"shape": (10, 7), "dtype": torch.float16, "major": "row", "device": "meta"},
        ),
        Entry(
            "im2col",
            tmakit.im2col,
            {
                "x": half(2, 8, 8, 16),
                "kernel": 3,
                "stride": 1,
                "padding": 1,
                "dilation": 1,
                "out": None,
                "strict": False,
            },
        ),  # fmt: skip
        Entry(
            "im2col_path",
            tmakit.im2col_path,
            {"x": half(2, 8, 8, 16), "kernel": 3, "stride": 1, "padding": 1, "dilation": 1, "out": None},
        ),
    ]
    rows = {"index": torch.arange(8), "check_index": True, "strict": False, "sms": 8}
    table = {"dst": half(64, 64), "src": half(8, 64)}
    entries += [
        Entry("gather_rows", tmakit.gather_rows, {"src": half(64, 64), "out": None, **rows}),
        Entry("scatter_rows_", tmakit.scatter_rows_, {**table, **rows}),
        Entry("index_add_", tmakit.index_add_, {**table, **rows, "alpha": 1}),
        Entry(
            "index_reduce_", tmakit.index_reduce_, {**table, **rows, "reduce": "amax", "include_self": True}
        ),
        Entry(
            "index_reduce_ int32",
            tmakit.index_reduce_,
            {
                **rows,
                "dst": torch.zeros(64, 64, dtype=torch.int32),
                "src": torch.ones(8, 64, dtype=torch.int32),
                "reduce": "amin",
                "include_self": True,
            },
        ),  # fmt: skip
        Entry(
            "rows_path",
            tmakit.rows_path,
            {"op": "gather", "table": half(64, 64), "index": torch.arange(8), "compact": half(8, 64)},
        ),
    ]
    entries += [
        Entry(
            "copy_many_", tmakit.copy_many_, {"dsts": [half(4, 8), half(3)], "srcs": [half(4, 8), half(3)]}
        ),
        Entry("pack", tmakit.pack, {"tensors": [half(4, 8), half(3)], "out": None}),
        Entry("unpack_", tmakit.unpack_, {"flat": half(48), "tensors": [half(4, 8), half(3)]}),
        Entry(
            "GroupedCopy",
            lambda **kw: tmakit.GroupedCopy(**kw)(),
            {
                "dsts": [half(4, 8), half(3)],
                "srcs": [half(4, 8), half(3)],
                "grouped": True,
                "check_addresses": True,
            },
        ),
        Entry(
            "GroupedCopy.packing",
            lambda **kw: tmakit.GroupedCopy.packing(**kw)(),
            {"tensors": [half(4, 8), half(3)], "out": None, "grouped": True},
        ),
        Entry(
            "GroupedCopy.unpacking",
            lambda **kw: tmakit.GroupedCopy.unpacking(**kw)(),
            {"flat": half(48), "tensors": [half(4, 8), half(3)], "grouped": True},
        ),
    ]
    ids, row_map = torch.tensor([[0, 1], [3, 2], [1, 1], [0, 3]]), torch.zeros(4, 2, dtype=torch.int32)
    entries += [
        Entry(
            "moe_dispatch",
            tmakit.moe_dispatch,
            {
                "x": half(4, 64),
                "routing": ids,
                "num_experts": 4,
                "topk": None,
                "probs": None,
                "scales": None,
                "align": 16,
                "check_ids": True,
                "strict": False,
            },
        ),
        Entry(
            "moe_combine",
            tmakit.moe_combine,
            {"y": half(8, 64), "row_map": row_map, "probs": None, "strict": False},
        ),
        Entry(
            "moe_path",
            tmakit.moe_path,
            {"op": "dispatch", "rows": half(4, 64), "row_map": row_map, "out_rows": 8},
        ),
    ]
    entries += [  # an empty list installs and removes nothing: a draw's value is what is checked
        Entry("enable", tmakit.enable, {"ops": []}),
        Entry("disable", tmakit.disable, {"ops": []}),
        Entry("enabled", tmakit.enabled, {"ops": []}),
        Entry("stats", tmakit.stats, {"reset": False}),
    ]
    # every option of copy_ and reduce_into_ is a keyword argument of its own
    for name in CopyOptions.names():
        if name not in ("tile", "stages"):
            entries.append(Entry(f"copy_ {name}", tmakit.copy_, {**pair, name: getattr(CopyOptions(), name)}))
    importlib.import_module("tmakit.ops")  # registers the ops

    ops = torch.ops.tmakit
    entries += [
        Entry("torch.ops.tmakit.copy_", ops.copy_, {"dst": half(64, 64), "src": half(64, 64), "options": ""}),
        Entry("torch.ops.tmakit.copy", ops.copy, {"src": half(64, 64), "options": ""}),
        Entry(
            "torch.ops.tmakit.reduce_into_",
            ops.reduce_into_,
            {"dst": half(64, 64), "src": half(64, 64), "op": "add"},
        ),
        Entry(
            "torch.ops.tmakit.load_tiles",
            ops.load_tiles,
            {"tensor": half(64, 64), "tile_rows": 64, "tile_cols": 64, "swizzle": 0},
        ),
        Entry(
            "torch.ops.tmakit.gather_rows", ops.gather_rows, {"src": half(64, 64), "index": torch.arange(8)}
        ),
        Entry(
            "torch.ops.tmakit.moe_permute",
            ops.moe_permute,
            {"x": half(4, 64), "row_map": row_map, "rows": 8, "zero_rows": None, "strict": False},
        ),
        Entry(
            "torch.ops.tmakit.moe_combine",
            ops.moe_combine,
            {"y": half(8, 64), "row_map": row_map, "probs": None},
        ),
        Entry(
            "torch.ops.tmakit.index_reduce_",
            ops.index_reduce_,
            {"dst": half(64, 64), "index": torch.arange(8), "src": half(8, 64), "reduce": "amax"},
        ),
    ]
    for entry in entries:
        entry.torch = True
    return entries


ENTRIES = PURE + (torch_entries() if HAS_TORCH else [])
# What torch's dispatcher says of an argument whose type the op's schema refuses: it names the
# argument and the type the schema wants, before any tmakit code runs.
SCHEMA_REFUSAL = ("Expected a value of type", "expected a value of type", "incompatible function arguments")


@pytest.fixture
def stand_ins(monkeypatch):
    """CPU tensors pass as GPU ones, an H200's properties, launchers that launch nothing."""
    if HAS_TORCH:
        gpu_stand_ins(monkeypatch)


def outcome(entry: Entry, arguments: dict[str, object]) -> str:
    """'returned' or the TmaConfigError's message; anything else fails the test, naming the call."""
    try:
        entry.call(**arguments)
    except TmaConfigError as error:
        return str(error)
    except Exception as error:
        message = str(error)
        if entry.name.startswith("torch.ops.") and any(text in message for text in SCHEMA_REFUSAL):
            return "schema"
        raise AssertionError(
            f"{entry.name}(**{arguments!r}) raised {type(error).__name__}: {error}"
        ) from error
    return "returned"


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: entry.name)
@SETTINGS
@given(data=st.data())
def test_a_wrong_type_returns_or_raises_tmaconfigerror(stand_ins, entry, data):
    name = data.draw(st.sampled_from(sorted(entry.arguments)), label="argument")
    value = data.draw(WRONG, label="value")
    result = outcome(entry, {**entry.arguments, name: value})
    if isinstance(value, np.integer):  # a numpy integer is the int it holds: served or refused alike
        assert (result == "returned") == (outcome(entry, {**entry.arguments, name: int(value)}) == "returned")


def test_every_public_entry_is_drawn_on():
    """The entries above cover `tmakit.__all__` but its constant and its error types."""
    drawn = {entry.name for entry in ENTRIES} | {
        "TmaConfigError",
        "TmaHangError",
        "TorchOpError",
        "SEED",
        "MoeDispatch",
        "LintReport",  # a result: built by lint and lint_text
    }
    missing = set(tmakit.__all__) - drawn
    torch_only = "add_ config_for copy copy_ copy_path im2col im2col_path load_tiles padded_empty gather_rows"
    rows = {
        "scatter_rows_",
        "index_add_",
        "index_reduce_",
        "rows_path",
        "copy_many_",
        "pack",
        "unpack_",
        "GroupedCopy",
        "moe_dispatch",
        "moe_combine",
        "moe_path",
        "enable",
        "disable",
        "enabled",
        "stats",
    }
    assert (
        not missing if HAS_TORCH else missing <= {*torch_only.split(), "reduce_into_", "reduce_path", *rows}
    )
