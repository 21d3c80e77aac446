"""Fixtures for the embedded engine's tests: private work directories and stray-process checks.

Every test works in its own short directory under /tmp (sockets must fit ``sun_path``; pytest's
``tmp_path`` under ``/tmp/pytest-of-root`` is 0700 and unreachable for the server user when we
run as root). After each test no postgres may remain on any data directory inside it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_pgjobs.embedded import server
from django_pgjobs.embedded.lifetime import STANDALONE_LOADER

REPO = Path(__file__).resolve().parents[2]
EMBEDDED_DIR = Path(server.__file__).resolve().parent


def standalone_server(package_dir: Path = EMBEDDED_DIR) -> str:
    """Code that loads the embedded package from ``package_dir`` without Django or the project on
    ``sys.path`` (as the watchdog does) and binds its ``server`` module to ``srv``."""
    return (
        STANDALONE_LOADER
        + "from pathlib import Path\n"
        + f"srv = importlib.import_module(load_standalone({str(package_dir)!r}).__name__ + '.server')\n"
    )


def postgres_pids_under(root: Path) -> list[int]:
    """Live (non-zombie) postgres processes whose ``-D`` lies under ``root``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] in "ZX" or b"-D" not in args:
            continue
        i = args.index(b"-D")
        if i + 1 < len(args) and os.fsdecode(args[i + 1]).startswith(str(root)):
            found.append(int(proc.name))
    return found


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A short private directory the server user may traverse; nothing left running after."""
    path = Path(tempfile.mkdtemp(prefix="pgjt-", dir="/tmp"))
    os.chmod(path, 0o711)
    try:
        yield path
    finally:
        for pid_file in path.rglob("postmaster.pid"):
            server.stop_server(pid_file.parent, mode="immediate", timeout=20)
        stray = postgres_pids_under(path)
        shutil.rmtree(path, ignore_errors=True)
        assert not stray, f"postgres processes left running: {stray}"


def child_env(**extra: str) -> dict[str, str]:
    """Environment for child processes: the repo importable, no real-server URL, no hand-off."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL"}}
    env.pop(server.ENV_TEST_DATA_DIR, None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def run_python(
    code: str, *, env: dict[str, str] | None = None, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (its own Django state, its own atexit)."""
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env or child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )
    if check and result.returncode != 0:
        pytest.fail(f"child failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result
