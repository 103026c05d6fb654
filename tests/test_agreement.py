"""`tmakit plan`, the `*_path` functions and the call agree: for random tensors and options, the
route `tmakit plan --kernel K --gpu G --json -` prints, the route the `*_path` function (`copy_path`,
`reduce_path`, `rows_path`, `im2col_path`) returns and the route the call takes are the same (path
and reason), or all three refuse.

The call runs on CPU tensors standing in for an H200's (`stand_ins.gpu_stand_ins`: its SMs and L2,
launchers that launch nothing); what it takes is read where it decides (`copies.call.routed`, the
driver's launcher, `reduce.call.reduce_decision`, the rows call's rule, im2col's placed call).
The facts the CLI assumes (`cli.kernels.ASSUMED`: one GPU, aligned bases, tensors apart, no
autograd, no capture) are what the drawn tensors are."""

from __future__ import annotations

import contextlib
import importlib
import io
import json

import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import tmakit  # noqa: E402
from stand_ins import gpu_stand_ins  # noqa: E402
from tmakit import TmaConfigError, cli  # noqa: E402
from tmakit.config import DTYPES, LoadConfig, padded_strides  # noqa: E402
from tmakit.copies.plan import AS_ROWS_BEYOND_L2, BY_THE_DRIVER  # noqa: E402
from tmakit.limits import GPUS  # noqa: E402
from tmakit.plan.route import Route  # noqa: E402
from tmakit.rows.plan import NO_ROWS  # noqa: E402
from tmakit.runtime.dispatch import CallTable  # noqa: E402

EXAMPLES = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
COPY_DTYPES = ("fp16", "bf16", "fp32", "int8", "int64")
REFUSED = "refused"


def planned(argv: list[str]) -> tuple[str, str] | str:
    """The route `tmakit plan ARGV --json -` prints, or REFUSED where it exits with an error."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(["plan", *argv, "--json", "-"])
    if code != 0:
        return REFUSED
    route = json.loads(out.getvalue())["kernel"]["route"]
    return route["path"], route["reason"]


def seen(route: Route) -> tuple[str, str]:
    return route.path, route.reason.removesuffix(f", {AS_ROWS_BEYOND_L2}")


@st.composite
def copies(draw):
    """A copy's flags: kernel, shape (up to ~48 MiB a tensor, past an H200's L2 for both), dtype,
    layout, padding and options."""
    dtype = draw(st.sampled_from(COPY_DTYPES))
    rows = draw(st.integers(1, 6000))
    cols = draw(st.integers(1, 6000 if draw(st.booleans()) else 64))
    batch = draw(st.sampled_from([(), (), (2,), (3,)]))
    shape = (*batch, rows, cols)
    options = draw(
        st.sampled_from(["", "", "stages=3", "tile=32x128", "as_rows=true", "tile=7x7", "store_depth=2"])
    )
    return {
        "kernel": draw(st.sampled_from(["copy", "transpose"])),
        "shape": shape,
        "dtype": dtype,
        "layout": draw(st.sampled_from(["row", "col"])),
        "pad": draw(st.booleans()),
        "options": options,
    }


def copy_tensors(case: dict, make=torch.empty) -> tuple[torch.Tensor, torch.Tensor]:
    """The call's tensors as the CLI describes them: a source of --layout (padded with --pad), a
    destination of its strides (copy, reduce) or compact in the other layout (transpose); `make`
    allocates their memory."""
    element = DTYPES[case["dtype"]]
    dtype = getattr(torch, element.torch_name)
    shape, layout = case["shape"], case["layout"]
    strides = padded_strides(shape, element.nbytes, layout) if case["pad"] else None
    source = LoadConfig(shape, element.name, (1, 1), 0, layout, strides).element_strides
    other = {"row": "col", "col": "row"}[layout]
    target = LoadConfig(shape, element.name, (1, 1), 0, other).element_strides
    destination = target if case.get("kernel") == "transpose" else source
    span = lambda st_: sum((n - 1) * s for n, s in zip(shape, st_, strict=True)) + 1  # noqa: E731
    src = make(span(source), dtype=dtype).as_strided(shape, source)
    dst = make(span(destination), dtype=dtype).as_strided(shape, destination)
    return dst, src


def tensor_flags(case: dict) -> list[str]:
    """The CLI flags that describe `case`'s tensors and options: shape, dtype, layout, padding."""
    argv = ["--shape", "x".join(map(str, case["shape"])), "--dtype", case["dtype"]]
    argv += ["--layout", case["layout"], *(["--pad"] if case["pad"] else [])]
    return argv + (["--copy", case["options"]] if case["options"] else [])


def options_of(text: str) -> dict:
    if not text:
        return {}
    name, _, value = text.partition("=")
    if name == "tile":
        return {"tile": tuple(int(v) for v in value.split("x"))}
    return {name: value == "true" if value in ("true", "false") else int(value)}


