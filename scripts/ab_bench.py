"""Time two tmakit source trees side by side in one process: device time and host cost per call.

For a refactor that should change neither: the device time of the same public calls of every
family (copy, transposing copy, reduce, im2col, rows by index, many tensors, load_tiles, the
multicast ring), each tree's kernels captured into CUDA graphs and replayed in interleaved rounds
(`bench.timing.interleaved_graph_samples_us`), so that a drift of the GPU's clocks falls on both
alike; and the host time of each public function's repeated call on tiny tensors, calls back to
back in rounds that alternate the trees (`bench.timing.eager_samples_us`).

    python scripts/ab_bench.py BASE_SRC [--samples N] [--only PREFIXES] [--host-only | --device-only]
        [--json PATH] [--commit C] [--base-commit C]

`BASE_SRC` is the `src/` folder of the other tree (e.g. `git archive <commit> src | tar x -C
DIR`); its `tmakit` package is imported as `tmakit_base` (tmakit's own imports are relative; the
few strings that name its modules absolutely are renamed in the copy: `import_as_base`). This
tree's `tmakit` is the one on the path. `scripts/device_run.sh COMMIT abbench BASE` runs it on the
GPU machine (BASE: a carried `.ab-base/src`, or a commit where git is at hand).

Device cases are held to TMA's own kernel (`tma_only`) and each is first checked element for
element against torch, for both trees. A case agrees when the medians differ by at most 1%, or by
at most the base's own spread (its interquartile range over its median) where that is wider.
Host rows time the plain public call (its defaults: what a user's loop pays), checked once too; a
row agrees when the final tree is no worse: its median at most the base's times 1 + that same
bound. The exit status is 1 when any case disagrees, any check fails or any case raises. The
torch operators (`tmakit.ops`) are not timed: both trees' would register in torch's one namespace
`tmakit`.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import json
import math
import re
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

AGREE = 0.01  # the relative difference of medians two equal trees stay within
HOST_CALLS = 200  # calls back to back per round of a host row, then one synchronisation
HOST_ROUNDS = 21  # rounds per host row, base and final alternating which goes first
FAMILIES = ("copy", "transpose", "reduce", "im2col", "rows", "many", "load", "multicast")
# What both trees export and the bench calls: each must come from the base's own copy.
PUBLIC = (
    "gather_rows",
    "scatter_rows_",
    "index_add_",
    "index_reduce_",
    "copy_many_",
    "pack",
    "unpack_",
    "GroupedCopy",
    "load_tiles",
    "copy_",
    "copy",
    "reduce_into_",
    "add_",
    "im2col",
)
WHAT = (
    "Two tmakit trees in one process. Device rows: us per launch of the same public call in each tree "
    "(held to TMA's kernel), CUDA graphs replayed in interleaved rounds, both trees' results checked "
    "against torch first; agrees: medians within 1% or the base's spread (IQR / median). Host rows: us "
    f"per repeated plain call on tiny tensors, {HOST_CALLS} calls back to back then one synchronisation, "
    "rounds alternating the trees; agrees: final no worse than base * (1 + max(1%, the base's spread))."
)


@dataclass(frozen=True)
class Case:
    """One comparison: `make(pkg)` returns (one launch or a list of rotated launches, check) for
    one tree's package; `check()` says whether that tree's result equalled torch's. Nothing is
    allocated before `make` is called."""

    name: str
    family: str
    make: Callable[[ModuleType], tuple[Any, Callable[[], bool]]]


def rename_own_modules(tree: Path, name: str) -> list[str]:
    """In the copied package `tree` (imported as `name`), the string literals that name one of its
    own modules absolutely ("tmakit.rows", as a registry of families lists them) renamed to `name`,
    so that importing the copy never reaches the other tree's `tmakit`. Returns what was renamed."""
    literal = re.compile(r"""(["'])tmakit((?:\.\w+)+)\1""")
    renamed = []

    def rename(match: re.Match) -> str:
        parts = match.group(2)[1:].split(".")
        module = tree.joinpath(*parts)
        if not (module.with_suffix(".py").is_file() or (module / "__init__.py").is_file()):
            return match.group(0)  # a label such as "tmakit.copy_", not a module
        renamed.append(match.group(0))
        return f"{match.group(1)}{name}{match.group(2)}{match.group(1)}"

    for path in sorted(tree.rglob("*.py")):
        text = path.read_text()
        new = literal.sub(rename, text)
        if new != text:
            path.write_text(new)
    return renamed


