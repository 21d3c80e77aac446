"""One cluster's life: initdb, start and stop of the server on a data directory.

Server
    Unix socket only (``listen_addresses=''``): no TCP, no port conflicts, nothing on the network.
    The socket lives in the data directory (mode 0700), or in a short private ``mkdtemp`` directory
    when that path would be too long for ``sun_path``; clients find it in ``postmaster.pid``. With
    the socket private, ``trust`` authentication is safe. initdb runs with ``TZ=UTC``, UTF-8, the
    libc provider and the ``C.UTF-8`` locale (``C`` when the system lacks it).

Root
    initdb and the server run as the server user (``users.py``); only the data directory, which
    we create, is chowned to it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .binaries import Binaries, find_binaries, usable_binaries
from .defaults import DEFAULT_PORT, DEFAULT_START_TIMEOUT, ENV_DATA_DIR, ENV_RUN_AS, LOG_NAME
from .errors import DATA_DIR_HINT, EmbeddedPostgresError
from .locking import POLL_SECONDS, file_lock
from .state import ServerInfo, pid_alive, postmaster_alive, read_server_info, running_server
from .users import ServerUser, server_user, user_can

# sun_path is 108 bytes on Linux, 104 on macOS (both including the NUL).
_MAX_SOCKET_PATH = 103


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """How to run one server. ``durable=False`` (tests) trades crash safety for speed."""

    data_dir: Path
    bin_dir: str | None = None
    port: int = DEFAULT_PORT
    run_as: str | None = None
    durable: bool = True
    allow_init: bool = True
    owner_pid: int | None = None  # attach mode: refuse to (re)start once the owner has exited
    start_timeout: float = DEFAULT_START_TIMEOUT
    project: str | None = None  # development mode: whose server this is (``pgembedded status``)

    @property
    def lock_path(self) -> Path:
        """Next to, not inside, the data directory: initdb wants an empty directory."""
        return self.data_dir.with_name(self.data_dir.name + ".lock")


def _child_env() -> dict[str, str]:
    """Our environment minus libpq variables (``PGDATA``, ``PGHOST``...) that would interfere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(TZ="UTC", LC_ALL="C", LANG="C")
    return env


def _run(
    args: list[str],
    user: ServerUser | None,
    timeout: float,
    what: str,
    log: tuple[Path, int] | None = None,
) -> None:
    """Run a PostgreSQL program as the server user; on failure raise with its output.

    Output goes to temporary files, not pipes: pg_ctl's backgrounded postmaster could otherwise
    hold a pipe open and hang us.
    """
    kwargs = user.popen_kwargs() if user else {}
    with tempfile.TemporaryFile("w+") as out:
        try:
            result = subprocess.run(
                args,
                cwd="/",
                env=_child_env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
                **kwargs,
            )
            failed = result.returncode != 0
        except subprocess.TimeoutExpired:
            failed = True
        if failed:
            out.seek(0)
            detail = out.read().strip()
            if log is not None:  # only what this attempt wrote to the server log
                with contextlib.suppress(OSError), log[0].open("rb") as f:
                    f.seek(log[1])
                    tail = f.read().decode(errors="replace")[-4000:]
                    detail += f"\n--- {log[0]} ---\n{tail}"
            raise EmbeddedPostgresError(f"{what} failed: {shlex.join(args)}\n{detail}", detail)


def _prepare_data_dir(config: ServerConfig, user: ServerUser | None) -> None:
    """Create the data directory (0700) and, as root, hand *only it* to the server user."""
    data_dir = config.data_dir
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    if not data_dir.exists():
        data_dir.mkdir(mode=0o700)
    if user is not None:
        st = data_dir.stat()
        if st.st_uid != user.uid:
            if (data_dir / "PG_VERSION").exists():
                raise EmbeddedPostgresError(
                    f"{data_dir} belongs to uid {st.st_uid}, not to {user.name!r} ({user.uid}); "
                    f"set {ENV_RUN_AS} to its owner or use another data directory"
                )
            os.chown(data_dir, user.uid, user.gid)
        if not user_can(user, ("x", data_dir), ("w", data_dir)):
            raise EmbeddedPostgresError(
                f"user {user.name!r} cannot reach {data_dir} (a parent directory is private); "
                f"choose a data directory under a world-traversable path with {ENV_DATA_DIR}"
            )


