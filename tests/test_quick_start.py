"""The README's quick start, run as written on CPU tensors (`device="cuda"` read as "cpu"): every
call takes torch's path there and must give torch's results."""

from __future__ import annotations

import contextlib
import io

import pytest

from entry_point import ROOT


def quick_start() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1]
    return section.split("```python", 1)[1].split("```", 1)[0]


def test_the_quick_start_runs_on_cpu_tensors_as_torch_would():
    torch = pytest.importorskip("torch", reason="the quick start is torch code")
    code = quick_start()
    assert 'device="cuda"' in code and "tmakit.copy_(dst, x.t())" in code
    scope: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code.replace('device="cuda"', 'device="cpu"'), "README quick start", "exec"), scope)
    x, act, patches, dst = scope["x"], scope["act"], scope["patches"], scope["dst"]
    assert torch.equal(dst, 2 * x.t())  # copied, then dst += dst
    unfolded = torch.nn.functional.unfold(act.permute(0, 3, 1, 2).float(), 3, padding=1)
    n, _, _, c = act.shape  # F.unfold's (N, C*R*S, L) as (N*L, R*S*C), channels fastest
    expected = unfolded.view(n, c, 3, 3, -1).permute(0, 4, 2, 3, 1)
    assert torch.equal(patches.float(), expected.reshape(patches.shape))
    assert "torch" in printed.getvalue()  # copy_path names torch's path on a CPU tensor, and why
