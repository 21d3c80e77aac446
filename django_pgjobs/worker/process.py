"""One ``runjobs`` process: builds the worker's parts, runs their threads, handles signals, shuts
down cleanly, and says how it ended (the exit code).

Threads (see ``docs/architecture.md``):

* main: the claim loop (``claimer.py``);
* ``job-N`` x concurrency: executors (``executor.py``);
* ``ack``: the acknowledger (``acknowledger.py``);
* ``heartbeat`` (``heartbeat.py``);
* ``listen`` (``listener.py``), unless LISTEN is off.

Exit codes: 0 clean (a signal, ``--burst`` drained, ``--max-jobs`` reached); 1 stopped by a second
signal (everything released at once); 3 more handler threads stuck past their ``timeout`` than
slots; 4 an internal error in one of the worker's own threads (the claim loop in the main thread
included); 5 no heartbeat succeeded for a lease.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable

from django.db import connections

from .. import fleet
from ..conf import get_settings
from ..notify import notifier
from ..periodic import Ticker, schedules
from ..stop_signals import relay_signals
from ..store import Failure
from .acknowledger import Acknowledger
from .claimer import ClaimLoop
from .connections import DB_ERRORS, Bounds, WorkerConnection
from .executor import Executors
from .heartbeat import Heartbeat
from .inflight import InFlight, InFlightTable, JobState
from .listener import Listener
from .options import WorkerOptions
from .outcome import Outcome, internal_failure, safe_str

logger = logging.getLogger("django_pgjobs")

#: Seconds between the progress lines logged at the default verbosity.
PROGRESS_SECONDS = 10.0


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Worker:
    def __init__(self, options: WorkerOptions | None = None) -> None:
        self.options = options or WorkerOptions()
        s = get_settings()
        self.settings = s
        self.worker_id = self.options.worker_id or default_worker_id()
        #: What claims write as ``locked_by``: the worker id and, after ``#``, this process's
        #: incarnation, so two processes given one ``--worker-id`` are never taken for each other.
        self.name = f"{self.worker_id}#{secrets.token_hex(3)}"
        self.concurrency = self.options.concurrency
        self.poll_interval = self.options.poll_interval or s.POLL_INTERVAL_SECONDS
        self.listen = s.LISTEN if self.options.listen is None else self.options.listen
        self.lease = self.options.lease or s.LEASE_SECONDS
        self.heartbeat_interval = self.options.heartbeat_interval or s.HEARTBEAT_SECONDS
        self.sweep_interval = self.options.sweep_interval or s.SWEEP_INTERVAL_SECONDS
        self.alias = s.DATABASE

        self.counts = dict.fromkeys(
            ("done", "retry", "dead", "cancelled", "snoozed", "rejected", "lost", "released"), 0
        )
        self._exit_code = 0
        self._forced_by_signal = False
        self._stopping = threading.Event()  # stop claiming (first signal)
        self._forced = threading.Event()  # give everything back now (second signal)
        self._wake = threading.Event()  # something to claim, room, or a signal
        self._threads_stopped = threading.Event()
        self._internal: list[threading.Thread] = []
        self._progress_at = time.monotonic() + PROGRESS_SECONDS
        self._progress_counts = dict(self.counts)

        def connection(role: str, statement_timeout: float) -> WorkerConnection:
            bounds = Bounds(statement_timeout=statement_timeout, lock_timeout=min(2.0, statement_timeout))
            return WorkerConnection(
                self.alias, self.worker_id, role, bounds, tcp_timeout=self.heartbeat_interval
            )

        self.table = InFlightTable(on_room=self._room_freed)
        self.ack = Acknowledger(self.table, connection("ack", 10.0), self._written)
        self.heartbeat = Heartbeat(
            self.table,
            connection("heartbeat", max(1.0, self.heartbeat_interval)),
            self.heartbeat_interval,
            self._abandoned,
            self._threads_stopped,
            fleet.Registration(
                name=self.name,
                worker_id=self.worker_id,
                concurrency=self.concurrency,
                queues=self.options.queues or (),
                queue_limits=dict(self.options.queue_limits),
            ),
        )
        self.executors = Executors(
            self.table, self.concurrency, self.name, self.ack.submit, self._too_many_stuck, self._start_thread
        )
        self.claims = ClaimLoop(
            options=self.options,
            name=self.name,
            table=self.table,
            connection=connection("claim", 30.0),
            acknowledger=self.ack,
            heartbeat=self.heartbeat,
            lease=self.lease,
            poll_interval=self.poll_interval,
            sweep_interval=self.sweep_interval,
            stopping=self._stopping,
            wake=self._wake,
            sweep=self._sweep,
            progress=self._progress,
            ticker=self._ticker(),
        )
        self.listener = Listener(
            connection("listen", 30.0),
            s.NOTIFY_CHANNEL,
            frozenset(self.options.queues) if self.options.queues else None,
            self._wake.set,
            self._stopping,
            self.poll_interval,
            on_cancel=self.heartbeat.now.set,
            on_queues_changed=self.claims.queues_changed,
        )

    def _ticker(self) -> Ticker | None:
        """The periodic jobs' ticker, only when there are schedules to tick: without one the claim
        loop keeps its poll interval (a ticker wakes it every second)."""
        if not self.options.periodic or self.options.burst:
            return None
        found = schedules()
        return Ticker(found) if found else None

    # -- public -----------------------------------------------------------------------------------
    def run(self, install_signal_handlers: bool = True) -> int:
        """Work until stopped (signal), drained (``burst``) or ``max_jobs`` done. Returns an exit code."""
        if install_signal_handlers:
            self._install_signal_handlers()
        self._start()
        queues = ",".join(
            f"{q}:{self.options.queue_limits[q]}" if q in self.options.queue_limits else q
            for q in self.options.queues or ()
        )
        logger.info(
            "worker %s started: queues=%s concurrency=%d listen=%s poll=%.2fs lease=%.0fs%s",
            self.name,
            queues or "*",
            self.concurrency,
            "on" if self.listen else "off",
            self.poll_interval,
            self.lease,
            " burst" if self.options.burst else "",
        )
        try:
            self.claims.run()
        except Exception as exc:  # a bug in the claim loop: like any internal thread's (exit 4)
            self._internal_error("claim loop", exc)
        finally:
            code = self._shutdown()
        logger.info("worker %s stopped: %s", self.name, ", ".join(f"{k}={v}" for k, v in self.counts.items()))
        return code

    def stop(self, force: bool = False) -> None:
        """Ask the worker to stop (thread-safe; what a signal does)."""
        if force or self._stopping.is_set():
            self._forced.set()
        self._stopping.set()
        self._wake.set()

    # -- wiring -----------------------------------------------------------------------------------
    def _start(self) -> None:
        self.executors.start()
        self._internal.append(self._start_thread(self.ack.run, "ack"))
        self._internal.append(self._start_thread(self.heartbeat.run, "heartbeat"))
        if self.listen:
            self._internal.append(self._start_thread(self.listener.run, "listen"))

    def _start_thread(self, target: Callable[[], None], name: str) -> threading.Thread:
        thread = threading.Thread(target=self._guarded, args=(target,), name=f"pgjobs-{name}", daemon=True)
        thread.start()
        return thread

    def _guarded(self, target: Callable[[], None]) -> None:
        """A worker thread that dies of a bug would leave its jobs heartbeated but never finished:
        stop the whole worker instead (exit code 4). The jobs it held that had started are charged
        their attempt (a job whose handling kills the worker's internals must end dead after
        max_attempts, not loop from worker to worker); the ones still buffered are released."""
        try:
            target()
        except BaseException as exc:
            self._internal_error(f"{threading.current_thread().name} thread", exc)

    def _internal_error(self, where: str, exc: BaseException) -> None:
        """One of the worker's own parts (``where``) died of ``exc``: charge the started jobs, stop
        (the shutdown releases the buffered ones), exit 4."""
        logger.critical("internal error in the %s; stopping the worker (exit code 4)", where, exc_info=exc)
        self._exit_code = self._exit_code or 4
        self._charge_held(f"internal error in the worker's {where}: {safe_str(exc)}")
        self.stop()

    def _room_freed(self) -> None:
        # Wake the claim loop once there is room for a claim worth its round trip (counts are
        # kept as states change, so this is cheap enough to ask on every freed slot).
        if self.claims.room() > 0:
            self._wake.set()

    def _written(self, entry: InFlight, outcome: Outcome, label: str) -> None:
        self.counts[label] += 1
        self.claims.observed(outcome.duration)
        claim = entry.claim
        if label == "rejected":
            logger.warning(
                "job %d %s queue=%s attempt=%d: late %s rejected by fencing (its lease was lost; the job "
                "now belongs to another worker or was finished) after %.1fms",
                claim.id,
                claim.task,
                claim.queue,
                claim.attempt,
                "completion" if outcome.ok else "failure",
                outcome.duration * 1000,
            )
            return
        if label == "lost":
            return  # the acknowledger said why
        level = logging.WARNING if label == "dead" else logging.DEBUG
        if not logger.isEnabledFor(level):
            return
        detail = ""
        if not outcome.ok:
            first_line = (outcome.message.splitlines() or [""])[0][:200]
            detail = f": {outcome.error_class}: {first_line}" if first_line else f": {outcome.error_class}"
            if label == "retry" and outcome.retry_in is not None:
                detail += f"; next attempt in {outcome.retry_in:.1f}s"
        if outcome.snooze_for is not None:
            detail = (
                f": runs again in {outcome.snooze_for:g}s" if label == "snoozed" else ": snoozed too often"
            )
        logger.log(
            level,
            "job %d %s queue=%s attempt=%d/%d %s after %.1fms%s",
            claim.id,
            claim.task,
            claim.queue,
            claim.attempt,
            claim.max_attempts,
            {
                "done": "done",
                "retry": "failed",
                "dead": "failed for good (dead)",
                "cancelled": "cancelled",
                "snoozed": "snoozed",
            }[label],
            outcome.duration * 1000,
            detail,
        )

    def _progress(self) -> None:
        now = time.monotonic()
        if now < self._progress_at:
            return
        elapsed = now - self._progress_at + PROGRESS_SECONDS
        self._progress_at = now + PROGRESS_SECONDS
        delta = {k: self.counts[k] - self._progress_counts.get(k, 0) for k in self.counts}
        self._progress_counts = dict(self.counts)
        held = len(self.table)
        if not any(delta.values()) and not held:
            return
        finished = delta["done"] + delta["retry"] + delta["dead"]
        logger.info(
            "worker %s: %d done, %d failed (%d dead), %d in flight, %.0f jobs/s over %.0fs",
            self.name,
            delta["done"],
            delta["retry"] + delta["dead"],
            delta["dead"],
            held,
            finished / elapsed if elapsed > 0 else 0.0,
            elapsed,
        )

    def _abandoned(self, entry: InFlight) -> None:
        self.executors.abandoned(entry)

    def _too_many_stuck(self, stuck: int) -> None:
        if self._stopping.is_set():
            return
        logger.error(
            "%d job threads are stuck in handlers past their timeout (more than --concurrency %d): "
            "stopping so a fresh process takes over (exit code 3)",
            stuck,
            self.concurrency,
        )
        self._exit_code = 3
        self.stop()

    def _sweep(self) -> None:
        # The same pass as ``sweepjobs`` (leases, then retention), bounded so claims are not stalled.
        from ..sweeper import log_report, run_sweep

        try:
            self.claims.conn.ensure()
            log_report(run_sweep(max_batches=10, store=self.claims.conn.store))
        except DB_ERRORS as exc:
            self.claims._trouble("sweep", exc, 1)

    # -- shutdown ---------------------------------------------------------------------------------
    def _shutdown(self) -> int:
        """Release what has not started, wait for what runs, give back the rest. Nothing stays
        ``running`` under this worker's name."""
        self._stopping.set()
        if self.claims.exit_code == 5:  # the leases are lost: do not wait for running handlers
            self._exit_code = 5
            self._forced.set()
        self.table.close()
        self._release(lambda e: e.state is JobState.BUFFERED, "released on shutdown before it started")
        deadline = time.monotonic() + self.options.shutdown_timeout
        while time.monotonic() < deadline and not self._forced.is_set():
            if not any(e.state in (JobState.RUNNING, JobState.FINISHED) for e in self.table.snapshot()):
                break
            self._wake.wait(0.05)
            self._wake.clear()
        self._release(
            lambda e: e.state is JobState.RUNNING,
            "released on shutdown while running (not counted as an attempt)",
        )
        # Finished jobs keep their outcome: the acknowledger writes what is queued, then stops.
        self.ack.stop()
        self.ack.drain(timeout=2 if self._forced.is_set() else 10)
        # Whatever could not be written goes back to ready rather than waiting for its lease.
        self._release(
            lambda e: e.state is JobState.FINISHED, "released on shutdown: its outcome could not be written"
        )
        self._threads_stopped.set()
        self.heartbeat.now.set()
        self._deregister()
        notifier().flush(timeout=2)
        connections.close_all()
        for conn in (self.ack.conn, self.heartbeat.conn, self.claims.conn, self.listener.conn):
            conn.drop()
        return self._exit_code or (1 if self._forced_by_signal else 0)

    def _deregister(self) -> None:
        """Leave the workers registry at once (a dead process drops out when its row expires)."""
        try:
            self.claims.conn.ensure()
            fleet.deregister(self.claims.conn.store, self.name)
        except DB_ERRORS as exc:
            logger.warning("could not leave the workers registry (%s)", safe_str(exc).strip()[:200])

    def _release(self, which: Callable[[InFlight], bool], reason: str) -> None:
        chosen = self.table.mark_releasing(which)
        if not chosen:
            return
        released: set[int] = set()
        store = self.claims.conn.store
        for attempt in range(1, 4):
            try:
                self.claims.conn.ensure()
                released = store.release([(e.id, e.token) for e in chosen], reason)
                break
            except DB_ERRORS as exc:
                self.claims.conn.drop()
                if attempt == 3 or self._forced.is_set():
                    logger.error(
                        "could not release %d job(s) (%s); their leases will lapse and the sweeper will "
                        "return them",
                        len(chosen),
                        safe_str(exc).strip()[:200],
                    )
                    break
                time.sleep(0.2 * attempt)
        self.table.forget(chosen)
        self.counts["released"] += len(released)
        if released:
            logger.info("released %d job(s) back to ready: %s", len(released), sorted(released)[:20])

    def _charge_held(self, reason: str) -> None:
        """After an internal error: started jobs get a failure (their attempt is charged), buffered
        ones go back. On a fresh connection: the broken thread's may be what failed."""
        held = self.table.snapshot()
        started = [e for e in held if e.state in (JobState.RUNNING, JobState.FINISHED, JobState.ABANDONED)]
        if started:
            conn = WorkerConnection(self.alias, self.worker_id, "recovery", Bounds(10.0, 2.0), 10.0)
            try:
                conn.ensure()
                conn.store.fail(
                    [
                        Failure(
                            e.id,
                            e.token,
                            error_class="django_pgjobs.WorkerError",
                            message=internal_failure(reason, 0.0, None).message[:2000],
                            traceback=None,
                            retry_in=self.executors.retry_delay(e, None),
                        )
                        for e in started
                    ]
                )
                self.table.forget(started)
            except Exception:
                logger.exception("could not record the failure of the jobs this worker held")
            finally:
                conn.drop()

    def _install_signal_handlers(self) -> None:
        relay_signals(self._on_signal)

    def _on_signal(self, signum: int) -> None:
        """In the signal relay's thread (see :mod:`django_pgjobs.stop_signals`), never in a handler."""
        name = signal.Signals(signum).name
        if self._stopping.is_set():
            logger.warning("%s again: releasing every job now and exiting", name)
            self._forced_by_signal = True
            self.stop(force=True)
        else:
            logger.info(
                "%s: no new claims; waiting up to %.0fs for running jobs (again to force)",
                name,
                self.options.shutdown_timeout,
            )
            self.stop()


def leftover_threads() -> list[threading.Thread]:
    """Threads a handler started and never joined that would keep the process alive after the
    worker stopped: non-daemon threads, and a ThreadPoolExecutor's (joined at interpreter exit)."""
    from concurrent.futures import thread as pool_threads

    current = threading.current_thread()
    pooled = set(getattr(pool_threads, "_threads_queues", {}))
    return [
        t
        for t in threading.enumerate()
        if t is not current and t.is_alive() and (not t.daemon or t in pooled)
    ]


def exit_process(code: int) -> None:
    """Exit with ``code`` even if a handler left a thread that would block the exit: say so, run
    the ``atexit`` hooks (error reporters flush there), flush the logs and end the process, since
    ``sys.exit`` would wait for that thread for ever."""
    stray = leftover_threads()
    if not stray:
        sys.exit(code)
    logger.warning(
        "a handler left %d thread(s) running (%s); exiting without waiting for them",
        len(stray),
        ", ".join(t.name for t in stray[:5]),
    )
    import atexit

    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
