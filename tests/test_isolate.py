"""The sweep's worker isolation: hangs and dead workers become results, the sweep goes on."""

import sys
from pathlib import Path

from tmakit import LoadConfig
from tmakit.check.isolate import config_from_json, config_to_json, run_isolated

FAKE_WORKER = [sys.executable, str(Path(__file__).parent / "fakes" / "fake_worker.py")]


def test_config_round_trips_through_json():
    config = LoadConfig((2, 100, 130), "bf16", (16, 64), 128, "col", (13600, 1, 104))
    assert config_from_json(config_to_json(config)) == config


def test_hang_and_fatal_error_are_results_and_the_sweep_continues():
    configs = [
        LoadConfig((64, 64), "fp16", (8, 16)),
        LoadConfig((64, 64), "fp16", (1, 16)),  # hangs
        LoadConfig((64, 64), "fp16", (8, 16)),
        LoadConfig((64, 64), "fp16", (2, 16)),  # fatal
        LoadConfig((64, 64), "fp16", (8, 16)),
    ]
    seen = []
    results = run_isolated(configs, 2.0, lambda c, r: seen.append(r["status"]), worker_command=FAKE_WORKER)
    assert [r["status"] for r in results] == ["ok", "hang", "ok", "error", "ok"]
    assert seen == ["ok", "hang", "ok", "error", "ok"]
    assert 2.0 <= results[1]["seconds"] < 10
