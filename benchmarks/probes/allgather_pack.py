"""`tmakit.pack` and `tmakit.unpack_` as the copy-in and copy-out of FSDP-style collectives: each
rank holds a shard of every parameter of a transformer layer, packs its shards into the
all-gather's input, all-gathers, and unpacks the gathered buffer into the full parameters; the
gradients go the other way (each rank packs its full gradients by destination rank, the
reduce-scatter sums them, each rank unpacks its shards). Every element is checked against the
expected values and against the same step done with torch's copies (`_foreach_copy_` in,
`split_with_sizes_copy` out).

    torchrun --nproc-per-node 2 benchmarks/probes/allgather_pack.py [--json OUT] [--small] [--check-only]
    python benchmarks/probes/allgather_pack.py [--device cpu]          (a world of one)

On CUDA the collectives are NCCL's and the copy-in and copy-out are timed beside torch's with
`tmakit.bench.timing` (CUDA-graph replay and the eager call, medians), with the whole step; on the
CPU they are gloo's and only checked.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist

import tmakit
from tmakit.bench.report import device_context
from tmakit.many.plan import PACK_ALIGN, pack_offsets

# A transformer layer's parameters (a Llama-7B block's): 4 attention projections, 3 MLP ones, 2 norms.
LAYER = ((4096, 4096),) * 4 + ((11008, 4096),) * 3 + ((4096,),) * 2
SMALL = ((64, 48),) * 2 + ((100, 16), (37,), (5, 3))  # odd sizes: shards of unequal padding
# The collectives by their current names (older torch: the *_tensor ones).
ALL_GATHER = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu"
    )
    parser.add_argument("--small", action="store_true", help="small odd-sized parameters instead of a layer")
    parser.add_argument("--check-only", action="store_true", help="check every element, time nothing")
    parser.add_argument("--samples", type=int, default=20, help="device-time samples (CUDA)")
    parser.add_argument("--json", help="where rank 0 writes the study")
    return parser.parse_args(argv)


def start_world(device: str) -> tuple[int, int]:
    """(rank, world size): torchrun's, or a world of one on a free local port."""
    if "RANK" not in os.environ:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rank = int(os.environ["RANK"])
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    return rank, dist.get_world_size()


def values(numel: int, salt: int, device: str) -> torch.Tensor:
    """Position-dependent small integers, exact in bf16 and in sums of a few of them."""
    index = torch.arange(numel, device=device)
    return ((index * 7 + salt * 13) % 61 - 30).to(torch.bfloat16)


