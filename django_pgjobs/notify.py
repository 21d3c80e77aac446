"""Wake-ups for idle workers: ``NOTIFY`` after commit, coalesced per queue, on a connection of its own.

Why not ``pg_notify`` inside the enqueue: PostgreSQL serialises the commits of every transaction
that notified (one lock on the notification queue, held through commit), so 16 concurrent
enqueuers fell from ~2,000 to ~400 jobs/s. Here the enqueue only registers an after-commit hook
(a rolled-back enqueue wakes nobody); the hook adds the queue name to a set, and one thread per
process sends ``pg_notify`` for every queue in the set from its own autocommit connection. While
one notification is on the wire, further enqueues only grow the set, so a burst of a thousand
enqueues costs a handful of notifications, and no enqueue ever waits for one.

While enqueues stream in, each queue is notified at most once per :data:`COALESCE_SECONDS` per
process: the first enqueue after a quiet spell is sent at once (an idle worker wakes in a
millisecond or two), later ones within the window are folded into one notification at its end. A
busy worker does not need them (it claims again as soon as a slot frees), and one NOTIFY per enqueue
doubled the transactions the server ran for a stream of single enqueues.

The store does not even ask for a wake-up when the queue has a backlog (``store.BACKLOG_SECONDS``):
its workers are busy and claim again as soon as a slot frees.

A lost notification (this process dies before sending, the connection drops) only delays a job by
the workers' poll interval: polling is always on as the backstop. With ``PGJOBS["LISTEN"] = False``
nothing is sent at all.

The connection is closed after :data:`LINGER_SECONDS` without a wake-up to send, so an idle web
process holds no extra connection, and a test run's ``DROP DATABASE`` (which waits up to 5 s for
sessions to leave) is never refused because of it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

from django.db import connections, transaction

from .conf import get_settings

logger = logging.getLogger("django_pgjobs")

NOTIFY = "SELECT pg_notify(%s, q) FROM unnest(%s::text[]) AS q"
#: How long the notifier keeps its connection open with nothing to send.
LINGER_SECONDS = 1.0
#: Shortest gap between two notifications of one queue from one process.
COALESCE_SECONDS = 0.005


class Notifier:
    """One per process (re-created in a forked child); see the module docstring."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._changed = threading.Condition()
        self._pending: dict[str, set[str]] = {}  # database alias -> queues to wake
        self._last_sent: dict[tuple[str, str], float] = {}  # (alias, queue) -> monotonic time
        self._sending = False
        self._thread: threading.Thread | None = None
        self._connections: dict[str, Any] = {}
        self.sent = 0  # notifications sent (for tests and the benchmark)

    def wake_after_commit(self, alias: str, queues: Iterable[str]) -> None:
        """Wake the workers of ``queues`` once the current transaction on ``alias`` commits (at
        once outside a transaction); never if it rolls back."""
        if not get_settings().LISTEN:
            return
        names = frozenset(queues)
        if names:
            transaction.on_commit(lambda: self.wake(alias, names), using=alias)

    def wake(self, alias: str, queues: Iterable[str]) -> None:
        with self._changed:
            self._pending.setdefault(alias, set()).update(queues)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="pgjobs-notifier", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything pending was sent (tests; a worker before it exits)."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._pending and not self._sending, timeout)

    def _run(self) -> None:
        while True:
            with self._changed:
                batch = self._take_due()
                while not batch:
                    if self._pending:  # only queues notified less than COALESCE_SECONDS ago
                        self._changed.wait(self._until_due())
                    elif not self._changed.wait(LINGER_SECONDS) and not self._pending:
                        # Idle: let the connections go, then sleep until there is something to send.
                        for alias in list(self._connections):
                            self._drop(alias)
                        self._changed.wait_for(lambda: bool(self._pending))
                    batch = self._take_due()
                self._sending = True
            try:
                for alias, queues in batch.items():
                    self._send(alias, sorted(queues))
            finally:
                with self._changed:
                    self._sending = False
                    self._changed.notify_all()

    def _take_due(self) -> dict[str, set[str]]:
        """Move the pending queues that may be notified now out of ``_pending`` (lock held)."""
        now = time.monotonic()
        due: dict[str, set[str]] = {}
        for alias, queues in list(self._pending.items()):
            ready = {q for q in queues if now - self._last_sent.get((alias, q), -1e9) >= COALESCE_SECONDS}
            if ready:
                due[alias] = ready
                queues -= ready
                for q in ready:
                    self._last_sent[(alias, q)] = now
            if not queues:
                del self._pending[alias]
        return due

    def _until_due(self) -> float:
        now = time.monotonic()
        return max(
            0.0,
            min(
                self._last_sent.get((alias, q), -1e9) + COALESCE_SECONDS - now
                for alias, queues in self._pending.items()
                for q in queues
            ),
        )

    def _send(self, alias: str, queues: list[str]) -> None:
        channel = get_settings().NOTIFY_CHANNEL
        for attempt in (1, 2):  # one reconnect: a server restart drops the idle connection
            try:
                conn = self._connections.get(alias)
                if conn is None or conn.closed:
                    wrapper = connections[alias]
                    conn = wrapper.get_new_connection(wrapper.get_connection_params())
                    conn.autocommit = True
                    # A transaction that only notifies needs no durability: do not wait for the
                    # WAL flush while holding the notification queue's lock.
                    conn.execute("SET synchronous_commit = off")
                    self._connections[alias] = conn
                conn.execute(NOTIFY, (channel, queues))
                self.sent += 1
                return
            except Exception as exc:
                self._drop(alias)
                if attempt == 2:
                    # Polling picks the jobs up; a wake-up is an optimisation, never a guarantee.
                    logger.warning(
                        "could not send wake-up for queues %s (%s)", queues, str(exc).strip()[:200]
                    )

    def _drop(self, alias: str) -> None:
        conn = self._connections.pop(alias, None)
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass


_notifier = Notifier()


def notifier() -> Notifier:
    """This process's notifier (a forked child gets a fresh one: threads do not survive fork)."""
    global _notifier
    if _notifier._pid != os.getpid():
        _notifier = Notifier()
    return _notifier