@pytest.fixture
def on_a_stand_in_h200(monkeypatch):
    """CPU tensors as an H200's, `copy_` routed as on the GPU, what the call takes recorded."""
    gpu_stand_ins(monkeypatch)
    from tmakit.copies import api as copies_api
    from tmakit.copies import call as copies_call
    from tmakit.runtime.dispatch import Dispatch

    taken: list[tuple[str, str]] = []
    routed, driver = copies_call.routed, copies_call.driver_launcher

    def routed_seen(*args, **kwargs):
        route, launcher = routed(*args, **kwargs)
        taken.append(seen(route))
        return route, launcher

    def driver_seen(nbytes):
        taken.append(("torch", BY_THE_DRIVER))
        return driver(nbytes)

    monkeypatch.setattr(copies_call, "routed", routed_seen)
    monkeypatch.setattr(copies_call, "driver_launcher", driver_seen)
    monkeypatch.setattr(copies_call, "l2_of", lambda src: GPUS["h200"][2])  # the stand-ins' GPU

    def first_call() -> list[tuple[str, str]]:
        """A new dispatch (each drawn call a first call, as the CLI plans one) and no route yet."""
        dispatch = Dispatch(
            copies_call.routed_copy_launcher,
            copies_call.check_copy_tensors,
            fallback=copies_call.TORCH_COPY,
            guard_of=copies_api.pair_guard,
        )
        monkeypatch.setattr(copies_api, "_COPIES", dispatch)
        taken.clear()
        return taken

    return first_call


def test_the_gpus_planned_for_are_the_stand_ins():
    assert GPUS["h200"][1:] == (132, 60 * 2**20)


def path_and_call(path, call, taken: list) -> tuple:
    """The route `path()` names and the one `call()` takes (the last `taken` records), each
    `REFUSED` where it raises TmaConfigError."""
    try:
        path_route = seen(path())
    except TmaConfigError:
        path_route = REFUSED
    try:
        call()
        call_route = taken[-1] if taken else None
    except TmaConfigError:
        call_route = REFUSED
    return path_route, call_route


def agreed_copy(case: dict, first_call) -> tuple[str, str] | str:
    """The route `tmakit plan`, `copy_path` and `copy_` take for `case`, asserted one."""
    taken = first_call()
    cli_route = planned(["--kernel", case["kernel"], *tensor_flags(case)])
    dst, src = copy_tensors(case)
    options = options_of(case["options"])
    path_route, call_route = path_and_call(
        lambda: tmakit.copy_path(dst, src, **options), lambda: tmakit.copy_(dst, src, **options), taken
    )
    assert cli_route == path_route == call_route, (case, cli_route, path_route, call_route)
    return cli_route


@EXAMPLES
@given(case=copies())
def test_plan_copy_path_and_copy_agree(case, on_a_stand_in_h200):
    """The route of `tmakit plan --kernel copy|transpose`, `copy_path` and `copy_` are one."""
    agreed_copy(case, on_a_stand_in_h200)


@pytest.mark.parametrize(
    ("kernel", "shape", "dtype", "options", "path"),
    [
        ("copy", (1000, 1000), "fp16", "", "tma"),
        ("transpose", (1000, 1000), "fp16", "", "tma"),
        ("copy", (6000, 6000), "fp32", "", "torch"),  # past the L2: the driver's memcpy
        ("transpose", (6000, 6000), "fp32", "", "tma"),
        ("copy", (100, 3), "fp16", "", "tma-rows"),
        ("copy", (1000, 1000), "fp16", "tile=7x7", REFUSED),
        ("copy", (6000, 6000), "fp32", "tile=7x7", REFUSED),  # options checked on every route
    ],
)
def test_the_routes_drawn_are_reached(kernel, shape, dtype, options, path, on_a_stand_in_h200):
    """The draws above reach every kind of route; these fixed cases pin one of each."""
    case = {
        "kernel": kernel,
        "shape": shape,
        "dtype": dtype,
        "layout": "row",
        "pad": False,
        "options": options,
    }
    route = agreed_copy(case, on_a_stand_in_h200)
    assert (route if route == REFUSED else route[0]) == path


@st.composite
def rows_calls(draw):
    """A rows call's flags: op, count, table shape, dtype and the GPU."""
    op = draw(st.sampled_from(["gather", "scatter", "add", "max"]))
    dtype = {"add": "fp32", "max": "int32"}.get(op, draw(st.sampled_from(["bf16", "fp16", "fp32", "int8"])))
    row = draw(st.sampled_from([(1,), (4,), (8,), (64,), (512,), (1024,), (4096,), (8, 64), (2, 2048)]))
    rows = draw(st.integers(1, 400))
    count = draw(st.integers(0, 300))
    return {
        "op": op,
        "count": min(count, rows) if op == "scatter" else count,  # a scatter's rows are distinct
        "shape": (rows, *row),
        "dtype": dtype,
        "gpu": draw(st.sampled_from(sorted(GPUS))),
    }


