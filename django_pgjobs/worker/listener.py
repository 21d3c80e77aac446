"""The listener: ``LISTEN`` on a connection of its own, waking the claim loop when a queue this
worker serves gets a due job. Polling goes on regardless, so a lost notification only delays a job
by the poll interval.

Behind PgBouncer in transaction pooling mode ``LISTEN`` is accepted but nothing ever arrives (the
session that listens is not the one the client talks to between transactions). So after listening
the listener also listens on a private channel, sends a probe to it from a second, short-lived
connection and waits for it: if it never comes, it says so in the log and stops, leaving the worker
to polling instead of silently pretending. (A probe sent on the listening connection itself proves
nothing: PgBouncer may run it on the very server session that listens, which hears its own
notification, and the pooler then closes the listener mid-wait.)
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from ..queue_control import QUEUES_CHANGED
from ..store import CANCEL_REQUESTED
from .connections import WorkerConnection
from .outcome import safe_str

logger = logging.getLogger("django_pgjobs")

#: How long the probe may take to come back before LISTEN is declared deaf here.
PROBE_SECONDS = 5.0


class Listener:
    def __init__(
        self,
        connection: WorkerConnection,
        channel: str,
        queues: frozenset[str] | None,
        wake: Callable[[], None],
        stopped: threading.Event,
        poll_interval: float,
        on_cancel: Callable[[], None] = lambda: None,
        on_queues_changed: Callable[[], None] = lambda: None,
    ) -> None:
        self.on_cancel = on_cancel
        self.on_queues_changed = on_queues_changed
        self.conn = connection
        self.channel = channel
        self.queues = queues
        self.wake = wake
        self._stopped = stopped
        self.poll_interval = poll_interval
        self.deaf = False

    def run(self) -> None:
        failures = 0
        while not self._stopped.is_set() and not self.deaf:
            try:
                self._listen()
                failures = 0
            except Exception as exc:
                if self._stopped.is_set():
                    break
                failures += 1
                logger.warning("listener connection failed (%s); reconnecting", safe_str(exc).strip()[:200])
                self._stopped.wait(min(5.0, 0.1 * 2 ** min(failures, 6)))
            finally:
                self.conn.drop()

    def _listen(self) -> None:
        self.conn.wrapper.ensure_connection()
        raw = self.conn.wrapper.connection
        raw.autocommit = True
        raw.execute(f'LISTEN "{self.channel}"')
        if not self._probe(raw):
            self.deaf = True
            logger.warning(
                "LISTEN on channel %r receives no notifications on this connection (a connection "
                "pooler in transaction mode, such as PgBouncer?): new jobs are found by polling every "
                "%.2fs; run with --no-listen (or PGJOBS['LISTEN'] = False) to skip this check",
                self.channel,
                self.poll_interval,
            )
            return
        logger.info("listening for notifications on channel %r", self.channel)
        self.wake()  # anything enqueued while we were not listening
        while not self._stopped.is_set():
            for note in raw.notifies(timeout=1.0):
                if note.channel != self.channel:
                    continue
                if note.payload == CANCEL_REQUESTED:
                    self.on_cancel()  # a held job may have been asked to stop: heartbeat now
                elif note.payload == QUEUES_CHANGED:
                    self.on_queues_changed()  # a queue was paused or resumed
                elif self.queues is None or note.payload in self.queues:
                    self.wake()

    def _probe(self, raw: Any) -> bool:
        """Whether a notification sent by another session reaches this one."""
        private = f"pgjobs_probe_{secrets.token_hex(8)}"
        raw.execute(f'LISTEN "{private}"')
        params = self.conn.wrapper.get_connection_params()
        sender = self.conn.wrapper.get_new_connection(params)
        try:
            sender.autocommit = True
            sender.execute("SELECT pg_notify(%s, 'probe')", (private,))
        finally:
            sender.close()
        deadline = time.monotonic() + PROBE_SECONDS
        while (left := deadline - time.monotonic()) > 0:
            # Wake-ups on the main channel may arrive first; they are not lost (polling follows).
            if any(n.channel == private for n in raw.notifies(timeout=left)):
                return True
        return False
