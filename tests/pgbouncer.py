"""A PgBouncer of a test's own, in transaction pooling mode, in front of the test database.

Everything it uses is the test's: a temporary directory holding its config file, its user list,
its unix socket (no TCP port is opened, so nothing clashes with anything else on the machine)
and its log. It is a child process of the test, stopped at the end. PgBouncer refuses to run as
root, so as root it runs as the embedded server's unprivileged user (``nobody``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import psycopg

from django_pgjobs.embedded import server
from tests.other_server import Address
from tests.processes import wait_for

#: Only names the socket file (``.s.PGSQL.<port>``) in the private directory.
PORT = 6432


def find_pgbouncer() -> str | None:
    """``$PGJOBS_PGBOUNCER``, else ``pgbouncer`` on ``$PATH`` or in ``/usr/sbin`` (Debian's)."""
    configured = os.environ.get("PGJOBS_PGBOUNCER")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")


def _quoted(value: Any) -> str:
    return "'" + str(value).replace("'", "''") + "'"


class PgBouncer:
    """``pgbouncer <dir>/pgbouncer.ini`` pooling ``target`` with at most ``pool_size`` server
    sessions; clients reach it at :attr:`address` (same database name, any user in the list)."""

    def __init__(self, executable: str, target: Address, pool_size: int) -> None:
        self.target = target
        self.pool_size = pool_size
        self.dir = Path(tempfile.mkdtemp(prefix="pgjb-", dir="/tmp" if Path("/tmp").is_dir() else None))
        self.user = server.server_user()  # None unless we are root
        connect = " ".join(
            f"{key}={_quoted(value)}"
            for key, value in (
                ("host", target.host),
                ("port", target.port),
                ("dbname", target.dbname),
                ("user", target.user),
                ("password", target.password),
            )
            if value not in ("", None)
        )
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"{target.dbname} = {connect}\n\n"
            "[pgbouncer]\n"
            "listen_addr =\n"  # unix socket only
            f"listen_port = {PORT}\n"
            f"unix_socket_dir = {self.dir}\n"
            "auth_type = trust\n"
            f"auth_file = {self.dir / 'userlist.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            "max_client_conn = 500\n"
            f"admin_users = {target.user}\n"
        )
        (self.dir / "userlist.txt").write_text(f'"{target.user}" ""\n')
        if self.user is not None:
            for path in (self.dir, *self.dir.iterdir()):
                os.chown(path, self.user.uid, self.user.gid)
        self.log_path = self.dir / "pgbouncer.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [executable, str(self.dir / "pgbouncer.ini")],
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **(self.user.popen_kwargs() if self.user else {}),
            )
        self.address = Address(host=str(self.dir), port=PORT, dbname=target.dbname, user=target.user)
        wait_for(self._ready, 30, "PgBouncer to accept connections")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"pgbouncer exited with {self.proc.returncode}:\n{self.log()}")
        try:
            self.admin("SHOW VERSION")
        except psycopg.OperationalError:
            return False
        return True

    def admin(self, command: str) -> list[dict[str, Any]]:
        """A command of PgBouncer's admin console (``SHOW POOLS``...), rows as dicts."""
        with psycopg.connect(
            host=str(self.dir), port=PORT, dbname="pgbouncer", user=self.target.user, autocommit=True
        ) as conn:
            cursor = conn.execute(command)
            names = [c.name for c in cursor.description or []]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def sessions(self, kind: str) -> list[dict[str, Any]]:
        """``SHOW CLIENTS`` or ``SHOW SERVERS`` rows of the pooled database."""
        return [row for row in self.admin(f"SHOW {kind}") if row["database"] == self.target.dbname]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM (immediate shutdown: the test has stopped its clients), SIGKILL if it hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)