@EXAMPLES
@given(case=rows_calls())
def test_plan_rows_path_and_the_rows_call_agree(case, monkeypatch):
    """The route of `tmakit plan --kernel rows`, `rows_path` and the call are one, on either GPU."""
    gpu_stand_ins(monkeypatch)
    rows_call = importlib.import_module("tmakit.rows.call")
    monkeypatch.setattr(rows_call, "device_name", lambda index: GPUS[case["gpu"]][0])
    rules: list[str | None] = []
    rule = rows_call.rows_tma_rule
    monkeypatch.setattr(rows_call, "rows_tma_rule", lambda *args: rules.append(rule(*args)) or rules[-1])
    shape, op, count = case["shape"], case["op"], case["count"]
    argv = ["--kernel", "rows", "--rows", f"{op}:{count}", "--shape", "x".join(map(str, shape))]
    cli_route = planned([*argv, "--dtype", case["dtype"], "--gpu", case["gpu"]])
    dtype = getattr(torch, DTYPES[case["dtype"]].torch_name)
    table = torch.zeros(shape, dtype=dtype)
    compact = torch.zeros((count, *shape[1:]), dtype=dtype)
    index = torch.arange(count).flip(0) % shape[0]
    try:
        path_route = seen(tmakit.rows_path(op, table, index, compact))
    except TmaConfigError:
        path_route = REFUSED
    call = {
        "gather": lambda: tmakit.gather_rows(table, index, compact),
        "scatter": lambda: tmakit.scatter_rows_(table, index, compact),
        "add": lambda: tmakit.index_add_(table, index, compact),
        "max": lambda: tmakit.index_reduce_(table, index, compact, "amax"),
    }[op]
    try:
        call()
        if not rules:  # the call returned before its route: an empty index moves nothing
            assert count == 0, "the call read no rule"
            call_route = ("empty", NO_ROWS)
        else:
            call_route = (
                ("tma-rows-bulk", "one bulk copy per row") if rules[-1] is None else ("torch", rules[-1])
            )
    except TmaConfigError:
        call_route = REFUSED
    assert cli_route == path_route == call_route, (case, cli_route, path_route, call_route)


@st.composite
def convolutions(draw):
    """An im2col call's flags: an NHWC activation, its dtype and the convolution (no box given:
    the call's own choice of kernel)."""
    channels = draw(st.sampled_from([3, 8, 16, 64, 96]))
    size = draw(st.integers(4, 40))
    return {
        "shape": (draw(st.integers(1, 3)), size, draw(st.integers(4, 40)), channels),
        "dtype": draw(st.sampled_from(["fp16", "bf16", "fp32"])),
        "kernel": draw(st.sampled_from([1, 3, 5, 7])),
        "stride": draw(st.sampled_from([1, 2])),
        "padding": draw(st.sampled_from([0, 1, 3])),
    }


@EXAMPLES
@given(case=convolutions())
def test_plan_im2col_path_and_im2col_agree(case, monkeypatch):
    """The route of `tmakit plan --kernel im2col`, `im2col_path` and `im2col` are one."""
    gpu_stand_ins(monkeypatch)
    api_im2col = importlib.import_module("tmakit.patches.api")
    calls: list = []  # the layout's decision each call reads (`plan_im2col`), then where it is placed
    planned_call, placed = api_im2col.plan_im2col, api_im2col.Im2colCall.placed
    monkeypatch.setattr(api_im2col, "_CALLS", CallTable())  # each drawn call a first call
    monkeypatch.setattr(api_im2col, "plan_im2col", lambda *a: calls.append(planned_call(*a)) or calls[-1])
    monkeypatch.setattr(
        api_im2col.Im2colCall, "placed", lambda call, *a: calls.append(placed(call, *a)) or calls[-1]
    )
    conv = f"kernel={case['kernel']},stride={case['stride']},padding={case['padding']}"
    shape = "x".join(map(str, case["shape"]))
    cli = planned(["--kernel", "im2col", "--shape", shape, "--dtype", case["dtype"], "--im2col", conv])
    x = torch.zeros(case["shape"], dtype=getattr(torch, DTYPES[case["dtype"]].torch_name))
    arguments = (x, case["kernel"], case["stride"], case["padding"])
    try:
        path_route = seen(tmakit.im2col_path(*arguments))
    except TmaConfigError:
        path_route = REFUSED
    calls.clear()
    try:
        tmakit.im2col(*arguments)
        last = calls[-1]  # the route placed, or the layout's own (torch's: nothing to place)
        call_route = seen(last if isinstance(last, Route) else last[0].route)
    except TmaConfigError:
        call_route = REFUSED
    assert cli == path_route == call_route, (case, cli, path_route, call_route)


