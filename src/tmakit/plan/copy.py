"""`tmakit.copy_`'s options and how a copy is planned: the one place for every copy option's name
and check (the defaults a left-out option takes: `plan.copy_defaults`). Pure Python.

`CopyOptions` is what a user (or `tmakit bench --copy name=value,...`) may set; a field left None
takes the default chosen here from the tensors and the device. Adding an option is a field here
plus its use in `CopyOptions.plan` and the kernel.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import TypedDict

from ..config import DTYPES, changed_fields, describe_fields, parse_fields
from ..errors import TmaConfigError
from ..limits import (
    BANK_ROW_BYTES,
    MAX_BOX_EXTENT,
    STAGING_TILE_ALIGN,
    VECTOR_BYTES,
    WARP_THREADS,
)
from ..validate import (
    check_field_types,
    one_of,
)
from .budget import budget_grid, budget_stages, budgeted_sm_count, check_sms
from .copy_defaults import (
    MIN_STORES_IN_FLIGHT,
    SMALL_TRANSPOSE_TILES,
    TRANSPOSE_CONSUMER_WARPS,
    copy_stages,
    copy_tile,
    rows_beyond_l2,
    rows_view_tile,
    small_transpose,
)
from .load import LoadPlan, ceil_div
from .mappings import TransposeMapping
from .ring import TILE_ORDERS, PipelinePlan, check_l2_hint, check_stages


def default_as_rows(
    options: CopyOptions, transpose: bool, compact: bool, in_l2: bool, numel: int, nbytes: int
) -> bool:
    """Whether a copy given no options takes the rows view (`copy_defaults.rows_beyond_l2`)."""
    return options == _DEFAULT_OPTIONS and rows_beyond_l2(transpose, compact, in_l2, numel, nbytes)


@dataclass(frozen=True)
class CopyOptions:
    """How `tmakit.copy_` copies; None (or the default) lets tmakit choose.

    - `tile`: (rows, columns) of each TMA box (default `copy_tile`; with `as_rows`/`bulk`, a tile
      of the rows view, `rows_view_tile`);
    - `stages`: the ring's depth (default `copy_stages`, capped by shared memory);
    - `store_depth`: TMA stores in flight per block (default half the stages, at least 2);
    - `blocks_per_sm`: blocks of the persistent grid per SM;
    - `as_rows`: compact tensors copied as rows of their memory (`config.rows_view`), every tile
      one contiguous run whatever the tensor's shape (the default, with no option given, for
      compact tensors of one layout beyond the L2: `ROWS_BEYOND_L2`);
    - `evict_first`: loads and stores hint L2 to evict their lines first (default: when source
      and destination together fit in L2);
    - `pdl`: programmatic dependent launch (the copy may start while the previous kernel on the
      stream ends, and waits for it before touching memory);
    - `load_hint`, `store_hint`: one side's L2 hint (a `limits.L2_HINTS` name), overriding
      `evict_first` there;
    - `tile_order`: the persistent grid's walk, one of `TILE_ORDERS`;
    - `bulk`: compact tensors of one layout copied as contiguous runs with non-tensor bulk copies
      (`cp.async.bulk`, by address and byte count, no tensor maps);
    - `sms`: an SM budget (`plan.budget`): a persistent grid of this many blocks, one per SM,
      each with a deeper ring (default stages); a compact copy of one layout then takes the copy
      engine unless strict. None (default): the whole GPU, or the enclosing `tmakit.sm_budget`'s.
    The defaults are what measured fastest on the H200; docs/results.md has what the others cost.
    """

    tile: tuple[int, int] | None = None
    stages: int | None = None
    store_depth: int | None = None
    blocks_per_sm: int = 1
    as_rows: bool = False
    evict_first: bool | None = None
    pdl: bool = True
    load_hint: str | None = None
    store_hint: str | None = None
    tile_order: str = "interleaved"
    bulk: bool = False
    sms: int | None = None

    def __post_init__(self) -> None:
        # The types here, before anything is hashed or planned; the values' ranges where they are
        # used (`PipelinePlan`, `CopyPlan`), before anything compiles.
        check_field_types(self, "copy option")
        if self.tile is not None:
            for name, extent in zip(("rows", "columns"), self.tile, strict=True):
                if not 1 <= extent <= MAX_BOX_EXTENT:
                    raise TmaConfigError(
                        f"copy option tile {self.tile}: its {name} are {extent}; a TMA box dimension "
                        f"must be 1..{MAX_BOX_EXTENT} elements"
                    )
        check_l2_hint(self.load_hint, "copy option load_hint")
        check_l2_hint(self.store_hint, "copy option store_hint")
        one_of(self.tile_order, "copy option tile_order", TILE_ORDERS)
        check_sms(self.sms, "copy option sms")

    def __hash__(self) -> int:  # a key of every copy class: hashed once, not per lookup
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:
        return hash(dataclasses.astuple(self))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(field.name for field in dataclasses.fields(cls))

    @classmethod
    def of(cls, **fields: object) -> CopyOptions:
        """`CopyOptions(**fields)`, an unknown name refused with TmaConfigError naming the known ones."""
        unknown = sorted(set(fields) - set(cls.names()))
        if unknown:
            raise TmaConfigError(
                f"unknown copy option {', '.join(unknown)}; tmakit.CopyOptions has {', '.join(cls.names())}"
            )
        return cls(**fields)

    @classmethod
    def parse(cls, text: str) -> CopyOptions:
        """ "tile=16x256,stages=8,bulk=true" -> CopyOptions; "default" (or "") for all defaults
        (`config.parse_fields`: ROWSxCOLS for the tile, integers, true/false, names, default)."""
        return cls.of(**parse_fields(cls, text, "copy option"))

    def describe(self) -> str:
        """The options that differ from the defaults, as `parse` reads them ("default" if none)."""
        return describe_fields(self)

    def changed(self) -> dict[str, object]:
        """The options that differ from the defaults, as `tmakit.copy_`'s keyword arguments."""
        return changed_fields(self)

    @classmethod
    def schema_arguments(cls) -> str:
        """Every option as a typed torch schema argument with its default, read off the fields
        (`int[2]? tile=None, int? stages=None, ..., bool bulk=False`): the ops' typed overloads."""
        arguments = []
        for field in dataclasses.fields(cls):
            annotation = str(field.type)
            base = annotation.removesuffix(" | None")
            value = field.default
            default = "None" if value is None else f'"{value}"' if isinstance(value, str) else value
            optional = "?" if base != annotation else ""
            arguments.append(f"{_SCHEMA_TYPES[base]}{optional} {field.name}={default}")
        return ", ".join(arguments)

    @classmethod
    def keywords(cls, given: dict[str, object]) -> dict[str, object]:
        """`tmakit.copy_`'s keyword arguments from a typed op call's options: those at their
        default left out (the dispatcher may pass them), a list (a schema's `int[2]`) as a tuple."""
        return {
            name: tuple(value) if isinstance(value, list) else value
            for name, value in given.items()
            if name not in _FIELD_DEFAULTS or value != _FIELD_DEFAULTS[name]  # unknown: `of` names it
        }

    # -- planning ------------------------------------------------------------------------------
    def default_tile(
        self,
        dtype_name: str,
        transpose: bool,
        rows_view: tuple[int, int] | None,
        sm_count: int,
        tensor_bytes: int | None = None,
    ) -> tuple[int, int]:
        """The tile this copy uses: the one asked for, else the default for its kind (a small
        layout-changing copy's, `small_transpose`, where `tensor_bytes` is given)."""
        if self.tile is not None:
            return self.tile
        sm_count = budgeted_sm_count(self.sms, sm_count)
        nbytes = DTYPES[dtype_name].nbytes
        if rows_view is not None:
            return rows_view_tile(*rows_view, nbytes, sm_count)
        if small_transpose(nbytes, transpose, tensor_bytes, sm_count):
            return SMALL_TRANSPOSE_TILES[nbytes]
        return copy_tile(dtype_name, transpose)

    def plan(self, load: LoadPlan, transpose: bool, sm_count: int, fits_l2: bool) -> CopyPlan:
        """The copy of `load`'s tensor on a persistent ring (`fits_l2`: source and destination
        together fit in the L2, where evict-first hints were faster)."""
        consumer_warps = TRANSPOSE_CONSUMER_WARPS if transpose else 1
        stages = self.stages
        if stages is None:
            deepest = CopyPlan(PipelinePlan(load, 1, consumer_warps), transpose).max_stages
            tile_bytes = math.prod(load.config.tile) * load.config.element.nbytes
            stages = min(copy_stages(tile_bytes), deepest)
            if self.sms is not None:
                stages = budget_stages(tile_bytes, stages, deepest)
        ring = PipelinePlan(
            load,
            stages=stages,
            consumer_warps=consumer_warps,
            persistent=True,
            blocks_per_sm=self.blocks_per_sm,
            **budget_grid(self.sms, sm_count),
            evict_first=fits_l2 if self.evict_first is None else self.evict_first,
            pdl=self.pdl,
            load_hint=self.load_hint,
            tile_order=self.tile_order,
        )
        store_depth = max(MIN_STORES_IN_FLIGHT, stages // 2) if self.store_depth is None else self.store_depth
        return CopyPlan(ring, transpose, store_depth, self.store_hint, self.bulk)


_DEFAULT_OPTIONS = CopyOptions()  # every option left out (built once: its fields' types are checked)


@dataclass(frozen=True)
class CopyPlan:
    """A copy run on a `PipelinePlan`'s ring: the consumer warps store each stage to the same tile
    of the destination (TMA stores, or with `bulk` non-tensor bulk copies of contiguous runs);
    with `transpose` (a layout-changing copy) they first transpose the stage into one of two
    staging tiles stored with the other contiguous mode (`transpose_mapping`).

    `store_depth` stores stay in flight before the oldest must have read its stage (capped at the
    stages: a stage is released only once its store has read it); `store_hint` is the stores' L2
    hint, overriding the ring's `evict_first`."""

    ring: PipelinePlan
    transpose: bool = False
    store_depth: int = 2
    store_hint: str | None = None
    bulk: bool = False

    def __post_init__(self) -> None:
        check_field_types(self)
        check_l2_hint(self.store_hint)
        if self.store_depth < 1:
            raise TmaConfigError(f"store depth is {self.store_depth}; at least one store must be in flight")
        if self.transpose:
            self._check_transpose()
        if self.bulk:
            self._check_bulk()
        beside = fix = ""
        if self.transpose:
            config = self.load.config
            beside = f" beside the layout-changing copy's two staging tiles ({self.staging_bytes} bytes)"
            fix = f"use a smaller tile, e.g. {copy_tile(config.dtype, True)} (the default for {config.dtype})"
        check_stages(self.ring.stages, self.max_stages, self.ring.stage_bytes, beside, fix)

    @property
    def load(self) -> LoadPlan:
        return self.ring.load

    @functools.cached_property
    def shape_check_constants(self) -> tuple[int, int, int]:
        """(tile rows, tile columns, persistent blocks): what `check_copy_shape` reads per shape."""
        tile_rows, tile_cols = self.load.config.tile
        return tile_rows, tile_cols, self.ring.persistent_blocks

    @property
    def max_stages(self) -> int:
        """Stages that fit beside the staging tiles (and their alignment) of a transposing copy."""
        return self.ring.stages_that_fit(self.staging_bytes + STAGING_TILE_ALIGN if self.transpose else 0)

    @property
    def smem_bytes(self) -> int:
        """The ring's shared memory, then (transposing) the staging tiles, 1024-aligned."""
        if self.transpose:
            return self.staging_offset + self.staging_bytes
        return self.ring.smem_bytes

    @property
    def staging_offset(self) -> int:
        """Where a transposing copy's staging tiles start."""
        return ceil_div(self.ring.smem_bytes, STAGING_TILE_ALIGN) * STAGING_TILE_ALIGN

    @property
    def staging_bytes(self) -> int:
        """A transposing copy's two staging tiles: one being filled while the other's TMA store
        reads it."""
        return 2 * self.ring.stage_bytes if self.transpose else 0

    @property
    def store_policy(self) -> int | None:
        """The stores' 64-bit L2 cache policy (None: no hint)."""
        return self.ring.policy(self.store_hint)

    @property
    def stores_in_flight(self) -> int:
        """The copy consumer's TMA stores in flight: `store_depth`, at most one per stage."""
        return min(self.store_depth, self.ring.stages)

    @property
    def transpose_mapping(self) -> TransposeMapping:
        """How the consumer threads transpose a stage (see TransposeMapping)."""
        load = self.load
        tile_rows, tile_cols = load.config.tile
        # As stored: a column-major tile is tile_cols rows of tile_rows elements.
        source_rows, source_width = (tile_cols, tile_rows) if load.rows_contiguous else (tile_rows, tile_cols)
        vector = VECTOR_BYTES // load.config.element.nbytes
        return TransposeMapping(
            vector, source_rows, source_width // vector, WARP_THREADS * self.ring.consumer_warps
        )

    def _check_transpose(self) -> None:
        """A transposing copy needs both tile extents to be whole 128-byte multiples (each stored
        row then starts in bank group 0, which the conflict-free mapping relies on) and no
        swizzle (the staging tile is written unswizzled)."""
        load = self.load
        nbytes = load.config.element.nbytes
        if load.config.swizzle:
            raise TmaConfigError(
                f"swizzle {load.config.swizzle} with a layout-changing copy; it stages tiles unswizzled"
            )
        bad = [extent for extent in load.config.tile if extent * nbytes % BANK_ROW_BYTES]
        if bad:
            raise TmaConfigError(
                f"tile {load.config.tile} of {load.config.dtype}: a layout-changing copy needs both "
                f"tile extents to be multiples of {BANK_ROW_BYTES // nbytes} elements "
                f"({BANK_ROW_BYTES} bytes)"
            )

    def _check_bulk(self) -> None:
        """Bulk copies move contiguous runs: the matrix compact and row-major, the tile whole
        rows of it, nothing swizzled or transposed."""
        config = self.load.config
        cols = self.load.matrix_shape[1]
        checks = [
            (self.transpose, "a layout-changing copy"),
            (config.swizzle, f"swizzle {config.swizzle}"),
            (len(config.shape) != 2, f"a rank-{len(config.shape)} tensor (2-D rows views only)"),
            (config.element_strides != (cols, 1), f"strides {config.element_strides} (compact row-major)"),
            (config.tile[1] != cols, f"tile {config.tile} (whole rows of {cols} only)"),
            (
                self.ring.prefetch_tiles or self.ring.prefetch_descriptor,
                "prefetching (no tensor map to prefetch by)",
            ),
        ]
        problems = [what for failed, what in checks if failed]
        if problems:
            raise TmaConfigError(f"bulk copy cannot take {', '.join(problems)}: it copies contiguous runs")

    @property
    def bulk_tile_bytes(self) -> tuple[int, int]:
        """A bulk copy's bytes per tile: (every tile but the last, the last), which holds the rows
        left over and may be shorter (a bulk copy moves exactly its bytes, nothing zero-filled)."""
        load = self.load
        tile_rows, cols = load.config.tile
        rows_short = load.row_blocks * tile_rows - load.matrix_shape[0]  # rows the last tile lacks
        return load.expected_tx_bytes, load.expected_tx_bytes - rows_short * cols * load.config.element.nbytes

    def summary(self) -> str:
        lines = [self.ring.summary()]
        if self.transpose:
            mapping = self.transpose_mapping
            lines.append(
                f"transpose         each stage into one of 2 staging tiles ({self.staging_bytes} bytes at "
                f"{self.staging_offset}); {mapping.blocks} blocks of {mapping.vector}x{mapping.vector}, "
                f"{mapping.passes} per consumer thread; {self.smem_bytes} bytes of shared memory in all, "
                f"at most {self.max_stages} stages fit"
            )
        if self.bulk:
            tile_bytes, last_bytes = self.bulk_tile_bytes
            lines.append(
                f"bulk copies       runs of {tile_bytes} bytes (the last {last_bytes}) by address, "
                "`cp.async.bulk`; no tensor maps"
            )
        lines.append(f"stores            {self.stores_in_flight} in flight per block")
        return "\n".join(lines)


class CopyKeywords(TypedDict, total=False):
    """`tmakit.copy_`'s keyword options (the `CopyOptions` fields but `tile` and `stages`, which
    are its parameters), for a type checker: `**options: Unpack[CopyKeywords]` names a typo."""

    store_depth: int | None
    blocks_per_sm: int
    as_rows: bool
    evict_first: bool | None
    pdl: bool
    load_hint: str | None
    store_hint: str | None
    tile_order: str
    bulk: bool
    sms: int | None


# A CopyOptions field's annotation -> its torch schema type (`schema_arguments`).
_SCHEMA_TYPES = {"tuple[int, int]": "int[2]", "int": "int", "bool": "bool", "str": "str"}
_FIELD_DEFAULTS = {field.name: field.default for field in dataclasses.fields(CopyOptions)}
