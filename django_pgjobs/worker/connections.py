"""Database connections the worker's own threads use (never the handlers' connections).

Each internal thread (claim loop, acknowledger, heartbeat) owns one, so a statement of one never
waits behind another's, and each is bounded: one stuck statement used to stop every lease.

* TCP keepalives and ``tcp_user_timeout`` (client side, so also through a pooler): a black-holed
  connection fails within seconds instead of hanging for the kernel's 15 minutes;
* ``statement_timeout`` and ``lock_timeout`` per thread, set for the session on direct connections
  only (a session ``SET`` leaks to other clients through PgBouncer's transaction pooling);
* ``application_name`` ``pgjobs <worker> <role>`` (unless ``PGAPPNAME`` names the process), so
  ``pg_stat_activity`` says who is who.

Handlers keep Django's ordinary per-thread connections, with the project's settings untouched:
a report that runs for ten minutes is not this module's business.
"""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, InterfaceError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ..store import Store

logger = logging.getLogger("django_pgjobs")

DB_ERRORS = (DatabaseError, InterfaceError)


@dataclass(frozen=True)
class Bounds:
    statement_timeout: float
    lock_timeout: float


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


class WorkerConnection:
    """A private connection (its own Django wrapper) for one internal thread, and its Store."""

    def __init__(self, alias: str, worker: str, role: str, bounds: Bounds, tcp_timeout: float) -> None:
        self.alias = alias
        self.role = role
        self.bounds = bounds
        base = connections[alias]
        settings = copy.deepcopy(base.settings_dict)
        options: dict[str, Any] = settings.setdefault("OPTIONS", {})
        host = settings.get("HOST") or ""
        if host and not str(host).startswith("/"):  # TCP: keepalives mean something
            options.setdefault("keepalives", 1)
            options.setdefault("keepalives_idle", max(1, int(tcp_timeout / 2)))
            options.setdefault("keepalives_interval", max(1, int(tcp_timeout / 6)))
            options.setdefault("keepalives_count", 3)
            options.setdefault("tcp_user_timeout", _ms(tcp_timeout))
        if not os.environ.get("PGAPPNAME"):  # an operator's own name for the process wins
            options.setdefault("application_name", f"pgjobs {worker} {role}"[:63])
        options.setdefault("connect_timeout", max(2, int(tcp_timeout)))
        self.wrapper: BaseDatabaseWrapper = type(base)(settings, alias)
        # Built by the main thread, used only by the thread it was made for.
        self.wrapper.inc_thread_sharing()
        self.store = Store(alias, wrapper=self.wrapper)
        self._bounded_for: Any = None

    def ensure(self) -> None:
        """Connect if needed, and bound the session (once per physical connection)."""
        self.wrapper.ensure_connection()
        raw = self.wrapper.connection
        if raw is not self._bounded_for:
            self._bounded_for = raw
            if _direct(raw):
                with raw.cursor() as cursor:
                    cursor.execute(f"SET statement_timeout = {_ms(self.bounds.statement_timeout)}")
                    cursor.execute(f"SET lock_timeout = {_ms(self.bounds.lock_timeout)}")

    def drop(self) -> None:
        """Forget a broken connection; the next ``ensure`` reconnects."""
        try:
            self.wrapper.close()
        except DB_ERRORS:
            pass
        except Exception:  # a socket in a state psycopg cannot even close
            logger.debug("closing the %s connection failed", self.role, exc_info=True)
        self._bounded_for = None


def _direct(raw: Any) -> bool:
    """Whether this connection reaches the server itself rather than a pooler (see
    :class:`django_pgjobs.store._Preparing`): session settings are safe only then."""
    try:
        with raw.cursor() as cursor:
            port = cursor.execute("SELECT current_setting('port')").fetchone()
        return bool(port) and int(port[0]) == raw.info.port
    except Exception:
        return False