def import_as_base(base_src: Path, name: str = "tmakit_base") -> ModuleType:
    """The other tree's `tmakit` package, copied under the name `name` and imported; ImportError
    where one of its public functions (`PUBLIC`) comes from another package (a module named
    absolutely would time the final tree's kernel twice)."""
    folder = Path(tempfile.mkdtemp(prefix="ab-bench-"))
    shutil.copytree(base_src / "tmakit", folder / name, ignore=shutil.ignore_patterns("__pycache__"))
    rename_own_modules(folder / name, name)
    sys.path.insert(0, str(folder))
    package = importlib.import_module(name)
    leaks = [
        f"{attribute} ({getattr(package, attribute).__module__})"
        for attribute in PUBLIC
        if hasattr(package, attribute)
        and not getattr(getattr(package, attribute), "__module__", "").startswith(f"{name}.")
    ]
    if leaks:
        raise ImportError(f"{name} (from {base_src}) takes {', '.join(leaks)} from another package")
    return package


def part(pkg: ModuleType, attribute: str, *modules: str) -> Any:
    """`attribute` of the first of `pkg`'s `modules` (dotted, relative to it) that defines it:
    where a redesign moves one, the trees name different modules (add its new home here)."""
    for module in modules:
        full = f"{pkg.__name__}.{module}"
        try:
            found = importlib.import_module(full)
        except ModuleNotFoundError as error:
            if error.name is not None and full.startswith(error.name):
                continue  # no such module in this tree
            raise
        if hasattr(found, attribute):
            return getattr(found, attribute)
    raise AttributeError(f"{pkg.__name__} defines no {attribute} in any of {', '.join(modules)}")


def tma_only(function, named: dict | None = None, **options):
    """`function` held to TMA's own kernel: `strict=True` and the `named` keywords where its tree
    takes them by name (a base tree that served TMA only has neither), and copy `options` (which
    both trees take), so both trees time the same kernel where the final tree's rules would route
    a call elsewhere (torch's op, another kernel)."""
    taken = inspect.signature(function).parameters
    wanted = {"strict": True, **(named or {})}
    return functools.partial(function, **{k: v for k, v in wanted.items() if k in taken}, **options)


# -- the inputs ------------------------------------------------------------------------------------
COPY_SHAPE = (16384, 8192)  # 256 MiB of fp16
REDUCE_SHAPE = (8192, 8192)  # 256 MiB of fp32
IM2COL_INPUT = (32, 56, 56, 64)  # NHWC fp16, four of them rotated
LOAD_SHAPE = (4096, 8192)  # 64 MiB of fp16, two rotated
# Rows by index: 16K rows of 8 KiB picked from (or added into) a table of 128K rows (1 GiB).
TABLE_ROWS, PICKED_ROWS, ROW_BYTES = 128 * 1024, 16 * 1024, 8192
# Many tensors: shapes cycled with four dtypes, odd byte counts among them (the grouped kernel's tails).
MANY_SHAPES = (
    (1024, 256),
    (37, 1000),
    (1, 777),
    (512, 512),
    (2048, 384),
    (100, 64),
    (3, 5),
    (1024, 640),
    (4096, 128),
    (256, 1000),
    (1, 4099),
    (2048, 512),
    (33, 17),
)
MANY_DTYPES = ("float32", "bfloat16", "float16", "uint8")
MANY_COUNT = 100
SMALL_LIST = (
    ((64,), "float32"),
    ((100, 3), "bfloat16"),
    ((256, 256), "float16"),
    ((1000,), "uint8"),
    ((17, 33), "float32"),
    ((512,), "bfloat16"),
    ((32, 64), "float16"),
    ((4096,), "float32"),
)
ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "uint8": 1}


def many_shapes() -> list[tuple[tuple[int, ...], str]]:
    """The many-tensors list: `MANY_COUNT` (shape, dtype) pairs of mixed sizes, about 64 MiB in all."""
    return [(MANY_SHAPES[i % len(MANY_SHAPES)], MANY_DTYPES[i % len(MANY_DTYPES)]) for i in range(MANY_COUNT)]


def list_bytes(shapes: Iterable[tuple[tuple[int, ...], str]]) -> int:
    return sum(math.prod(shape) * ELEMENT_BYTES[dtype] for shape, dtype in shapes)