class Layer:
    """The layer's parameters on one rank: each flattened and padded to a multiple of the world,
    `chunks[i]` elements a shard; the packed shard buffer's length `padded` (a whole number of
    `PACK_ALIGN` bytes, so that the world's buffers laid end to end are the packing of every
    rank's shards in rank order)."""

    def __init__(self, shapes, rank: int, world: int, device: str):
        self.shapes, self.rank, self.world, self.device = shapes, rank, world, device
        self.numels = [torch.Size(shape).numel() for shape in shapes]
        self.chunks = [-(-numel // world) for numel in self.numels]
        element = torch.tensor([], dtype=torch.bfloat16).element_size()
        self.offsets, end = pack_offsets([chunk * element for chunk in self.chunks])
        self.padded = -(-end // PACK_ALIGN) * PACK_ALIGN // element

    def full(self, salt: int) -> list[torch.Tensor]:
        """Each parameter, padded to world x chunk elements, as (world, chunk): row r is r's shard."""
        out = []
        for index, (numel, chunk) in enumerate(zip(self.numels, self.chunks, strict=True)):
            flat = torch.zeros(self.world * chunk, dtype=torch.bfloat16, device=self.device)
            flat[:numel] = values(numel, salt + index, self.device)
            out.append(flat.view(self.world, chunk))
        return out

    def empty_full(self) -> list[torch.Tensor]:
        return [
            torch.empty(self.world, chunk, dtype=torch.bfloat16, device=self.device) for chunk in self.chunks
        ]

    def buffer(self, blocks: int = 1) -> torch.Tensor:
        return torch.zeros(blocks * self.padded, dtype=torch.bfloat16, device=self.device)

    def torch_views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """The spans of one packed block, as FSDP's copy-in writes them (`_foreach_copy_` targets)."""
        element = flat.element_size()
        return [
            flat[offset // element :][:chunk] for offset, chunk in zip(self.offsets, self.chunks, strict=True)
        ]


def all_gather_step(layer: Layer, shards, gathered, flat, full, by: str) -> None:
    """Copy-in (pack), all-gather, copy-out (unpack), by tmakit's ops or torch's."""
    if by == "tmakit":
        tmakit.pack(shards, out=flat)
    else:
        torch._foreach_copy_(layer.torch_views(flat), shards)
    ALL_GATHER(gathered, flat)
    copy_out(layer, gathered, full, by)


def copy_out(layer: Layer, gathered: torch.Tensor, full: list[torch.Tensor], by: str) -> None:
    """Every rank's block of the gathered buffer into the rows of the full parameters."""
    if by == "tmakit":
        tmakit.unpack_(gathered, [row for r in range(layer.world) for row in (tensor[r] for tensor in full)])
        return
    blocks = gathered.view(layer.world, layer.padded)
    if sum(layer.chunks) == layer.padded:  # no alignment gaps: FSDP's copy-out, one call
        torch.split_with_sizes_copy(blocks, list(layer.chunks), dim=1, out=full)
        return
    spans = [offset // gathered.element_size() for offset in layer.offsets]
    for tensor, start, chunk in zip(full, spans, layer.chunks, strict=True):
        tensor.copy_(blocks[:, start : start + chunk])  # the same columns, a tensor at a time


def reduce_scatter_step(layer: Layer, grads, send, shard_out, shards, by: str) -> None:
    """Copy-in of the full gradients by destination rank, reduce-scatter (sum), copy-out of this
    rank's summed shards."""
    rows = [row for r in range(layer.world) for row in (grad[r] for grad in grads)]
    if by == "tmakit":
        tmakit.pack(rows, out=send)
    else:
        views = [view for r in range(layer.world) for view in layer.torch_views(send[r * layer.padded :])]
        torch._foreach_copy_(views, rows)
    REDUCE_SCATTER(shard_out, send, op=dist.ReduceOp.SUM)
    if by == "tmakit":
        tmakit.unpack_(shard_out, shards)
    else:
        torch._foreach_copy_(shards, layer.torch_views(shard_out))


def first_wrong(found: list[torch.Tensor], expected: list[torch.Tensor], what: str) -> str | None:
    for index, (got, want) in enumerate(zip(found, expected, strict=True)):
        if not torch.equal(got.view(torch.int16), want.view(torch.int16)):
            at = (got.view(torch.int16) != want.view(torch.int16)).nonzero()[0].tolist()
            return f"{what}: parameter {index} first differs at {at}"
    return None


def check(layer: Layer) -> list[str]:
    """Both steps by tmakit and by torch, every element against the expected values."""
    wrong = []
    expected = layer.full(salt=1)
    shards = [tensor[layer.rank].clone() for tensor in expected]
    grads = layer.full(salt=100 + layer.rank)  # each rank's own gradients
    everyones = [layer.full(salt=100 + r) for r in range(layer.world)]
    summed = [
        sum(grads_of[i][layer.rank].float() for grads_of in everyones).to(torch.bfloat16)
        for i in range(len(layer.shapes))
    ]
    for by in ("tmakit", "torch"):
        full = layer.empty_full()
        all_gather_step(layer, shards, layer.buffer(layer.world), layer.buffer(), full, by)
        wrong.append(first_wrong(full, expected, f"all-gather by {by}"))
        out = [torch.empty_like(shard) for shard in shards]
        reduce_scatter_step(layer, grads, layer.buffer(layer.world), layer.buffer(), out, by)
        wrong.append(first_wrong(out, summed, f"reduce-scatter by {by}"))
    return [message for message in wrong if message]


def measure(layer: Layer, samples: int) -> dict:
    """Copy-in, copy-out and the whole all-gather step, tmakit's beside torch's, in one run
    (`tmakit.bench.timing`): device time by CUDA-graph replay (the copies; the step, whose
    collective is NCCL's, on a stream), and the eager call, host included, interleaved."""
    from tmakit.bench.timing import eager_samples_us, graph_samples_us, stream_samples_us

    shards = [tensor[layer.rank].clone() for tensor in layer.full(salt=1)]
    flat, gathered, full = layer.buffer(), layer.buffer(layer.world), layer.empty_full()
    calls = {
        "tmakit": {
            "copy_in": lambda: tmakit.pack(shards, out=flat),
            "copy_out": lambda: copy_out(layer, gathered, full, "tmakit"),
            "step": lambda: all_gather_step(layer, shards, gathered, flat, full, "tmakit"),
        },
        "torch": {
            "copy_in": lambda: torch._foreach_copy_(layer.torch_views(flat), shards),
            "copy_out": lambda: copy_out(layer, gathered, full, "torch"),
            "step": lambda: all_gather_step(layer, shards, gathered, flat, full, "torch"),
        },
    }
    moved = {  # bytes read and written
        "copy_in": 2 * sum(shard.numel() for shard in shards) * flat.element_size(),
        "copy_out": 2 * sum(tensor.numel() for tensor in full) * flat.element_size(),
    }
    named = {f"{by} {part}": [call] for by, parts in calls.items() for part, call in parts.items()}
    eager = eager_samples_us(named)
    rows = {}
    for by, parts in calls.items():
        row = {"step_stream_us": statistics.median(stream_samples_us([parts["step"]], samples))}
        for part in ("copy_in", "copy_out"):
            graph_us = statistics.median(graph_samples_us([parts[part]], samples))
            row[f"{part}_graph_us"] = graph_us
            row[f"{part}_eager_us"] = statistics.median(eager[f"{by} {part}"])
            row[f"{part}_gb_per_s"] = moved[part] / graph_us / 1e3
        rows[by] = row
    return rows


def study_context(device: str) -> dict:
    """The results file's context: the card, driver and versions on CUDA (`device_context`), the
    torch version and date on the CPU; the commit from TMAKIT_COMMIT (set by device_run.sh)."""
    commit = os.environ.get("TMAKIT_COMMIT")
    if device == "cuda":
        return device_context(commit)
    return {"device": "cpu", "torch": torch.__version__, "commit": commit, "date": time.strftime("%FT%TZ")}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world = start_world(args.device)
    layer = Layer(SMALL if args.small else LAYER, rank, world, args.device)
    wrong = check(layer)
    report = {"rank": rank, "world": world, "device": args.device, "wrong": wrong}
    if not args.check_only and args.device == "cuda":
        report["timings"] = measure(layer, args.samples)
    reports = [None] * world
    dist.all_gather_object(reports, report)
    dist.destroy_process_group()
    if rank == 0:
        study = {
            "study": "allgather-pack",
            "what": __doc__.split("\n\n")[0],
            "context": study_context(args.device),
            "rows": reports,  # one a rank
            "summary": {"shapes": layer.shapes},
        }
        if args.json:
            with open(args.json, "w") as out:
                json.dump(study, out, indent=1)
        print(json.dumps(study)[:2000])
    return 1 if any(entry["wrong"] for entry in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
