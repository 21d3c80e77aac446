"""The acknowledger: one thread that writes outcomes, in batches, and keeps at it through outages.

Outcomes that finish while a write is on the wire wait for the next one, so batches grow with
load by themselves: completions go in one fenced statement, snoozes in another, failures in a
third, each settled as soon as it returns (a later one that fails never resends them). Until an
outcome is written its job stays ``running`` in its row and keeps its heartbeat, so a crash in
between runs it again (at-least-once) and never loses it.

When the database is away, each outcome is retried with backoff for as long as its lease can still
be valid (the heartbeat keeps extending it once the database is back); only when the lease has
surely lapsed is it given up, and the log says exactly that. "Rejected by fencing" is logged only
when a write that ran matched nothing: the job is someone else's now.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from ..store import Failure
from .connections import DB_ERRORS, WorkerConnection
from .inflight import InFlight, InFlightTable
from .outcome import Outcome, internal_failure, safe_str

logger = logging.getLogger("django_pgjobs")

#: Outcomes per statement.
BATCH = 1000


@dataclass(eq=False)
class Pending:
    entry: InFlight
    outcome: Outcome
    late: bool  # from an abandoned run: the fence will most likely refuse it


class Acknowledger:
    def __init__(
        self,
        table: InFlightTable,
        connection: WorkerConnection,
        on_written: Callable[[InFlight, Outcome, str], None],
    ) -> None:
        self.table = table
        self.conn = connection
        self.on_written = on_written  # (entry, outcome, label) for counts and logs
        self._changed = threading.Condition()
        self._pending: list[Pending] = []
        self._writing = False
        self._stopping = False
        self.writes = 0  # outcomes settled (written, refused or given up): the burst check reads it

    # -- producers --------------------------------------------------------------------------------
    def submit(self, entry: InFlight, outcome: Outcome, late: bool) -> None:
        with self._changed:
            self._pending.append(Pending(entry, outcome, late))
            if not self._writing:
                self._changed.notify()

    def unwritten(self) -> int:
        with self._changed:
            return len(self._pending) + (1 if self._writing else 0)

    def stop(self) -> None:
        """Write what is queued, then return from :meth:`run`."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()

    def drain(self, timeout: float) -> bool:
        """Wait until nothing is queued or being written."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._pending and not self._writing, timeout)

    # -- the thread -------------------------------------------------------------------------------
    def run(self) -> None:
        backoff = 0.0
        while True:
            with self._changed:
                if backoff:  # the database was away: wait a little (a stop ends the wait)
                    self._changed.wait_for(lambda: self._stopping, backoff)
                self._changed.wait_for(lambda: bool(self._pending) or self._stopping)
                if not self._pending and self._stopping:
                    return
                batch, self._pending = self._pending[:BATCH], self._pending[BATCH:]
                self._writing = bool(batch)
            try:
                left = self._write(batch) if batch else []
            finally:
                with self._changed:
                    self._writing = False
                    if left:
                        self._pending[:0] = left
                    self._changed.notify_all()
            backoff = min(2.0, max(0.05, backoff * 2)) if left else 0.0
            if left and self._stopping and backoff >= 2.0:
                # Shutting down with the database away: the shutdown releases what is left.
                return

    def _write(self, batch: list[Pending]) -> list[Pending]:
        """Write ``batch``; returns what must be tried again (the database was away).

        Completions, snoozes and failures are three statements, each its own autocommit
        transaction: what one of them wrote is settled as soon as it returns, so a later one that
        fails retries only its own outcomes and those not yet sent (sent again, a written outcome
        would match nothing and be taken for a fenced-off late write)."""
        groups = [g for g in _by_statement(batch) if g]
        for n, group in enumerate(groups):
            try:
                self.conn.ensure()
                settled = self._statement(group)
            except DB_ERRORS as exc:
                rest = [p for later in groups[n + 1 :] for p in later]
                if _lock_timeout(exc) and len(group) > 1:
                    # One row locked by another session must not hold up the others: one at a time.
                    return [p for item in group for p in self._write([item])] + self._write(rest)
                self.conn.drop()
                return self._keep_or_give_up(group + rest, exc)
            except Exception as exc:  # a bug or an outcome the driver cannot send: never die of it
                rest = [p for later in groups[n + 1 :] for p in later]
                if len(group) > 1:
                    left = [p for item in group for p in self._write([item])]
                else:
                    left = self._unsendable(group[0], exc)
                return left + self._write(rest)
            self._settle(settled)
        return []

    def _statement(self, group: list[Pending]) -> list[tuple[Pending, str]]:
        """One statement for ``group`` (outcomes of one kind, see :func:`_by_statement`)."""
        store = self.conn.store
        first = group[0].outcome
        if first.ok:
            accepted = store.complete([(p.entry.id, p.entry.token, p.outcome.result_json) for p in group])
            return [(p, _label(accepted.get(p.entry.token))) for p in group]
        if first.snooze_for is not None:
            written = store.snooze([(p.entry.id, p.entry.token, p.outcome.snooze_for or 0.0) for p in group])
            return [(p, _label(written.get(p.entry.token))) for p in group]
        recorded = store.fail(
            [
                Failure(
                    p.entry.id,
                    p.entry.token,
                    error_class=p.outcome.error_class,
                    message=p.outcome.message,
                    traceback=p.outcome.traceback,
                    retry_in=p.outcome.retry_in,
                    cancel=p.outcome.cancel,
                )
                for p in group
            ]
        )
        labels = []
        for p in group:
            result = recorded.get(p.entry.token)
            labels.append((p, _label(None if result is None else result.status, retry="retry")))
        return labels

    def _settle(self, labels: list[tuple[Pending, str]]) -> None:
        self.table.forget([p.entry for p, _ in labels])
        with self._changed:
            self.writes += len(labels)
        for pending, label in labels:
            self.on_written(pending.entry, pending.outcome, label)

    def _keep_or_give_up(self, batch: list[Pending], exc: BaseException) -> list[Pending]:
        now = time.monotonic()
        keep = [p for p in batch if p.entry.lease_valid_until > now]
        lapsed = [p for p in batch if p.entry.lease_valid_until <= now]
        if keep:
            logger.warning(
                "could not write %d outcome(s) (%s); retrying while their leases can still be valid",
                len(keep),
                safe_str(exc).strip()[:200],
            )
        for p in lapsed:
            logger.error(
                "job %d %s attempt %d: its outcome (%s) could not be written before its lease lapsed "
                "(the database was unreachable: %s); the job will run again",
                p.entry.id,
                p.entry.claim.task,
                p.entry.claim.attempt,
                "done" if p.outcome.ok else "failed",
                safe_str(exc).strip()[:200],
            )
        if lapsed:
            self._settle([(p, "lost") for p in lapsed])
        return keep

    def _unsendable(self, pending: Pending, exc: BaseException) -> list[Pending]:
        """An outcome the driver refused for something other than the database (a bug): record a
        failure in its place, so the attempt is charged and the job cannot loop."""
        logger.error(
            "job %d %s: could not write its outcome (%s: %s); recording an internal failure instead",
            pending.entry.id,
            pending.entry.claim.task,
            type(exc).__name__,
            safe_str(exc)[:200],
            exc_info=True,
        )
        if pending.outcome.error_class == "django_pgjobs.WorkerError":  # that failed too
            self._settle([(pending, "lost")])
            return []
        outcome = pending.outcome
        # A failure keeps its retry decision; a result or a snooze that could not be stored is
        # retried at once (the attempt is charged, so this cannot loop).
        replacement = internal_failure(
            f"the outcome could not be recorded ({type(exc).__name__}: {safe_str(exc)[:500]})",
            outcome.duration,
            0.0 if outcome.ok or outcome.snooze_for is not None else outcome.retry_in,
        )
        return self._write([Pending(pending.entry, replacement, pending.late)])


def _by_statement(batch: list[Pending]) -> tuple[list[Pending], list[Pending], list[Pending]]:
    """``batch`` split by the statement that writes it: completions, snoozes, failures."""
    done = [p for p in batch if p.outcome.ok]
    snoozed = [p for p in batch if not p.outcome.ok and p.outcome.snooze_for is not None]
    failed = [p for p in batch if not p.outcome.ok and p.outcome.snooze_for is None]
    return done, snoozed, failed


def _label(status: str | None, retry: str = "snoozed") -> str:
    """The worker's count an outcome goes to, from the status the statement wrote (None: the
    fence refused the write)."""
    if status is None:
        return "rejected"
    if status in ("done", "dead", "cancelled"):
        return status
    return retry  # ready or scheduled again


def _lock_timeout(exc: BaseException) -> bool:
    return isinstance(exc.__cause__, psycopg.errors.LockNotAvailable)
