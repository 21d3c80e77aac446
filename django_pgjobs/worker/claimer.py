"""The claim loop (the worker's main thread): promote, claim, sweep now and then, and decide when a
burst or ``--max-jobs`` run is over.

Claims are sized to room, never one statement per job: free executor slots plus a bounded buffer
of jobs claimed ahead, which executors take without waiting for a round trip. The buffer is only
used while handlers are short (a claimed-ahead job holds its place while it waits; with long
handlers another worker should have it). Buffered jobs are heartbeated like running ones and are
released without charging an attempt on shutdown.

Paused queues (:mod:`django_pgjobs.queue_control`) are re-read every ``REFRESH_SECONDS`` and
left out of the claim: a worker of named queues drops them; a worker of every queue claims from the
queues that have ready jobs, less the paused ones (one loose index scan), while any is paused.

Queues named with a limit (``-q mail:4``) are claimed with a quota each: never more of their jobs
held here (buffered or running) than the limit. Several queues are claimed in one statement, in
priority order across them.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from django.utils import timezone

from .. import queue_control
from ..exceptions import UnknownTask
from ..periodic import CHECK_SECONDS, Ticker
from ..registry import JobHandler, get_handler
from ..store import Claim
from .acknowledger import Acknowledger
from .connections import DB_ERRORS, WorkerConnection
from .heartbeat import Heartbeat
from .inflight import InFlight, InFlightTable, JobState
from .options import WorkerOptions
from .outcome import safe_str

logger = logging.getLogger("django_pgjobs")

#: Claim ahead (buffer up to ``concurrency`` jobs) only while handlers average less than this.
PREFETCH_BELOW_SECONDS = 0.1
#: Handlers this short (a few milliseconds) may have a deeper buffer: claims of a few jobs would
#: each cost a round trip for very little work.
DEEP_PREFETCH_BELOW_SECONDS = 0.005
DEEP_PREFETCH = 64
#: Promotion batch size; a full batch means more are due at once.
PROMOTE_BATCH = 1000
#: The longest the loop waits at once: any finite poll interval is valid (a huge one means "rely on
#: notifications"), but ``Event.wait`` raises OverflowError past this.
MAX_WAIT_SECONDS = threading.TIMEOUT_MAX


class ClaimLoop:
    def __init__(
        self,
        *,
        options: WorkerOptions,
        name: str,
        table: InFlightTable,
        connection: WorkerConnection,
        acknowledger: Acknowledger,
        heartbeat: Heartbeat,
        lease: float,
        poll_interval: float,
        sweep_interval: float,
        stopping: threading.Event,
        wake: threading.Event,
        sweep: Callable[[], None],
        progress: Callable[[], None],
        ticker: Ticker | None = None,
    ) -> None:
        self.ticker = ticker
        self.options = options
        self.name = name
        self.table = table
        self.conn = connection
        self.ack = acknowledger
        self.heartbeat = heartbeat
        self.lease = lease
        self.poll_interval = poll_interval
        self.sweep_interval = sweep_interval
        self.stopping = stopping
        self.wake = wake
        self.sweep = sweep
        self.progress = progress
        self.concurrency = options.concurrency
        self.average_run = 1.0  # seconds, moving average of handler run times (starts cautious)
        self.exit_code = 0
        self._reconcile = False  # a claim failed in flight: release what it may have claimed
        self.paused: frozenset[str] = frozenset()
        self._paused_read_at = -1e9  # monotonic

    # -- capacity -----------------------------------------------------------------------------------
    def observed(self, duration: float) -> None:
        """A handler ran for ``duration`` seconds (feeds the claim-ahead decision)."""
        self.average_run += (duration - self.average_run) * 0.05

    def prefetch(self) -> int:
        """How many jobs to hold claimed ahead of the executors, from how long handlers take."""
        if self.average_run < DEEP_PREFETCH_BELOW_SECONDS:
            return max(self.concurrency, DEEP_PREFETCH)
        return self.concurrency if self.average_run < PREFETCH_BELOW_SECONDS else 0

    def room(self) -> int:
        counts = self.table.counts()
        buffered, running = counts[JobState.BUFFERED], counts[JobState.RUNNING]
        prefetch = self.prefetch()
        capacity = self.concurrency + prefetch
        room = capacity - buffered - running
        # Outcomes waiting for the database count against claiming once there are more of them
        # than the capacity: a slow or absent database must not let finished work pile up.
        room -= max(0, counts[JobState.FINISHED] - capacity)
        if self.options.max_jobs is not None:
            room = min(room, self.options.max_jobs - self.table.claimed_total)
        if buffered and room < max(1, capacity // 4):
            return 0  # the buffer still feeds the executors: claim in batches worth a round trip
        return max(room, 0)

    def quotas(self, room: int) -> dict[str, int] | None:
        if not self.options.queue_limits:
            return None
        held = self.table.held_by_queue()
        return {q: max(0, limit - held.get(q, 0)) for q, limit in self.options.queue_limits.items()}

    # -- the loop -----------------------------------------------------------------------------------
    def run(self) -> None:
        next_sweep = time.monotonic() + random.uniform(0, self.sweep_interval)
        next_promote = 0.0
        failures = 0
        while not self.stopping.is_set():
            self.wake.clear()
            if self._watchdog():
                return
            now = time.monotonic()
            if self.ticker is not None:
                self._tick()
            if now >= next_promote:
                next_promote = self._promote()
            writes_before = self.ack.writes
            claimed: list[Claim] = []
            room = self.room()
            if room > 0 or self._reconcile:
                try:
                    self.conn.ensure()
                    if self._reconcile:
                        self._release_unknown()
                    if room > 0:
                        claimed = self._claim(room)
                    failures = 0
                except DB_ERRORS as exc:
                    failures += 1
                    self._reconcile = True  # it may have committed with its reply lost
                    self._trouble("claim", exc, failures)
                    continue
            if claimed and len(claimed) == room:
                continue  # maybe more is ready: claim again once there is room
            if self._finished(claimed, writes_before):
                return
            if time.monotonic() >= next_sweep:
                self.sweep()
                next_sweep = time.monotonic() + self.sweep_interval * random.uniform(0.8, 1.2)
            self.progress()
            wait = min(self.poll_interval, next_promote - time.monotonic())
            if self.paused:  # notice a resume within about REFRESH_SECONDS even without a wake-up
                wait = min(wait, queue_control.REFRESH_SECONDS)
            if self.ticker is not None:  # periodic ticks are enqueued on time
                wait = min(wait, CHECK_SECONDS)
            self.wake.wait(min(max(0.0, wait), MAX_WAIT_SECONDS))

    def _finished(self, claimed: list[Claim], writes_before: int) -> bool:
        max_jobs = self.options.max_jobs
        if max_jobs is not None and self.table.claimed_total >= max_jobs and not len(self.table):
            return True
        # Burst ends only when nothing is held or unwritten and a claim that found nothing began
        # after the last outcome was written (a failure written meanwhile may have made its job
        # ready again).
        if (
            self.options.burst
            and not claimed
            and not len(self.table)
            and not self.ack.unwritten()
            and self.ack.writes == writes_before
            and not self._reconcile
        ):
            logger.info("burst: nothing ready, exiting")
            return True
        return False

    def queues_changed(self) -> None:
        """A queue was paused or resumed (a notification): re-read them before the next claim."""
        self._paused_read_at = -1e9
        self.wake.set()

    def _queues(self) -> tuple[str, ...] | None:
        """The queues to claim from now (None: every queue; empty: none, all are paused)."""
        now = time.monotonic()
        if now - self._paused_read_at >= queue_control.REFRESH_SECONDS:
            paused = queue_control.paused_names(self.conn.store)
            if paused != self.paused:
                logger.info("paused queues: %s", ", ".join(sorted(paused)) or "none")
            self.paused, self._paused_read_at = paused, now
        if not self.paused:
            return self.options.queues
        if self.options.queues is None:
            return tuple(self.conn.store.ready_queues(excluding=self.paused))
        return tuple(q for q in self.options.queues if q not in self.paused)

    def _claim(self, room: int) -> list[Claim]:
        sent = time.monotonic()
        queues = self._queues()
        if queues == ():
            return []
        claimed = self.conn.store.claim(
            self.name,
            limit=room,
            lease=self.lease,
            queues=queues,
            quotas=self.quotas(room),
        )
        if claimed:
            entries = [self._entry(c, sent) for c in claimed]
            self.table.add(entries)
            if any(e.lease != self.lease for e in entries):
                self.heartbeat.now.set()  # give a handler's own lease at once
        return claimed

    def _entry(self, claim: Claim, sent: float) -> InFlight:
        handler: JobHandler[Any, Any] | None
        try:
            handler = get_handler(claim.task)
        except UnknownTask:
            handler = None
        lease = handler.lease if handler and handler.lease else self.lease
        # The claim gave the worker's lease; a handler's own takes effect at the first beat.
        return InFlight(claim, handler, lease, lease_valid_until=sent + min(lease, self.lease))

    def _release_unknown(self) -> None:
        released = self.conn.store.release_unknown(
            self.name, self.table.tokens(), "released after a claim whose reply was lost"
        )
        self._reconcile = False
        if released:
            logger.warning(
                "a claim failed in flight after it had claimed job(s) %s: released them (no attempt "
                "charged) so they run now instead of waiting out their lease",
                released[:20],
            )

    def _tick(self) -> None:
        """Enqueue the periodic jobs that fell due (one of the workers' inserts wins each tick)."""
        assert self.ticker is not None
        try:
            self.conn.ensure()
            self.ticker.tick(self.conn.store)
        except DB_ERRORS as exc:
            self._trouble("periodic enqueue", exc, 1)
        except Exception:  # a handler's arguments no longer valid, a bug: never stop claiming
            logger.exception("periodic jobs: enqueueing a tick failed")

    def _promote(self) -> float:
        """Due scheduled jobs become ready; returns when to promote next (monotonic): at the next
        known due time, at most a poll interval from now."""
        try:
            self.conn.ensure()
            result = self.conn.store.promote(limit=PROMOTE_BATCH)
        except DB_ERRORS as exc:
            self._trouble("promote", exc, 1)
            return time.monotonic() + self.poll_interval
        now = time.monotonic()
        if result.promoted >= PROMOTE_BATCH:
            return now
        wait = self.poll_interval
        if result.next_due is not None:
            wait = min(wait, max(0.0, (result.next_due - timezone.now()).total_seconds()))
        return now + wait

    def _watchdog(self) -> bool:
        """True (and exit code 5) when no heartbeat has succeeded for a whole lease while jobs are
        held: their leases are lost, and this process cannot reach the database to keep new ones."""
        silent = self.heartbeat.silent_for(time.monotonic())
        if silent <= self.lease or not self.table.to_heartbeat():
            return False
        logger.error(
            "no heartbeat has succeeded for %.0fs (a lease is %.0fs): the leases of the %d job(s) held "
            "here have lapsed; stopping so a fresh process takes over (exit code 5)",
            silent,
            self.lease,
            len(self.table),
        )
        self.exit_code = 5
        return True

    def _trouble(self, what: str, exc: BaseException, failures: int) -> None:
        """Log, drop the broken connection and back off; the next statement reconnects."""
        logger.warning("database error during %s (%s); retrying", what, safe_str(exc).strip()[:200])
        self.conn.drop()
        self.stopping.wait(min(5.0, 0.1 * 2 ** min(failures, 6)))
