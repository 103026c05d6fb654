from tmakit import SEED, LoadPlan
from tmakit.cli import main
from tmakit.demo import _demo_compile_only


def test_plan_command_prints_the_seed(capsys):
    assert main(["plan", "--highlight", "1,2"]) == 0
    out = capsys.readouterr().out
    assert "total tile loads  924" in out
    assert "32776 bytes requested" in out
    assert "element origin (64, 512)" in out


def test_plan_command_refuses_bad_input_with_the_rule(capsys):
    assert main(["plan", "--shape", "1000x777", "--dtype", "bf16"]) == 2
    assert "1554 bytes; TMA needs a multiple of 16" in capsys.readouterr().err
    assert main(["plan", "--tile", "64by256"]) == 2


def test_compile_only_demo_finds_every_instruction():
    lines = []
    assert _demo_compile_only(LoadPlan(SEED), lines.append)
    text = "\n".join(lines)
    assert "cp.async.bulk.tensor.2d" in text
    assert "MISSING" not in text
    assert "[32768] bytes; plan expects 32768 -> agree" in text


def test_check_command_passes_the_seed_and_catches_each_mistake(capsys):
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert "tile 6: arrive + expect 32768 B, copy 32768 B" in out and "ok: every wait completes" in out
    for mistake, reason in [
        ("expect-more", "more bytes expected than delivered"),
        ("expect-less", "early-completion"),
        ("skip-arrival", "missing-arrival"),
        ("same-parity", "wrong-parity"),
    ]:
        assert main(["check", "--mistake", mistake]) == 1
        assert reason in capsys.readouterr().out, mistake


def test_compile_only_demo_walks_the_seed_schedule():
    lines = []
    assert _demo_compile_only(LoadPlan(SEED), lines.append)
    text = "\n".join(lines)
    assert "tile 6: arrive + expect 32768 B" in text