def bits(tensor):
    """A compact tensor's bytes, flat: compared bit for bit (NaN poison, -0.0 and all)."""
    import torch

    return tensor.reshape(-1).view(torch.uint8)


def random_tensors(torch, shapes) -> list:
    """Seeded-by-the-caller tensors of `shapes` ((shape, dtype name) pairs) on the GPU; the bytes
    never all 0xFF (the poison): uint8 below 255, floats finite."""
    return [
        torch.randint(0, 255, shape, dtype=torch.uint8, device="cuda")
        if dtype == "uint8"
        else torch.randn(shape, dtype=getattr(torch, dtype), device="cuda")
        for shape, dtype in shapes
    ]


def poisoned(tensors) -> list:
    """Each tensor's bytes set to 0xFF (NaN in every float type here), then returned."""
    for tensor in tensors:
        bits(tensor).fill_(0xFF)
    return list(tensors)


def same_bytes(torch, got, want) -> bool:
    return all(torch.equal(bits(g), bits(w)) for g, w in zip(got, want, strict=True))


def packed_right(torch, flat, offsets, tensors) -> bool:
    """Whether each tensor's bytes lie at its offset (in the buffer's elements) of `flat`."""
    raw, size = bits(flat), flat.element_size()
    return all(
        torch.equal(raw[o * size : o * size + t.numel() * t.element_size()], bits(t))
        for o, t in zip(offsets, tensors, strict=True)
    )


def patches_3x3(torch, x):
    """torch's im2col of the NHWC `x` for a 3x3 filter, stride 1, padding 1: a strided view of
    the padded input, (N*H*W, 9*C), channels fastest, then the filter's columns, then its rows."""
    padded = torch.nn.functional.pad(x, (0, 0, 1, 1, 1, 1))
    n, h, w, c = padded.shape
    p, q = x.shape[1], x.shape[2]
    windows = padded.as_strided((n, p, q, 3, 3, c), (h * w * c, w * c, c, w * c, c, 1))
    return windows.reshape(n * p * q, 9 * c)


