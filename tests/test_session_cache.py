"""The test suite writes compiled kernels into a temporary folder of its own, never into the user's
~/.cache/tmakit: conftest.py sets $TMAKIT_CACHE_DIR as it is imported, for the session, its
pytest-xdist workers and the processes tests start, and removes the folder at exit."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from conftest import SESSION_CACHE_MARK
from tmakit.runtime.compile import cache_dir

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"

# Run by a pytest of its own with the suite's conftest: a kernel compiled for the TVM-FFI path
# (kept on disk), and a child process's view of the cache.
COMPILING_TEST = textwrap.dedent(
    """
    import os, subprocess, sys
    from pathlib import Path

    import pytest


    def test_compile_a_kernel_kept_on_disk():
        pytest.importorskip("tvm_ffi")
        from tmakit.patches.launch import compile_im2col
        from tmakit.patches.plan import Im2colPlan
        from tmakit.runtime.compile import cache_dir

        compile_im2col(Im2colPlan((3, 7, 9, 24), "fp32", 3), tvm_ffi=True)
        folder = cache_dir()
        assert folder is not None and list(folder.glob("*.o")), folder  # the kernel went to disk
        child = "from tmakit.runtime.compile import cache_dir; print(cache_dir())"
        seen = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
        assert seen.stdout.strip() == str(folder)  # a process a test starts caches there too
        Path("session_cache.txt").write_text(str(folder))  # for the test that ran this one
    """
)


def test_the_session_caches_kernels_in_a_temporary_folder():
    folder = cache_dir()
    if os.environ.get("TMAKIT_CACHE_DIR") == "off":
        assert folder is None
        return
    assert folder is not None and str(folder) == os.environ[SESSION_CACHE_MARK]
    assert folder.is_relative_to(Path(tempfile.gettempdir())) and not folder.is_relative_to(Path.home())


def test_a_session_that_compiles_leaves_nothing_in_home(tmp_path):
    pytest.importorskip("tvm_ffi")
    pytest.importorskip("xdist")
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "test_compiles.py").write_text(COMPILING_TEST)
    env = {k: v for k, v in os.environ.items() if k not in ("TMAKIT_CACHE_DIR", SESSION_CACHE_MARK)}
    env.update(HOME=str(home), PYTHONPATH=os.pathsep.join([str(TESTS), str(SRC)]))
    done = subprocess.run(
        # -p conftest: the suite's conftest, loaded as pytest loads it, before any test; -n 1: the
        # test runs in a pytest-xdist worker, a process apart from the session that made the folder.
        [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider", "-n", "1",
         "test_compiles.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout, done.stdout[-3000:]
    assert [path for path in home.rglob("*")] == []  # no ~/.cache/tmakit, nor anything else
    folder = Path((tmp_path / "session_cache.txt").read_text())
    assert not folder.exists() and folder.is_relative_to(Path(tempfile.gettempdir()))  # removed at the end
