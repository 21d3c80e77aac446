"""Test mode: a fresh throwaway cluster per test run, removed when its owner exits, however.

The owner (first process to connect in test mode) exports ``PGJOBS_EMBEDDED_TEST_DATA_DIR=<data
dir>`` and ``PGJOBS_EMBEDDED_TEST_OWNER=<its pid>`` into ``os.environ``. Child processes inherit
them; in test mode they attach to that data directory instead of creating their own. They may
restart the server there (under the lock) if it went away while the owner lives, never create
directories, never run initdb, never stop it.

Only the owner stops it: ``atexit`` on normal exit, and a watchdog process that blocks reading a
pipe whose write end only the owner holds. When the owner dies in any way (even SIGKILL) the
kernel closes that end, the watchdog reads EOF, stops the server (immediate mode) and removes the
directory, holding the start lock so no attached child can restart it meanwhile. A pipe rather
than ``PR_SET_PDEATHSIG`` because the death signal fires when the *thread* that forked exits
(connections are often opened from worker threads) and pg_ctl daemonises the postmaster anyway.

The watchdog loads this package from its directory as a standalone package (these modules use
only the standard library and relative imports), so it needs neither Django nor the project on
``sys.path``.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .binaries import find_binaries
from .cluster import ServerConfig, ensure_server, stop_server
from .config import make_config, option
from .defaults import ENV_TEST_DATA_DIR, ENV_TEST_OWNER
from .errors import EmbeddedPostgresError
from .locking import file_lock
from .state import ServerInfo, running_server
from .users import server_user

PACKAGE_DIR = Path(__file__).resolve().parent


@dataclasses.dataclass
class _Owned:
    pid: int
    base: Path
    data_dir: Path
    pipe_w: int
    watchdog: subprocess.Popen[bytes]


_state_lock = threading.RLock()
_owned: _Owned | None = None

#: Loads the package at ``package_dir`` under another name, standard library only: what the
#: watchdog (and a test run as another user) does instead of importing ``django_pgjobs``.
STANDALONE_LOADER = """
import importlib, importlib.util, os, sys
def load_standalone(package_dir, name="_pgjobs_embedded"):
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(package_dir, "__init__.py"), submodule_search_locations=[package_dir]
    )
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    return package
"""

_WATCHDOG = (
    STANDALONE_LOADER
    + """
import shutil, signal
fd, data_dir, base, package_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
while True:
    try:
        if not os.read(fd, 4096):
            break
    except InterruptedError:
        pass
try:
    load_standalone(package_dir)
    lifetime = importlib.import_module("_pgjobs_embedded.lifetime")
    lifetime.stop_and_remove(lifetime.Path(data_dir), lifetime.Path(base), mode="immediate")
except Exception:
    try:  # last resort: immediate shutdown of whatever postmaster.pid names
        with open(os.path.join(data_dir, "postmaster.pid")) as f:
            os.kill(int(f.readline()), signal.SIGQUIT)
    except (OSError, ValueError):
        pass
finally:
    shutil.rmtree(base, ignore_errors=True)