def _initdb(config: ServerConfig, binaries: Binaries, user: ServerUser | None) -> None:
    """initdb: UTF-8, libc provider, ``C.UTF-8`` if the system has it, ``TZ=UTC``, trust auth."""
    base = [
        str(binaries.path("initdb")),
        "-D",
        str(config.data_dir),
        "-U",
        "postgres",
        "--auth=trust",
        "--encoding=UTF8",
        "--locale-provider=libc",
        "--no-instructions",
    ]
    if not config.durable:
        base.append("--no-sync")
    try:
        _run([*base, "--locale=C.UTF-8"], user, config.start_timeout, "initdb")
    except EmbeddedPostgresError as exc:
        # Only initdb's own complaint ('invalid locale name "C.UTF-8"'): the command line, and
        # initdb's progress output, name the locale whatever went wrong.
        if "invalid locale" not in exc.output:
            raise
        # initdb emptied the directory again; plain C is available everywhere.
        _run([*base, "--locale=C"], user, config.start_timeout, "initdb")


def _socket_dir(config: ServerConfig, user: ServerUser | None) -> Path:
    """The data directory when the socket path fits ``sun_path``, else a short private dir."""
    name = f".s.PGSQL.{config.port}"
    if len(os.fsencode(str(config.data_dir / name))) <= _MAX_SOCKET_PATH:
        return config.data_dir
    short = Path(tempfile.mkdtemp(prefix="pgj-", dir="/tmp" if Path("/tmp").is_dir() else None))
    if user is not None:
        os.chown(short, user.uid, user.gid)
    return short


def _clear_stale(config: ServerConfig) -> None:
    """Handle a ``postmaster.pid`` left by an unclean stop, or wait out a server mid-start/stop.

    PostgreSQL itself ignores a pid file whose pid is dead, but refuses one whose pid was recycled
    by some other process; we remove it (and the socket lock) when the pid is not our postmaster.
    """
    pid_file = config.data_dir / "postmaster.pid"
    deadline = time.monotonic() + config.start_timeout
    while True:
        try:
            first = pid_file.read_text().split("\n", 1)[0]
        except FileNotFoundError:
            return
        info = read_server_info(config.data_dir)
        if not first.strip().isdigit() or not postmaster_alive(int(first), config.data_dir):
            pid_file.unlink(missing_ok=True)
            if info is not None:
                remove_socket(info.socket_dir, info.socket_path, config.data_dir)
            return
        if info is not None and info.status == "ready" and info.socket_path.exists():
            return
        if time.monotonic() > deadline:
            raise EmbeddedPostgresError(
                f"a postgres process ({first.strip()}) on {config.data_dir} neither became ready "
                f"nor exited within {config.start_timeout:.0f}s"
            )
        time.sleep(POLL_SECONDS)


def _start(config: ServerConfig, binaries: Binaries, user: ServerUser | None) -> ServerInfo:
    socket_dir = _socket_dir(config, user)
    options = ["-h", "", "-k", str(socket_dir), "-p", str(config.port)]
    if not config.durable:
        options += ["-c", "fsync=off", "-c", "synchronous_commit=off"]
        options += ["-c", "full_page_writes=off"]
    log = config.data_dir / LOG_NAME
    timeout = config.start_timeout
    # pg_ctl -w waits (bounded by -t) for postmaster.pid to say "ready" and daemonises the
    # postmaster in its own session: Ctrl-C on runserver does not stop the shared server.
    args = [str(binaries.path("pg_ctl")), "start", "-D", str(config.data_dir), "-w", "-s"]
    args += ["-t", str(max(1, int(timeout))), "-l", str(log), "-o", shlex.join(options)]
    deadline = time.monotonic() + timeout
    while True:
        try:
            offset = log.stat().st_size if log.exists() else 0
            what = "starting the embedded PostgreSQL server"
            _run(args, user, timeout + 10, what, (log, offset))
            break
        except EmbeddedPostgresError as exc:
            # After a SIGKILLed postmaster its children take a moment to notice and detach from
            # shared memory; until then a new postmaster refuses to start: retry that only.
            if time.monotonic() > deadline or "pre-existing shared memory block" not in exc.output:
                remove_socket(socket_dir, None, config.data_dir)  # a short dir made for this start
                raise
            time.sleep(0.1)
    while True:
        info = running_server(config.data_dir)
        if info is not None:
            return info
        if time.monotonic() > deadline:
            raise EmbeddedPostgresError(f"server on {config.data_dir} started but is not ready")
        time.sleep(POLL_SECONDS)