REDUCE_PAIRS = {  # op -> the dtypes drawn: those TMA reduce stores take and those torch's op serves
    "add": ("fp32", "fp16", "bf16", "int32", "int64", "int8"),
    "max": ("fp16", "bf16", "fp32", "int32"),
    "min": ("bf16", "fp32"),
    "and": ("int32", "int64", "int8"),
    "xor": ("int32", "int64"),
}


@st.composite
def reduces(draw):
    """A reduce's flags: op, dtype, shape (up to ~64 MiB a tensor: an add's three streams past 40%
    of an H200's L2 and within it), layout, padding and options."""
    op = draw(st.sampled_from(sorted(REDUCE_PAIRS)))
    rows = draw(st.integers(1, 4000))
    cols = draw(st.integers(1, 4000 if draw(st.booleans()) else 64))
    options = draw(st.sampled_from(["", "", "stages=3", "tile=32x128", "tile=7x7", "store_depth=2"]))
    return {
        "op": op,
        "dtype": draw(st.sampled_from(REDUCE_PAIRS[op])),
        "shape": (*draw(st.sampled_from([(), (), (2,)])), rows, cols),
        "layout": draw(st.sampled_from(["row", "col"])),
        "pad": draw(st.booleans()),
        "options": options,
    }


@pytest.fixture
def reducing_on_a_stand_in_h200(monkeypatch):
    """CPU tensors as an H200's, `reduce_into_` routed as on the GPU, the route its planner takes
    recorded (`reduce.call.reduce_decision` on the tensors' GPU: not the options' check, which
    plans `on` a GPU named)."""
    gpu_stand_ins(monkeypatch)
    from tmakit.reduce import api as reduce_api
    from tmakit.reduce import call as reduce_call

    taken: list[tuple[str, str]] = []
    decide = reduce_call.reduce_decision

    def decision_seen(*args, **kwargs):
        decision = decide(*args, **kwargs)
        if kwargs.get("on") is None and len(args) < 7:
            taken.append((decision.route.path, decision.route.reason))
        return decision

    monkeypatch.setattr(reduce_call, "reduce_decision", decision_seen)

    def first_call() -> list[tuple[str, str]]:
        """No dispatch made yet (each drawn call a first call, as the CLI plans one), no route."""
        monkeypatch.setattr(reduce_api, "_DISPATCHES", CallTable())
        taken.clear()
        return taken

    return first_call


def agreed_reduce(case: dict, first_call) -> tuple[str, str] | str:
    """The route `tmakit plan --kernel reduce`, `reduce_path` and `reduce_into_` take for `case`,
    asserted one."""
    taken = first_call()
    cli_route = planned(["--kernel", "reduce", "--reduce", case["op"], *tensor_flags(case)])
    dst, src = copy_tensors(case, torch.zeros)
    options = options_of(case["options"])
    path_route, call_route = path_and_call(
        lambda: tmakit.reduce_path(dst, src, case["op"], **options),
        lambda: tmakit.reduce_into_(dst, src, case["op"], **options),
        taken,
    )
    assert cli_route == path_route == call_route, (case, cli_route, path_route, call_route)
    return cli_route


@EXAMPLES
@given(case=reduces())
def test_plan_reduce_path_and_reduce_into_agree(case, reducing_on_a_stand_in_h200):
    """The route of `tmakit plan --kernel reduce`, `reduce_path` and `reduce_into_` are one."""
    agreed_reduce(case, reducing_on_a_stand_in_h200)


@pytest.mark.parametrize(
    ("op", "shape", "dtype", "options", "path"),
    [
        ("add", (1024, 1024), "fp32", "", "tma"),
        ("add", (4096, 4096), "fp32", "", "torch"),  # an add past 40% of the L2: torch's add_
        ("add", (1024, 3), "fp16", "", "tma-view"),  # a compact run as rows
        ("max", (1024, 1024), "fp32", "", "torch"),  # no TMA reduce store of max on fp32
        ("max", (1024, 1024), "fp16", "", "tma"),
        ("add", (100, 3), "fp16", "", "torch"),  # no rows of 16-byte multiples
        ("add", (1024, 1024), "fp16", "tile=7x7", REFUSED),
        ("add", (4096, 4096), "fp32", "tile=7x7", REFUSED),  # options checked on every route
    ],
)
def test_the_reduce_routes_drawn_are_reached(op, shape, dtype, options, path, reducing_on_a_stand_in_h200):
    """The draws above reach every kind of route; these fixed cases pin one of each."""
    case = {"op": op, "shape": shape, "dtype": dtype, "layout": "row", "pad": False, "options": options}
    route = agreed_reduce(case, reducing_on_a_stand_in_h200)
    assert (route if route == REFUSED else route[0]) == path