"""
)


def _start_watchdog(data_dir: Path, base: Path) -> tuple[int, subprocess.Popen[bytes]]:
    """Spawn the process that stops the test server once we are gone (see module docstring)."""
    read_fd, write_fd = os.pipe()  # both close-on-exec: no other child inherits the write end
    try:
        watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(read_fd), str(data_dir), str(base), str(PACKAGE_DIR)],
            pass_fds=[read_fd],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C / killpg of our group must not take it down first
            cwd="/",
        )
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    return write_fd, watchdog


def _new_guarded_directory(options: Mapping[str, Any]) -> tuple[Path, Path, int, subprocess.Popen[bytes]]:
    """A fresh ``/tmp/pgjobs-test-*`` directory and the watchdog that removes it (and stops its
    server) once this process is gone: (base, data dir, the pipe's write end, the watchdog)."""
    user = server_user(option(options, "RUN_AS"))
    find_binaries(option(options, "BIN_DIR"))  # fail early, before creating anything
    tmp = "/tmp" if Path("/tmp").is_dir() else None  # short: the socket path must fit
    base = Path(tempfile.mkdtemp(prefix="pgjobs-test-", dir=tmp))
    if user is not None:
        os.chmod(base, 0o711)  # our own fresh directory: let the server user traverse it
    data_dir = base / "data"
    try:
        write_fd, watchdog = _start_watchdog(data_dir, base)
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    return base, data_dir, write_fd, watchdog


def stop_and_remove(data_dir: Path, base: Path, mode: str = "fast") -> None:
    """Stop a test server and delete its directory, holding the start lock throughout.

    Holding the lock means an attached child cannot restart the server between the stop and the
    removal; one that takes the lock afterwards finds the owner gone and gives up.
    """
    config = ServerConfig(data_dir=data_dir)
    try:
        with file_lock(config.lock_path, 30):
            stop_server(data_dir, mode=mode, timeout=30)
            shutil.rmtree(base, ignore_errors=True)
    except EmbeddedPostgresError:  # directory already gone, or a hung starter: stop regardless
        stop_server(data_dir, mode="immediate", timeout=30)
        shutil.rmtree(base, ignore_errors=True)


def stop_owned_test_server() -> None:
    """Stop and delete this process's test server (runs at exit; a no-op in forked children)."""
    global _owned
    with _state_lock:
        owned, _owned = _owned, None
    if owned is None or owned.pid != os.getpid():
        return
    try:
        stop_and_remove(owned.data_dir, owned.base)
    finally:
        if os.environ.get(ENV_TEST_DATA_DIR) == str(owned.data_dir):
            del os.environ[ENV_TEST_DATA_DIR]
            os.environ.pop(ENV_TEST_OWNER, None)
        os.close(owned.pipe_w)  # the watchdog finds nothing left to do and exits
        with contextlib.suppress(subprocess.TimeoutExpired):
            owned.watchdog.wait(timeout=30)


def server_for_test_mode(options: Mapping[str, Any]) -> ServerInfo:
    """This process's test server: the one it owns, the one its owner handed down, or a new one."""
    global _owned
    with _state_lock:
        if _owned is not None and _owned.pid == os.getpid():
            return ensure_server(make_config(options, _owned.data_dir, durable=False))
        inherited = os.environ.get(ENV_TEST_DATA_DIR)
        if inherited:  # a child of the owner: attach, restart at most, never initdb or stop
            owner = os.environ.get(ENV_TEST_OWNER, "")
            config = make_config(
                options,
                Path(inherited),
                durable=False,
                allow_init=False,
                owner_pid=int(owner) if owner.isdigit() else None,
            )
            return ensure_server(config)
        base, data_dir, write_fd, watchdog = _new_guarded_directory(options)
        _owned = _Owned(os.getpid(), base, data_dir, write_fd, watchdog)
        atexit.register(stop_owned_test_server)
        info = ensure_server(make_config(options, data_dir, durable=False))
        os.environ[ENV_TEST_DATA_DIR] = str(data_dir)
        os.environ[ENV_TEST_OWNER] = str(os.getpid())
        return info


def current_test_server() -> ServerInfo | None:
    """The running test server this process owns or inherited, or ``None``; never starts one."""
    with _state_lock:
        if _owned is not None and _owned.pid == os.getpid():
            return running_server(_owned.data_dir)
    inherited = os.environ.get(ENV_TEST_DATA_DIR)
    return running_server(Path(inherited)) if inherited else None


@contextlib.contextmanager
def throwaway_server(options: Mapping[str, Any] | None = None) -> Iterator[ServerConfig]:
    """A fresh cluster of the caller's own for the duration of the block, started, whatever this
    process's test server or ``DATABASE_URL`` is: for a test that stops or restarts a server,
    which it may do only to one it created. Yields its config (``ensure_server(config)`` gives
    its address, and starts it again after a stop). Stopped and removed when the block ends, and
    by the watchdog if this process dies first. Nothing is exported to child processes: they
    connect to the address they are given."""
    options = options or {}
    base, data_dir, write_fd, watchdog = _new_guarded_directory(options)
    config = make_config(options, data_dir, durable=False)
    try:
        ensure_server(config)
        yield config
    finally:
        try:
            stop_and_remove(data_dir, base)
        finally:
            os.close(write_fd)
            with contextlib.suppress(subprocess.TimeoutExpired):
                watchdog.wait(timeout=30)
