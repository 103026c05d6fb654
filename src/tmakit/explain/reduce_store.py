"""`tmakit explain --reduce`: the reduce store of the marked tile, and what it leaves in each
destination element."""

from typing import Any

from ..model.reduce_ops import ELEMENT_RULES
from ..plan import LoadPlan


def reduce_store(plan: LoadPlan, highlight: tuple[int, int], op: str | None) -> dict[str, Any] | None:
    """The reduce store of the highlighted tile: it writes back the box the load read (same
    coordinates, same bytes), combining each element with the destination's in L2."""
    if op is None:
        return None
    return {
        "op": op,
        "instruction": f"cp.reduce.async.bulk.tensor.{len(plan.config.shape)}d.global.shared::cta.{op}"
        ".tile.bulk_group",
        "box": list(plan.config.tile),
        "destination_element_origin": list(plan.tile_origin(*highlight)),
        "bytes_read_from_shared_memory": plan.expected_tx_bytes,
        "element_rule": ELEMENT_RULES[op],
    }


def reduce_lines(reduce: dict[str, Any] | None) -> list[str]:
    """The text's fourth question, when a reduce op was given."""
    if reduce is None:
        return []
    box, origin = reduce["box"], tuple(reduce["destination_element_origin"])
    return [
        "",
        f"4. What does a reduce store ({reduce['op']}) do with the tile?",
        f"  {reduce['instruction']}",
        f"  it reads the {box[0]}x{box[1]} box back out of shared memory "
        f"({reduce['bytes_read_from_shared_memory']} bytes) into the destination's box at",
        f"  element origin {origin}: the tile the load read, at the same coordinates. The L2",
        "  combines each element s with the destination's d, which becomes",
        f"  {reduce['element_rule']}.",
        "  No barrier completes: the issuing thread commits a bulk group and waits for it to have read",
        "  the stage before the stage is released.",
    ]
