"""`benchmarks/probes/allgather_pack.py`: pack and unpack as an all-gather's copy-in and copy-out and a
reduce-scatter's, every element checked against the expected values and torch's copies. On the
CPU through gloo, a world of one and of two processes; on one GPU a world of one through NCCL;
on two GPUs the program as torchrun runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "probes" / "allgather_pack.py"


def run(tmp_path: Path, world: int, device: str, timed: bool = False) -> dict:
    """The program on `world` processes (torchrun's launcher for two), its study as rank 0 wrote it."""
    out = tmp_path / f"study-{device}-{world}.json"
    arguments = [str(SCRIPT), "--device", device, "--small", "--json", str(out)]
    arguments += ["--samples", "3"] if timed else ["--check-only"]
    if world > 1:
        arguments = ["-m", "torch.distributed.run", "--nproc-per-node", str(world), *arguments]
    done = subprocess.run([sys.executable, *arguments], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("world", [1, 2])
def test_every_element_of_both_collectives_on_the_cpu(tmp_path, world):
    pytest.importorskip("torch", reason="the program needs torch")
    study = run(tmp_path, world, "cpu")
    assert [entry["rank"] for entry in study["rows"]] == list(range(world))
    assert all(entry["world"] == world and entry["wrong"] == [] for entry in study["rows"])


def test_the_worlds_blocks_end_to_end_are_the_packing_of_every_ranks_shards():
    """What one `unpack_` of the gathered buffer relies on: each rank's block is a whole number of
    PACK_ALIGN bytes, so the blocks laid end to end put every row where `pack_offsets` would."""
    pytest.importorskip("torch", reason="the program needs torch")
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import allgather_pack
    finally:
        sys.path.remove(str(SCRIPT.parent))
    from tmakit.many.plan import PACK_ALIGN, pack_offsets

    for world in (1, 2, 3, 8):
        for shapes in (allgather_pack.SMALL, allgather_pack.LAYER):
            layer = allgather_pack.Layer(shapes, 0, world, "cpu")
            block_bytes = 2 * layer.padded
            assert block_bytes % PACK_ALIGN == 0
            offsets, _ = pack_offsets([2 * chunk for _ in range(world) for chunk in layer.chunks])
            expected = [r * block_bytes + offset for r in range(world) for offset in layer.offsets]
            assert offsets == expected


@pytest.mark.gpu
def test_a_world_of_one_on_the_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    study = run(tmp_path, 1, "cuda", timed=True)
    assert study["rows"][0]["wrong"] == []
    timings = study["rows"][0]["timings"]
    for by in ("tmakit", "torch"):
        assert all(
            timings[by][f"copy_{part}_{kind}_us"] > 0 for part in ("in", "out") for kind in ("graph", "eager")
        )


@pytest.mark.gpu
def test_two_gpus_as_torchrun_runs_it(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    study = run(tmp_path, 2, "cuda")
    assert all(entry["wrong"] == [] for entry in study["rows"])