# -- device time -------------------------------------------------------------------------------------
def cases(torch) -> Iterator[Case]:
    """Every device case, in the order they run. Each case's inputs are made on its first `make`
    and shared by both trees; each tree writes its own outputs."""
    nan = float("nan")

    def copy_case(transpose: bool, padded: bool = False, **options):
        """256 MiB of fp16; `padded`: rows 128 bytes apart from the next (not one compact run, so no
        rows view); `options`: passed to both trees' copy_."""
        rows, cols = COPY_SHAPE

        @functools.cache
        def source():
            if transpose:
                return torch.randn(cols, rows, device="cuda").half().t()
            return torch.randn(rows, cols + (64 if padded else 0), device="cuda").half()[:, :cols]

        def make(pkg):
            src = source()
            copy_ = tma_only(pkg.copy_, **options)
            dst = torch.full((rows, cols), nan, dtype=torch.float16, device="cuda")
            copy_(dst, src)
            ok = torch.equal(dst, src)
            return (lambda: copy_(dst, src)), (lambda: ok)

        return make

    @functools.cache
    def reduce_inputs():
        return torch.randn(REDUCE_SHAPE, device="cuda"), torch.randn(REDUCE_SHAPE, device="cuda")

    def reduce_case(pkg):
        reduce_into_ = tma_only(pkg.reduce_into_, {"reduce_by": "store"})  # the base's reduce stores
        src, start = reduce_inputs()
        dst = start.clone()
        reduce_into_(dst, src, "add")
        ok = torch.equal(dst, start + src)
        return (lambda: reduce_into_(dst, src, "add")), (lambda: ok)

    @functools.cache
    def im2col_inputs():
        return [torch.randn(IM2COL_INPUT, device="cuda").half() for _ in range(4)]

    def im2col_case(pkg):
        im2col = tma_only(pkg.im2col)
        xs = im2col_inputs()
        outs = [im2col(x, 3, padding=1) for x in xs]
        ok = torch.equal(outs[0], patches_3x3(torch, xs[0]))
        calls = [lambda x=x, o=o: im2col(x, 3, padding=1, out=o) for x, o in zip(xs, outs, strict=True)]
        return calls, (lambda: ok)

    @functools.cache
    def gather_inputs():
        table = torch.randn(TABLE_ROWS, ROW_BYTES // 2, dtype=torch.bfloat16, device="cuda")
        index = torch.randint(0, TABLE_ROWS, (PICKED_ROWS,), device="cuda")  # repeats: a row twice
        return table, index, table.index_select(0, index)

    def gather_case(pkg):
        gather_rows = tma_only(pkg.gather_rows)
        table, index, expected = gather_inputs()
        out = torch.full(expected.shape, nan, dtype=expected.dtype, device="cuda")
        gather_rows(table, index, out)
        ok = torch.equal(out, expected)
        return (lambda: gather_rows(table, index, out)), (lambda: ok)

    @functools.cache
    def index_add_inputs():
        # Small integers: every sum exact whatever order the atomic adds of repeated rows take.
        cols = ROW_BYTES // 4
        start = torch.randint(-8, 8, (TABLE_ROWS, cols), dtype=torch.float32, device="cuda")
        src = torch.randint(-8, 8, (PICKED_ROWS, cols), dtype=torch.float32, device="cuda")
        index = torch.randint(0, TABLE_ROWS, (PICKED_ROWS,), device="cuda")
        return start, index, src, start.clone().index_add_(0, index, src)

    def index_add_case(pkg):
        index_add_ = tma_only(pkg.index_add_)
        start, index, src, expected = index_add_inputs()
        dst = start.clone()
        index_add_(dst, index, src)
        ok = torch.equal(dst, expected)
        return (lambda: index_add_(dst, index, src)), (lambda: ok)

    @functools.cache
    def scatter_inputs():
        src = torch.randn(PICKED_ROWS, ROW_BYTES // 2, dtype=torch.bfloat16, device="cuda")
        index = torch.randperm(PICKED_ROWS, device="cuda")  # a permutation: each row written once
        return index, src, torch.empty_like(src).index_copy_(0, index, src)

    def scatter_case(pkg):
        scatter_rows_ = tma_only(pkg.scatter_rows_)
        index, src, expected = scatter_inputs()
        dst = torch.full_like(src, nan)
        scatter_rows_(dst, index, src)
        ok = torch.equal(dst, expected)
        return (lambda: scatter_rows_(dst, index, src)), (lambda: ok)

    @functools.cache
    def many_lists():
        """Two lists (rotated: a pass moves about 4x the H100's L2) of the same shapes."""
        return [random_tensors(torch, many_shapes()) for _ in range(2)]

    def copy_many_case(pkg):
        copy_many_ = tma_only(pkg.copy_many_)
        lists = many_lists()
        dsts = [poisoned([torch.empty_like(s) for s in srcs]) for srcs in lists]
        for d, s in zip(dsts, lists, strict=True):
            copy_many_(d, s)
        ok = all(same_bytes(torch, d, s) for d, s in zip(dsts, lists, strict=True))
        calls = [lambda d=d, s=s: copy_many_(d, s) for d, s in zip(dsts, lists, strict=True)]
        return calls, (lambda: ok)

    def pack_case(pkg):
        pack = tma_only(pkg.pack)
        lists = many_lists()
        packed = [pack(srcs) for srcs in lists]  # each buffer allocated once, then written in place
        ok = True
        for (flat, offsets), srcs in zip(packed, lists, strict=True):
            poisoned([flat])
            pack(srcs, flat)
            ok = ok and packed_right(torch, flat, offsets, srcs)
        calls = [lambda s=s, f=f: pack(s, f) for s, (f, _) in zip(lists, packed, strict=True)]
        return calls, (lambda: ok)

    def unpack_case(pkg):
        unpack_ = tma_only(pkg.unpack_)
        lists = many_lists()
        flats = [tma_only(pkg.pack)(srcs) for srcs in lists]  # this tree's layout, checked first
        dsts = [poisoned([torch.empty_like(s) for s in srcs]) for srcs in lists]
        for (flat, _), d in zip(flats, dsts, strict=True):
            unpack_(flat, d)
        ok = all(packed_right(torch, f, o, s) for (f, o), s in zip(flats, lists, strict=True)) and all(
            same_bytes(torch, d, s) for d, s in zip(dsts, lists, strict=True)
        )
        calls = [lambda f=f, d=d: unpack_(f, d) for (f, _), d in zip(flats, dsts, strict=True)]
        return calls, (lambda: ok)

    @functools.cache
    def load_inputs():
        return [torch.randn(LOAD_SHAPE, dtype=torch.float16, device="cuda") for _ in range(2)]

    def load_case(pkg):
        load_tiles = tma_only(pkg.load_tiles)  # TMA's loads alone: it takes no strict
        xs = load_inputs()
        ok = all(torch.equal(load_tiles(x), x) for x in xs)  # whole tiles: the padded shape is x's
        return [lambda x=x: load_tiles(x) for x in xs], (lambda: ok)

    def multicast_case(cluster: tuple[int, int], persistent: bool):
        def make(pkg):
            max_active_clusters = part(pkg, "max_active_clusters", "runtime.launch", "cluster.launch")
            compile_multicast_load = part(pkg, "compile_multicast_load", "runtime.launch", "cluster.launch")
            verify_multicast_load = part(pkg, "verify_multicast_load", "check.run", "cluster.check")
            to_cute_tensor = part(pkg, "to_cute_tensor", "runtime.compile", "core.compile")
            current_stream = part(pkg, "current_stream", "runtime.device", "core.device")
            walk = max_active_clusters(cluster[0] * cluster[1]) if persistent else None
            multicast = pkg.MulticastPlan(pkg.LoadPlan(pkg.SEED), cluster, True, 4, walk)
            verdicts = verify_multicast_load(multicast)  # every CTA's copy, every element
            compiled = compile_multicast_load(multicast, store=False)
            src = torch.randn(pkg.SEED.shape, device="cuda").half()
            copies = torch.empty(multicast.copies_shape, dtype=src.dtype, device="cuda")
            args = (to_cute_tensor(src), to_cute_tensor(copies))
            return (lambda: compiled(*args, current_stream())), (lambda: all(v.ok for v in verdicts))

        return make

    yield Case("copy 256 MiB fp16", "copy", copy_case(False))
    yield Case("copy 256 MiB fp16, rows 128 B apart", "copy", copy_case(False, padded=True))
    yield Case("copy 256 MiB fp16 as_rows=True", "copy", copy_case(False, as_rows=True))
    yield Case("transposing copy 256 MiB fp16", "transpose", copy_case(True))
    yield Case("reduce add 256 MiB fp32", "reduce", reduce_case)
    yield Case("im2col 32x56x56x64 fp16 3x3 pad 1", "im2col", im2col_case)
    yield Case("gather_rows 16K of 128K rows x 8 KiB bf16", "rows", gather_case)
    yield Case("index_add_ 16K rows x 8 KiB fp32 into 128K", "rows", index_add_case)
    yield Case("scatter_rows_ 16K rows x 8 KiB bf16, a permutation", "rows", scatter_case)
    yield Case("copy_many_ 100 tensors, 63 MiB, 4 dtypes", "many", copy_many_case)
    yield Case("pack 100 tensors, 63 MiB, 4 dtypes", "many", pack_case)
    yield Case("unpack_ 100 tensors, 63 MiB, 4 dtypes", "many", unpack_case)
    yield Case("load_tiles 4096x8192 fp16 (64 MiB)", "load", load_case)
    for cluster in ((1, 2), (2, 2)):
        for persistent in (False, True):
            walk = "persistent" if persistent else "per strip"
            yield Case(
                f"multicast {cluster[0]}x{cluster[1]} 4 stages {walk} (L2 hot)",
                "multicast",
                multicast_case(cluster, persistent),
            )


# -- host cost -----------------------------------------------------------------------------------------
def host_cases(torch) -> Iterator[Case]:
    """Every host row: `make(pkg)` returns (one plain public call, check), the call made once
    (compiled) and checked against torch. Tiny tensors: the GPU finishes each call before the host
    issues the next, so a round's wall time per call is the host's."""
    nan = float("nan")

    def copy_host(transpose: bool, new_tensor: bool = False):
        @functools.cache
        def source():
            return (
                torch.randn(512, 256, device="cuda").t()
                if transpose
                else torch.randn(256, 512, device="cuda")
            )

        def make(pkg):
            src = source()
            if new_tensor:
                ok = torch.equal(pkg.copy(src), src)
                return (lambda: pkg.copy(src)), (lambda: ok)
            dst = torch.full(tuple(src.shape), nan, device="cuda")
            pkg.copy_(dst, src)
            ok = torch.equal(dst, src)
            return (lambda: pkg.copy_(dst, src)), (lambda: ok)

        return make

    @functools.cache
    def add_inputs():
        return torch.randn(256, 512, device="cuda"), torch.randn(256, 512, device="cuda")

    def add_host(pkg):
        start, src = add_inputs()
        dst = start.clone()
        pkg.add_(dst, src)
        ok = torch.equal(dst, start + src)
        return (lambda: pkg.add_(dst, src)), (lambda: ok)

    @functools.cache
    def im2col_input():
        return torch.randn(4, 16, 16, 64, device="cuda").half()

    def im2col_host(pkg):
        x = im2col_input()
        expected = patches_3x3(torch, x)
        out = torch.full(expected.shape, nan, dtype=x.dtype, device="cuda")
        pkg.im2col(x, 3, padding=1, out=out)
        ok = torch.equal(out, expected)
        return (lambda: pkg.im2col(x, 3, padding=1, out=out)), (lambda: ok)

    @functools.cache
    def tiles_input():
        return torch.randn(64, 256, device="cuda").half()

    def load_host(pkg):
        x = tiles_input()
        ok = torch.equal(pkg.load_tiles(x), x)
        return (lambda: pkg.load_tiles(x)), (lambda: ok)

    # Rows of 256 B: 64 of a 1024-row table.
    @functools.cache
    def rows_inputs():
        table = torch.randn(1024, 128, dtype=torch.bfloat16, device="cuda")
        picked = torch.randn(64, 128, dtype=torch.bfloat16, device="cuda")
        start = torch.randint(-8, 8, (1024, 64), dtype=torch.float32, device="cuda")
        added = torch.randint(-8, 8, (64, 64), dtype=torch.float32, device="cuda")
        index = torch.randint(0, 1024, (64,), device="cuda")
        distinct = torch.randperm(1024, device="cuda")[:64]
        return table, picked, start, added, index, distinct

    def gather_host(**keywords):
        def make(pkg):
            table, _, _, _, index, _ = rows_inputs()
            out = torch.full((64, 128), nan, dtype=table.dtype, device="cuda")
            pkg.gather_rows(table, index, out, **keywords)
            ok = torch.equal(out, table.index_select(0, index))
            return (lambda: pkg.gather_rows(table, index, out, **keywords)), (lambda: ok)

        return make

    def scatter_host(pkg):
        table, picked, _, _, _, distinct = rows_inputs()
        dst = table.clone()
        pkg.scatter_rows_(dst, distinct, picked)
        ok = torch.equal(dst, table.clone().index_copy_(0, distinct, picked))
        return (lambda: pkg.scatter_rows_(dst, distinct, picked)), (lambda: ok)

    def index_add_host(**keywords):
        def make(pkg):
            _, _, start, added, index, _ = rows_inputs()
            dst = start.clone()
            pkg.index_add_(dst, index, added, **keywords)
            ok = torch.equal(dst, start.clone().index_add_(0, index, added))
            return (lambda: pkg.index_add_(dst, index, added, **keywords)), (lambda: ok)

        return make

    @functools.cache
    def small_list():
        return random_tensors(torch, SMALL_LIST)

    def many_host(op: str):
        def make(pkg):
            srcs = small_list()
            dsts = poisoned([torch.empty_like(s) for s in srcs])
            flat, offsets = pkg.pack(srcs)
            ok = packed_right(torch, flat, offsets, srcs)
            if op == "copy_many_":
                call = functools.partial(pkg.copy_many_, dsts, srcs)
            elif op == "pack":
                poisoned([flat])
                call = functools.partial(pkg.pack, srcs, flat)
            elif op == "unpack_":
                call = functools.partial(pkg.unpack_, flat, dsts)
            else:  # GroupedCopy: prepared once, each call launches it
                call = pkg.GroupedCopy(dsts, srcs)
            call()
            ok = ok and (
                packed_right(torch, flat, offsets, srcs) if op == "pack" else same_bytes(torch, dsts, srcs)
            )
            return call, (lambda: ok)

        return make

    yield Case("copy_ 256x512 fp32", "copy", copy_host(False))
    yield Case("copy 256x512 fp32 (a new tensor)", "copy", copy_host(False, new_tensor=True))
    yield Case("copy_ transposing 256x512 fp32", "transpose", copy_host(True))
    yield Case("add_ 256x512 fp32", "reduce", add_host)
    yield Case("im2col 4x16x16x64 fp16 3x3 pad 1 into out", "im2col", im2col_host)
    yield Case("load_tiles 64x256 fp16", "load", load_host)
    yield Case("gather_rows 64 rows x 256 B bf16 into out", "rows", gather_host())
    yield Case("gather_rows 64 rows x 256 B check_index=False", "rows", gather_host(check_index=False))
    yield Case("scatter_rows_ 64 rows x 256 B bf16", "rows", scatter_host)
    yield Case("index_add_ 64 rows x 256 B fp32", "rows", index_add_host())
    yield Case("index_add_ 64 rows x 256 B check_index=False", "rows", index_add_host(check_index=False))
    yield Case("copy_many_ 8 small tensors", "many", many_host("copy_many_"))
    yield Case("pack 8 small tensors into out", "many", many_host("pack"))
    yield Case("unpack_ 8 small tensors", "many", many_host("unpack_"))
    yield Case("GroupedCopy 8 small tensors, prepared", "many", many_host("grouped"))


# -- the comparison ------------------------------------------------------------------------------------
def chosen(all_cases: Iterable[Case], only: list[str] | None) -> list[Case]:
    """The cases whose name starts with one of `only` or whose family is one of them (all: None)."""
    if not only:
        return list(all_cases)
    return [c for c in all_cases if c.family in only or any(c.name.startswith(p) for p in only)]


def spread_of(samples: list[float]) -> float:
    """The interquartile range over the median."""
    quartiles = statistics.quantiles(samples, n=4)
    return (quartiles[2] - quartiles[0]) / statistics.median(samples)


def verdict(base: list[float], final: list[float], no_worse: bool = False) -> dict:
    """The medians, spreads, ratio and verdict of one case: `no_worse` (host rows) asks only that
    the final tree be no slower, else (device rows) that the medians differ by at most the bound:
    `AGREE`, or the base's spread where wider."""
    base_us, final_us = statistics.median(base), statistics.median(final)
    spread = spread_of(base)
    ratio = final_us / base_us
    bound = max(AGREE, spread)
    agrees = ratio <= 1 + bound if no_worse else abs(ratio - 1) <= bound
    return {
        "base_us": base_us,
        "final_us": final_us,
        "final_over_base": ratio,
        "base_spread": spread,
        "final_spread": spread_of(final),
        "agrees": agrees,
    }


def graph_samples(variants: dict[str, list[Callable[[], Any]]], samples: int) -> dict[str, list[float]]:
    """Device us per launch of each variant: the final tree's interleaved CUDA-graph timer."""
    from tmakit.bench.timing import interleaved_graph_samples_us

    return interleaved_graph_samples_us(variants, samples)


def host_samples(launches: dict[str, Callable[[], Any]], rounds: int, calls: int) -> dict[str, list[float]]:
    """Host us per call of each launch: the final tree's eager timer (`calls` back to back between
    two synchronisations, rounds rotating which goes first, a warm-up round dropped): the method
    of `bench.hostcost` (`timing.host_costs_us`), with every round kept for the spread."""
    from tmakit.bench.timing import eager_samples_us

    return eager_samples_us({label: [launch] for label, launch in launches.items()}, rounds, calls)


def load_trees(base_src: Path) -> dict[str, ModuleType]:
    """{"base": the other tree's package (`import_as_base`), "final": this tree's `tmakit`}."""
    import tmakit

    return {"base": import_as_base(base_src), "final": tmakit}


def device_context(commit: str | None) -> dict:
    from tmakit.bench.report import device_context as context

    return context(commit)


def compare(case: Case, trees: dict[str, ModuleType], timer: Callable[[dict], dict], no_worse: bool) -> dict:
    """One case in both trees: made and checked in each, then timed together; a case that raises
    is a row with its error."""
    row: dict[str, Any] = {"case": case.name, "family": case.family}
    launches, exact = {}, {}
    try:
        for label, pkg in trees.items():
            launch, check = case.make(pkg)
            launches[label] = launch
            exact[label] = bool(check())
        timed = timer(launches)
        row.update(verdict(timed["base"], timed["final"], no_worse))
    except Exception as error:  # noqa: BLE001 - reported as the case's row, the other cases still run
        row.update({"agrees": False, "error": f"{type(error).__name__}: {error}"[:600]})
    row["exact"] = exact
    return row


def passed(row: dict) -> bool:
    return row["agrees"] and "error" not in row and len(row["exact"]) == 2 and all(row["exact"].values())


def line(row: dict, no_worse: bool) -> str:
    if "error" in row:
        return f"{row['case']:52s} FAILED  {row['error']}"
    word = (
        ("no worse" if row["agrees"] else "WORSE") if no_worse else ("agrees" if row["agrees"] else "DIFFERS")
    )
    return (
        f"{row['case']:52s} base {row['base_us']:9.2f} us  final {row['final_us']:9.2f} us  "
        f"x{row['final_over_base']:.4f}  spread {row['base_spread']:.4f}  {word}  exact {row['exact']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base_src", type=Path, help="the other tree's src/ folder")
    parser.add_argument("--samples", type=int, default=100, help="interleaved graph rounds (default 100)")
    parser.add_argument(
        "--host-rounds", type=int, default=HOST_ROUNDS, help=f"host rounds a row (default {HOST_ROUNDS})"
    )
    parser.add_argument(
        "--only",
        help="comma-separated case-name prefixes or families ("
        + ", ".join(FAMILIES)
        + "): those cases alone",
    )
    sections = parser.add_mutually_exclusive_group()
    sections.add_argument("--host-only", action="store_true", help="the host-cost rows alone")
    sections.add_argument("--device-only", action="store_true", help="the device-time cases alone")
    parser.add_argument("--commit", help="this tree's commit (recorded in the JSON)")
    parser.add_argument("--base-commit", help="the base tree's commit (recorded in the JSON)")
    parser.add_argument("--json", type=Path, help="write every median, spread and verdict here")
    args = parser.parse_args(argv)
    if not (args.base_src / "tmakit" / "__init__.py").is_file():
        parser.error(f"{args.base_src} holds no tmakit package (pass the other tree's src/ folder)")
    only = [p.strip() for p in args.only.split(",") if p.strip()] if args.only else None

    import torch

    device = [] if args.host_only else chosen(cases(torch), only)
    host = [] if args.device_only else chosen(host_cases(torch), only)
    if not device and not host:
        parser.error(f"no case matches --only {args.only!r}")

    trees = load_trees(args.base_src)
    torch.manual_seed(2026)
    study = {
        "study": "ab-bench",
        "what": WHAT,
        "context": {**device_context(args.commit), "base_commit": args.base_commit},
        "rows": [],
        "host_rows": [],
        "summary": {
            "samples": args.samples,
            "host_rounds": args.host_rounds,
            "host_calls": HOST_CALLS,
            "agree_within": AGREE,
            "only": only,
        },
    }

    def record(section: str, row: dict, no_worse: bool) -> None:
        study[section].append(row)
        print(line(row, no_worse), flush=True)
        if args.json:  # rewritten after every row: a run stopped early keeps what it measured
            args.json.write_text(json.dumps(study, indent=1))

    def device_timer(launches: dict) -> dict:
        rotated = {label: v if isinstance(v, list) else [v] for label, v in launches.items()}
        return graph_samples(rotated, args.samples)

    def host_timer(launches: dict) -> dict:
        return host_samples(launches, args.host_rounds, HOST_CALLS)

    if device:
        print(f"device us per launch: CUDA graphs, {args.samples} interleaved rounds", flush=True)
    while device:  # each case dropped once measured: its tensors freed
        record("rows", compare(device.pop(0), trees, device_timer, False), False)
    if host:
        print(f"host us per call: {HOST_CALLS} calls back to back, {args.host_rounds} rounds", flush=True)
    while host:
        record("host_rows", compare(host.pop(0), trees, host_timer, True), True)

    failed = [row["case"] for row in study["rows"] + study["host_rows"] if not passed(row)]
    study["summary"].update(
        {
            "device_cases": len(study["rows"]),
            "device_agree": sum(map(passed, study["rows"])),
            "host_rows": len(study["host_rows"]),
            "host_no_worse": sum(map(passed, study["host_rows"])),
            "failed": failed,
        }
    )
    if args.json:
        args.json.write_text(json.dumps(study, indent=1))
    summary = study["summary"]
    print(
        f"device: {summary['device_agree']} of {summary['device_cases']} agree; host: "
        f"{summary['host_no_worse']} of {summary['host_rows']} no worse"
        + (f"; failed: {'; '.join(failed)}" if failed else ""),
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