def ensure_server(config: ServerConfig) -> ServerInfo:
    """Return the running server on ``config.data_dir``, starting (and initdb-ing) it if needed.

    Lock-free when it already runs (the common, per-connection case); otherwise serialised by
    the file lock so concurrent starters end up sharing one server.
    """
    info = running_server(config.data_dir)
    if info is not None:
        return info
    binaries = find_binaries(config.bin_dir)
    user = server_user(config.run_as)
    try:
        return _ensure_locked(config, binaries, user)
    except OSError as exc:  # an unusable data directory: say which, and how to choose another
        raise EmbeddedPostgresError(f"{config.data_dir}: {exc}; {DATA_DIR_HINT}") from exc


def _ensure_locked(config: ServerConfig, binaries: Binaries, user: ServerUser | None) -> ServerInfo:
    if config.allow_init:  # attaching processes never create anything
        config.data_dir.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(config.lock_path, config.start_timeout):
        info = running_server(config.data_dir)
        if info is not None:
            return info
        if config.owner_pid is not None and not pid_alive(config.owner_pid):
            raise EmbeddedPostgresError(
                f"the test process (pid {config.owner_pid}) that owned the embedded server on "
                f"{config.data_dir} has exited"
            )
        version_file = config.data_dir / "PG_VERSION"
        if not version_file.exists() and not config.allow_init:
            raise EmbeddedPostgresError(f"no PostgreSQL data directory at {config.data_dir}")
        binaries = usable_binaries(binaries, user)
        _prepare_data_dir(config, user)
        if not version_file.exists():
            _initdb(config, binaries, user)
        else:
            found = version_file.read_text().strip()
            if found != str(binaries.major):
                raise EmbeddedPostgresError(
                    f"{config.data_dir} holds a PostgreSQL {found} cluster but the binaries are "
                    f"{binaries.version}; use another data directory ({ENV_DATA_DIR})"
                )
        _clear_stale(config)
        info = running_server(config.data_dir)
        return info if info is not None else _start(config, binaries, user)


def _wait_exit(pid: int, data_dir: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while postmaster_alive(pid, data_dir):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_SECONDS)
    return True


_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}


def stop_server(data_dir: Path, mode: str = "fast", timeout: float = 60.0) -> bool:
    """Stop the server on ``data_dir``; ``False`` if none was running. Escalates if it hangs.

    Signals rather than ``pg_ctl stop``: root may signal the server user's postmaster directly,
    and the watchdog needs no binaries. ``fast`` disconnects clients, ``immediate`` skips the
    shutdown checkpoint (fine for throwaway test data).
    """
    data_dir = Path(data_dir)
    info = read_server_info(data_dir)
    if info is None or not postmaster_alive(info.pid, data_dir):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(info.pid, _SIGNALS[mode])
    if not _wait_exit(info.pid, data_dir, timeout):
        with contextlib.suppress(ProcessLookupError):
            os.kill(info.pid, signal.SIGQUIT)
        if not _wait_exit(info.pid, data_dir, 10):
            with contextlib.suppress(ProcessLookupError):
                os.kill(info.pid, signal.SIGKILL)
            _wait_exit(info.pid, data_dir, 10)
    if info.socket_dir != data_dir:
        remove_socket(info.socket_dir, info.socket_path, data_dir)
    return True


def remove_socket(socket_dir: Path, socket_path: Path | None, data_dir: Path) -> None:
    """Remove a stopped (or dead) server's socket and its lock file and, when it lives in one of
    our short private directories (``pgj-*``), that directory too if this emptied it."""
    if socket_path is not None:
        for leftover in (socket_path, Path(f"{socket_path}.lock")):
            with contextlib.suppress(OSError):
                leftover.unlink()
    if socket_dir != data_dir and socket_dir.name.startswith("pgj-"):
        with contextlib.suppress(OSError):
            socket_dir.rmdir()
