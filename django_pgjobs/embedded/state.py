"""Is a server running on a data directory, and where is its socket: read from ``postmaster.pid``.

Reading only, never starting or stopping: the engine asks on every new connection, the
``pgembedded`` command and the test watchdog ask too. A pid file may be stale (a SIGKILLed server)
or name a recycled pid, so the process itself is checked through ``/proc``.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path


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
