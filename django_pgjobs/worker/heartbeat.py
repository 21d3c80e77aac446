"""The heartbeat: a thread that does nothing but keep this process's leases alive.

Every beat is one statement for every held job (buffered, running, or finished and waiting for its
outcome to be written), fenced by claim token, on a connection of its own with a statement timeout.
A row another session has locked is skipped, not waited for, and tried again next beat.

The timeout policy lives here too: a running job past its handler's ``timeout`` is abandoned (no
longer extended, so its lease lapses and the sweeper takes it back).

The claim loop's watchdog stops the process (exit code 5) when for a whole lease every beat failed
(``failing_since``) or one beat has not come back (``beating_since``, a hung socket): the leases
are lost by then, and a process whose heartbeat cannot reach the database must not keep claiming.
The same thread keeps this process's row in the workers registry (:mod:`django_pgjobs.fleet`):
registered when it starts, pushed forward every interval whether or not jobs are held, so the admin
and ``jobstats`` see a live worker drop out a few intervals after it stops beating.

A process that was merely frozen (SIGSTOP, a long pause) was not beating and is not stopped: on
waking it beats again, and the fence refuses whatever it lost meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .. import fleet
from .connections import DB_ERRORS, WorkerConnection
from .inflight import InFlight, InFlightTable
from .outcome import safe_str

logger = logging.getLogger("django_pgjobs")


class Heartbeat:
    def __init__(
        self,
        table: InFlightTable,
        connection: WorkerConnection,
        interval: float,
        on_abandoned: Callable[[InFlight], None],
        stopped: threading.Event,
        registration: fleet.Registration | None = None,
    ) -> None:
        self.registration = registration
        self._registry_due = 0.0  # monotonic time of the next registry beat
        self.table = table
        self.conn = connection
        self.interval = interval
        self.on_abandoned = on_abandoned
        self._stopped = stopped
        self.now = threading.Event()  # beat at once (a job with a lease of its own arrived)
        self.beating_since: float | None = None  # a beat statement is on the wire since then
        self.failing_since: float | None = None  # every beat since then has failed

    def silent_for(self, now: float) -> float:
        """How long the heartbeat has been unable to extend leases (0 when it is fine or idle)."""
        since = min((t for t in (self.beating_since, self.failing_since) if t is not None), default=now)
        return now - since

    def run(self) -> None:
        self.beat_registry()
        while not self._stopped.is_set():
            held = self.table.to_heartbeat()
            interval = min([self.interval, *(e.lease / 3 for e in held), threading.TIMEOUT_MAX])
            if self.now.wait(interval):
                self.now.clear()
            if self._stopped.is_set():
                return
            self.beat()
            self.beat_registry()

    def beat_registry(self) -> None:
        """This process's row in the workers registry, at most once per interval."""
        now = time.monotonic()
        if self.registration is None or now < self._registry_due:
            return
        self._registry_due = now + self.interval
        try:
            self.conn.ensure()
            fleet.beat(
                self.conn.store,
                self.registration,
                live_seconds=fleet.LIVE_BEATS * self.interval,
                in_flight=len(self.table),
            )
        except DB_ERRORS as exc:
            logger.warning("could not update the workers registry (%s)", safe_str(exc).strip()[:200])
            self.conn.drop()
            self._registry_due = now  # try again at the next beat

    def beat(self) -> None:
        for entry in self.table.abandon_overdue(time.monotonic()):
            self.on_abandoned(entry)
        held = self.table.to_heartbeat()
        if not held:
            self.failing_since = None
            return
        sent = self.beating_since = time.monotonic()
        try:
            self.conn.ensure()
            result = self.conn.store.heartbeat([(e.id, e.token, e.lease) for e in held])
        except DB_ERRORS as exc:
            logger.warning("heartbeat failed (%s); will retry", safe_str(exc).strip()[:200])
            self.conn.drop()
            self.failing_since = self.failing_since or sent
            return
        finally:
            self.beating_since = None
        self.failing_since = None
        lease_of = {e.token: e.lease for e in held}
        self.table.extended({t: sent + lease_of[t] for t in result.extended})
        lost = self.table.lose(result.lost)
        if lost.running:
            logger.warning(
                "lost the lease of job(s) %s: they were taken back by the sweeper (this run's outcome "
                "will be refused)",
                sorted(e.id for e in lost.running),
            )
        if lost.dropped:
            logger.warning(
                "lost the lease of claimed-ahead job(s) %s before they started (taken back by the "
                "sweeper, another worker's now): forgotten here, never run by this process",
                sorted(e.id for e in lost.dropped),
            )
        for entry in self.table.request_cancel(result.cancel_requested):
            logger.info(
                "job %d %s was asked to stop by %s: its handler is told",
                entry.id,
                entry.claim.task,
                entry.cancel_signal.by or "an operator",
            )
        if result.busy:
            logger.info("%d job(s) locked by another session were not extended this beat", len(result.busy))
