"""Executors: threads that run handlers, one job at a time each, and always produce an outcome.

Whatever a handler raises (``SystemExit`` included), returns (something JSON cannot hold, a result
over ``MAX_PAYLOAD_BYTES``) or leaves behind (an open transaction) ends as an :class:`Outcome` the
acknowledger can store, and the thread goes on with the next job. An executor never touches the
job's row: the acknowledger writes outcomes, the heartbeat extends leases.

A thread whose handler overran its ``timeout`` cannot be stopped (Python has no safe way), so it is
*abandoned*: its slot goes to a new thread at once. When more threads are stuck than there are
slots, the worker asks to be replaced (exit code 3).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections, connections
from django.dispatch import Signal

from ..conf import get_settings
from ..exceptions import JobCancelled, PayloadNotSerializable, Snooze, UnknownTask
from ..payloads import check_value, dumps
from ..registry import JobContext
from ..retry import default_backoff
from ..signals import job_failed, job_finished, job_started
from ..validation import MAX_DELAY_SECONDS
from .inflight import InFlight, InFlightTable
from .outcome import Outcome, class_path, failure, safe_str, storable

logger = logging.getLogger("django_pgjobs")


class Executors:
    def __init__(
        self,
        table: InFlightTable,
        concurrency: int,
        worker_name: str,
        submit: Callable[[InFlight, Outcome, bool], None],
        on_too_many_stuck: Callable[[int], None],
        start_thread: Callable[[Callable[[], None], str], threading.Thread],
    ) -> None:
        self.table = table
        self.concurrency = concurrency
        self.worker_name = worker_name
        self.submit = submit
        self.on_too_many_stuck = on_too_many_stuck
        self._start_thread = start_thread
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._spawned = 0
        self.stuck = 0  # abandoned runs whose handler has not returned

    def start(self) -> None:
        for _ in range(self.concurrency):
            self._spawn()

    def _spawn(self) -> None:
        with self._lock:
            self._spawned += 1
            name = f"job-{self._spawned}"
        thread = self._start_thread(self._loop, name)
        with self._lock:
            self._threads.add(thread)

    def alive(self) -> list[threading.Thread]:
        with self._lock:
            self._threads = {t for t in self._threads if t.is_alive()}
            return list(self._threads)

    # -- the loop ---------------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while True:
                entry = self.table.next_to_run()
                if entry is None:
                    return
                outcome, dirty = self.run(entry)
                on_time = self.table.finish(entry)
                self.submit(entry, outcome, not on_time)
                if not on_time:
                    with self._lock:
                        self.stuck -= 1
                    return  # abandoned: a replacement took this thread's slot long ago
                if dirty:
                    # The handler left this thread's connection in a state we cannot undo (an
                    # atomic block it never exited): a fresh thread gets fresh connections.
                    self._spawn()
                    return
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def run(self, entry: InFlight) -> tuple[Outcome, bool]:
        """Run one job: (its outcome, whether the thread's connections were left unusable)."""
        claim = entry.claim
        if entry.cancel_signal.is_set():
            return self.cancelled_before_start(entry), False
        start = time.monotonic()
        # Connections are tidied after each job (see _reset_connections), so the next one on this
        # thread starts from that state: no second pass here.
        context = JobContext.for_claim(claim, self.worker_name, entry.cancel_signal)
        _send(job_started, entry, context=context)
        try:
            if entry.handler is None:
                raise UnknownTask(claim.task)
            result = entry.handler.run(context, claim.args, claim.kwargs)
            outcome = Outcome(
                ok=True, duration=time.monotonic() - start, result_json=_result_json(claim.task, result)
            )
        except Snooze as snooze:
            outcome = Outcome(ok=False, duration=time.monotonic() - start, snooze_for=snooze.seconds)
        except BaseException as exc:  # SystemExit/KeyboardInterrupt from a handler is its failure
            cancel = isinstance(exc, JobCancelled)
            outcome = failure(
                exc, time.monotonic() - start, None if cancel else self.retry_delay(entry, exc), cancel=cancel
            )
            will_retry = not cancel and not context.cancel_requested and outcome.retry_in is not None
            _send(
                job_failed,
                entry,
                context=context,
                exception=exc,
                will_retry=will_retry and claim.attempt < claim.max_attempts,
            )
        _send(job_finished, entry, context=context, outcome=outcome.label, duration=outcome.duration)
        return outcome, _reset_connections(claim.task, claim.id)

    def cancelled_before_start(self, entry: InFlight) -> Outcome:
        """A claimed-ahead job asked to stop while it waited for an executor: its handler is never
        called (and no worker signal is sent: nothing started); the outcome ends it ``cancelled``
        like any run of a job asked to stop."""
        by = entry.cancel_signal.by or "an operator"
        logger.info(
            "job %d %s was asked to stop by %s before it started: cancelled without running its handler",
            entry.id,
            entry.claim.task,
            by,
        )
        return Outcome(
            ok=False,
            duration=0.0,
            error_class=class_path(JobCancelled),
            message=storable(f"cancelled by {by} before it started"),
            cancel=True,
        )

    def retry_delay(self, entry: InFlight, exc: BaseException | None) -> float | None:
        """The handler's backoff, checked here: a policy that raises or answers something the row
        cannot store (negative, NaN, a timedelta, centuries) gets the default policy instead, so
        the failure is still recorded and retried rather than lost."""
        attempt = entry.claim.attempt
        task = entry.claim.task
        try:
            if entry.handler is None or isinstance(exc, PayloadNotSerializable | UnknownTask):
                return default_backoff()(attempt, exc)
            delay = entry.handler.retry_delay(attempt, exc)
        except Exception:
            logger.exception("backoff policy of %s failed; using the default", task)
            return default_backoff()(attempt, exc)
        if delay is None or (
            isinstance(delay, int | float) and not isinstance(delay, bool) and 0 <= delay <= MAX_DELAY_SECONDS
        ):
            return delay
        logger.error(
            "backoff policy of %s returned %s, not seconds (0 to 100 years) or None; using the default",
            task,
            safe_str(delay)[:100],
        )
        return default_backoff()(attempt, exc)

    # -- abandoned runs -----------------------------------------------------------------------------
    def abandoned(self, entry: InFlight) -> None:
        """``entry`` overran its timeout: give its slot to a fresh thread, or ask to be replaced."""
        with self._lock:
            self.stuck += 1
            stuck = self.stuck
        timeout = entry.handler.timeout if entry.handler else None
        logger.error(
            "job %d %s overran its timeout of %.0fs; no longer extending its lease (the sweeper will take "
            "it back and this run's result will be rejected); its slot goes to a new thread",
            entry.id,
            entry.claim.task,
            timeout or 0,
        )
        if stuck > self.concurrency:
            self.on_too_many_stuck(stuck)
        else:
            self._spawn()


def _send(signal: Signal, entry: InFlight, **details: Any) -> None:
    """A worker signal, sent robustly: a receiver that raises is logged, the job goes on."""
    if not signal.receivers or not signal.has_listeners(entry.handler):  # the first test is free
        return
    for receiver, response in signal.send_robust(entry.handler, **details):
        if isinstance(response, Exception):
            logger.error(
                "a receiver of a worker signal (%s) raised for job %d: %s",
                safe_str(receiver)[:200],
                entry.id,
                safe_str(response)[:500],
                exc_info=response,
            )


def _result_json(task: str, result: Any) -> str:
    """The result as stored JSON: checked like a payload, and within the size limit."""
    check_value(task, "return value", result)
    text = dumps(result)
    limit = get_settings().MAX_PAYLOAD_BYTES
    if len(text) > limit:
        raise PayloadNotSerializable(
            f"job {task!r}: return value is {len(text):,} bytes of JSON; the limit is {limit:,} "
            "(PGJOBS['MAX_PAYLOAD_BYTES'])"
        )
    return text


def _reset_connections(task: str, job_id: int) -> bool:
    """Put this thread's database connections back as a job found them. A transaction the handler
    left open is rolled back (its writes were never committed); True when one cannot be undone
    here (inside an ``atomic`` block the handler never left), so the thread must retire."""
    dirty = False
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        try:
            if conn.in_atomic_block:
                logger.warning(
                    "job %d %s left a transaction.atomic() block open on %r; it was rolled back",
                    job_id,
                    task,
                    conn.alias,
                )
                conn.close()
                dirty = True
            elif not conn.get_autocommit():
                logger.warning(
                    "job %d %s left autocommit off on %r; its open transaction was rolled back",
                    job_id,
                    task,
                    conn.alias,
                )
                conn.rollback()
                conn.set_autocommit(True)
        except Exception:
            logger.warning(
                "could not reset the %r connection after job %d", conn.alias, job_id, exc_info=True
            )
            dirty = True
    if not dirty:
        close_old_connections()
    return dirty
