"""The listener: ``LISTEN`` on a connection of its own, waking the claim loop when a queue this
worker serves gets a due job. Polling goes on regardless, so a lost notification only delays a job
by the poll interval.

Behind PgBouncer in transaction pooling mode ``LISTEN`` is accepted but nothing ever arrives (the
session that listens is not the one the client talks to between transactions). So after listening
the listener notifies itself once and waits for that probe: if it never comes, it says so in the
log and stops, leaving the worker to polling instead of silently pretending.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable

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
    ) -> None:
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
        probe = f"pgjobs-probe-{secrets.token_hex(8)}"
        raw.execute("SELECT pg_notify(%s, %s)", (self.channel, probe))
        heard = any(n.payload == probe for n in raw.notifies(timeout=PROBE_SECONDS, stop_after=1))
        if not heard:
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
                if note.payload.startswith("pgjobs-probe-"):
                    continue
                if self.queues is None or note.payload in self.queues:
                    self.wake()
