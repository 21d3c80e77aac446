"""The worker: claim, run, heartbeat, acknowledge; and a clean shutdown.

One process runs:

* the **main thread**: claims batches sized to free slots (one statement), hands jobs to the job
  threads, sweeps expired leases now and then, and sleeps on a wake-up event between claims;
* **job threads** (``concurrency`` of them): run handlers. Each has its own Django connection, and
  ``close_old_connections`` runs around every job. They never touch the job's row;
* an **acknowledger** thread: writes outcomes. Successes are batched into one fenced statement every
  few milliseconds (where the fastest queues get their speed); failures are written one by one.
  A slot frees when its handler returns, not when the outcome is written, so the next claim and the
  last acknowledgement travel at the same time instead of taking turns. Until it is written the
  job stays ``running`` in its row and keeps its heartbeat: a crash in between runs it again
  (at-least-once), never loses it. Finished-but-unwritten jobs are capped at ``concurrency`` so a
  slow database cannot let them pile up;
* a **heartbeat** thread that does nothing else: extends the leases of this process's running jobs,
  except jobs past their ``timeout``, whose lease is left to lapse so the sweeper takes them back;
* a **listener** thread on a dedicated connection: ``LISTEN`` for enqueue notifications. Polling
  continues regardless, so a lost notification only delays a job by the poll interval.

No row lock is held while a handler runs: the claim statement commits before the job is handed on.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import signal
import socket
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from django.db import DatabaseError, InterfaceError, close_old_connections, connections

from .conf import get_settings
from .exceptions import PayloadNotSerializable, UnknownTask
from .models import Job
from .payloads import check_value
from .registry import JobContext, JobHandler, get_handler
from .retry import default_backoff
from .store import Claim, Failure
from .validation import MAX_DELAY_SECONDS

logger = logging.getLogger("django_pgjobs")

DB_ERRORS = (DatabaseError, InterfaceError)


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class WorkerOptions:
    queues: tuple[str, ...] | None = None  # None: every queue
    concurrency: int = 1
    burst: bool = False
    max_jobs: int | None = None
    worker_id: str | None = None
    poll_interval: float | None = None
    listen: bool | None = None
    shutdown_timeout: float = 30.0
    lease: float | None = None
    heartbeat_interval: float | None = None
    sweep_interval: float | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if self.max_jobs is not None and self.max_jobs < 1:
            raise ValueError("max_jobs must be >= 1")
        if self.shutdown_timeout < 0:
            raise ValueError("shutdown timeout must be >= 0")
        if self.poll_interval is not None and not self.poll_interval > 0:
            raise ValueError("poll interval must be > 0")


@dataclass
class Running:
    """A job this process claimed and has not yet acknowledged."""

    job: Claim
    handler: JobHandler[Any, Any] | None
    lease: float
    started_at: float | None = None
    finished: bool = False  # the handler returned; the outcome may not be written yet
    released: bool = False
    abandoned: bool = False  # overran: its thread was replaced; it ends when (if) the handler returns
    lost: bool = False  # fencing refused a heartbeat: the lease is gone for good

    @property
    def key(self) -> int:
        return self.job.token


@dataclass
class Outcome:
    running: Running
    ok: bool
    duration: float
    result: Any = None
    error_class: str = ""
    message: str = ""
    traceback: str | None = None
    retry_in: float | None = None


class Worker:
    def __init__(self, options: WorkerOptions | None = None) -> None:
        self.options = options or WorkerOptions()
        s = get_settings()
        self.settings = s
        self.worker_id = self.options.worker_id or default_worker_id()
        self.queues = self.options.queues
        self.concurrency = self.options.concurrency
        self.poll_interval = self.options.poll_interval or s.POLL_INTERVAL_SECONDS
        self.listen = s.LISTEN if self.options.listen is None else self.options.listen
        self.lease = self.options.lease or s.LEASE_SECONDS
        self.heartbeat_interval = self.options.heartbeat_interval or s.HEARTBEAT_SECONDS
        self.sweep_interval = self.options.sweep_interval or s.SWEEP_INTERVAL_SECONDS
        self.alias = s.DATABASE

        self._lock = threading.Lock()
        # claim token -> claimed, not yet acknowledged. The token, not the job id: an abandoned
        # overrunning run and the rerun of the same job can both live in this process.
        self._active: dict[int, Running] = {}
        self._stuck = 0  # job threads abandoned to a handler past its timeout, not yet returned
        self._replacements = 0
        self._exit_code = 0
        self._forced_by_signal = False
        self._todo: queue.Queue[Running | None] = queue.Queue()
        self._outcomes: queue.Queue[Outcome | None] = queue.Queue()
        self._wake = threading.Event()  # something to claim, a free slot, or a signal
        self._heartbeat_now = threading.Event()
        self._stopping = threading.Event()  # stop claiming (first signal)
        self._forced = threading.Event()  # give everything back now (second signal)
        self._threads: list[threading.Thread] = []
        self.claimed_total = 0
        self._writes = 0  # outcomes written (or given up on); read by the main loop
        self.counts = {"done": 0, "retry": 0, "dead": 0, "rejected": 0, "released": 0}

    # -- public -----------------------------------------------------------------------------------
    def run(self, install_signal_handlers: bool = True) -> int:
        """Work until stopped (signal), drained (``burst``) or ``max_jobs`` done. Returns an exit code."""
        if install_signal_handlers:
            self._install_signal_handlers()
        self._start_threads()
        logger.info(
            "worker %s started: queues=%s concurrency=%d listen=%s poll=%.2fs lease=%.0fs%s",
            self.worker_id,
            ",".join(self.queues) if self.queues else "*",
            self.concurrency,
            "on" if self.listen else "off",
            self.poll_interval,
            self.lease,
            " burst" if self.options.burst else "",
        )
        try:
            self._main_loop()
        finally:
            code = self._shutdown()
        logger.info(
            "worker %s stopped: %s",
            self.worker_id,
            ", ".join(f"{k}={v}" for k, v in self.counts.items()),
        )
        return code

    def stop(self, force: bool = False) -> None:
        """Ask the worker to stop (thread-safe; what a signal does)."""
        if force or self._stopping.is_set():
            self._forced.set()
        self._stopping.set()
        self._wake.set()

    # -- main loop --------------------------------------------------------------------------------
    def _main_loop(self) -> None:
        next_sweep = time.monotonic() + random.uniform(0, self.sweep_interval)
        next_promote = 0.0
        failures = 0
        while not self._stopping.is_set():
            self._wake.clear()
            if time.monotonic() >= next_promote:
                next_promote = self._promote()
            free = self._free_slots()
            claimed: list[Claim] = []
            writes_before = self._writes  # outcomes written so far (see the burst exit below)
            if free > 0:
                try:
                    claimed = Job.objects.claim(self.queues, self.worker_id, free, self.lease)
                    failures = 0
                except DB_ERRORS as exc:
                    failures += 1
                    self._database_trouble("claim", exc, failures)
                    continue
                if claimed:
                    self._dispatch(claimed)
                    if len(claimed) == free:
                        continue  # maybe more is ready: claim again as soon as a slot frees
            with self._lock:
                idle = not self._active
            if self._done_by_limit() and idle:
                return
            # Burst ends only when a claim that found nothing started after the last outcome was
            # written: a failure written while that claim ran may have made its job ready again.
            if self.options.burst and not claimed and idle and self._writes == writes_before:
                logger.info("burst: nothing ready, exiting")
                return
            if time.monotonic() >= next_sweep:
                self._sweep()
                next_sweep = time.monotonic() + self.sweep_interval * random.uniform(0.8, 1.2)
            self._wake.wait(max(0.0, min(self.poll_interval, next_promote - time.monotonic())))

    def _promote(self) -> float:
        """Scheduled jobs that fell due become ready; returns when to promote next (monotonic): at
        the next known due time, at most a poll interval from now."""
        try:
            result = Job.objects.promote()
        except DB_ERRORS as exc:
            self._database_trouble("promote", exc, 1)
            return time.monotonic() + self.poll_interval
        now = time.monotonic()
        if result.promoted >= 1000:
            return now  # a full batch: more are due
        wait = self.poll_interval
        if result.next_due is not None:
            from django.utils import timezone

            wait = min(wait, max(0.0, (result.next_due - timezone.now()).total_seconds()))
        return now + wait

    def _free_slots(self) -> int:
        with self._lock:
            busy = sum(1 for r in self._active.values() if not r.finished)
            # Handlers running, and at most ``concurrency`` outcomes waiting to be written.
            free = min(self.concurrency - busy, 2 * self.concurrency - len(self._active))
        if self.options.max_jobs is not None:
            free = min(free, self.options.max_jobs - self.claimed_total)
        return max(free, 0)

    def _done_by_limit(self) -> bool:
        return self.options.max_jobs is not None and self.claimed_total >= self.options.max_jobs

    def _dispatch(self, jobs: Sequence[Claim]) -> None:
        custom_lease = False
        with self._lock:
            for job in jobs:
                try:
                    handler: JobHandler[Any, Any] | None = get_handler(job.task)
                except UnknownTask:
                    handler = None
                lease = handler.lease if handler and handler.lease else self.lease
                custom_lease |= lease != self.lease
                running = Running(job=job, handler=handler, lease=lease)
                self._active[running.key] = running
                self._todo.put(running)
            self.claimed_total += len(jobs)
        if custom_lease:
            self._heartbeat_now.set()

    def _sweep(self) -> None:
        # The same pass as ``sweepjobs`` (leases, then retention), bounded so claims are not stalled.
        from .sweeper import log_report, run_sweep

        try:
            log_report(run_sweep(max_batches=10))
        except DB_ERRORS as exc:
            self._database_trouble("sweep", exc, 1)

    def _database_trouble(self, what: str, exc: BaseException, failures: int) -> None:
        """Log, drop the broken connection and back off; the next call reconnects."""
        logger.warning("database error during %s (%s); retrying", what, str(exc).strip()[:200])
        try:
            connections[self.alias].close()
        except DB_ERRORS:
            pass
        self._stopping.wait(min(5.0, 0.1 * 2 ** min(failures, 6)))

    # -- job threads ------------------------------------------------------------------------------
    def _job_thread(self) -> None:
        while True:
            running = self._todo.get()
            if running is None:
                return
            with self._lock:
                if running.released:
                    continue
                running.started_at = time.monotonic()
            outcome = self._execute(running)
            with self._lock:
                running.finished = True
                abandoned = running.abandoned
                if abandoned:
                    self._stuck -= 1
            self._outcomes.put(outcome)  # a late outcome: fencing decides whether it still counts
            if abandoned:
                return  # a replacement thread already took this one's place
            self._wake.set()  # a free slot: the main loop may claim while this outcome is written

    def _execute(self, running: Running) -> Outcome:
        job = running.job
        start = time.monotonic()
        close_old_connections()
        try:
            if running.handler is None:
                raise UnknownTask(job.task)
            context = JobContext.for_claim(job, self.worker_id)
            result = running.handler.run(context, job.args, job.kwargs)
            check_value(job.task, "return value", result)
            return Outcome(running, ok=True, duration=time.monotonic() - start, result=result)
        except BaseException as exc:  # SystemExit/KeyboardInterrupt from a handler is its failure
            return Outcome(
                running,
                ok=False,
                duration=time.monotonic() - start,
                error_class=f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins."),
                message=str(exc),
                traceback=traceback.format_exc(),
                retry_in=self._retry_delay(running, exc),
            )
        finally:
            close_old_connections()

    def _retry_delay(self, running: Running, exc: BaseException) -> float | None:
        """The handler's backoff, checked here: a policy that raises or answers something the row
        cannot store (negative, NaN, a timedelta, centuries) gets the default policy instead, so
        the failure is still recorded and retried rather than lost in the acknowledger."""
        attempt = running.job.attempt
        task = running.job.task
        try:
            if running.handler is None or isinstance(exc, PayloadNotSerializable | UnknownTask):
                return default_backoff()(attempt, exc)
            delay = running.handler.retry_delay(attempt, exc)
        except Exception:
            logger.exception("backoff policy of %s failed; using the default", task)
            return default_backoff()(attempt, exc)
        if delay is None or (
            isinstance(delay, int | float) and not isinstance(delay, bool) and 0 <= delay <= MAX_DELAY_SECONDS
        ):
            return delay
        logger.error(
            "backoff policy of %s returned %r, not seconds (0 to 100 years) or None; using the default",
            task,
            delay,
        )
        return default_backoff()(attempt, exc)

    # -- acknowledgements -------------------------------------------------------------------------
    def _ack_thread(self) -> None:
        while True:
            first = self._outcomes.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < 500:
                try:
                    item = self._outcomes.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._write(batch)
                    return
                batch.append(item)
            self._write(batch)

    def _write(self, batch: list[Outcome]) -> None:
        successes = [o for o in batch if o.ok]
        failures = [o for o in batch if not o.ok]
        accepted: set[int] = set()
        if successes:
            accepted = self._with_retries(
                "acknowledge",
                lambda: Job.objects.complete(
                    [(o.running.job.id, o.running.key, o.result) for o in successes]
                ),
                set(),
            )
        for o in successes:
            self._finished(o, "done" if o.running.key in accepted else "rejected")
        for o in failures:
            recorded = self._with_retries(
                "record failure",
                lambda o=o: Job.objects.fail(
                    [
                        Failure(
                            o.running.job.id,
                            o.running.key,
                            error_class=o.error_class,
                            message=o.message,
                            traceback=o.traceback,
                            retry_in=o.retry_in,
                        )
                    ]
                ),
                {},
            )
            outcome = recorded.get(o.running.key)
            if outcome is not None and outcome.status == "scheduled":
                self._wake.set()  # promote it when due
            label = "rejected" if outcome is None else ("dead" if outcome.status == "dead" else "retry")
            self._finished(o, label)

    def _with_retries(self, what: str, call: Any, fallback: Any) -> Any:
        """Write an outcome, riding out a dropped connection. If the database stays away the lease
        lapses and the job runs again, which at-least-once allows."""
        for attempt in range(1, 6):
            try:
                return call()
            except DB_ERRORS as exc:
                if attempt == 5:
                    logger.error("could not %s after %d tries: %s", what, attempt, exc)
                    return fallback
                self._database_trouble(what, exc, attempt)
        return fallback

    def _finished(self, o: Outcome, label: str) -> None:
        job = o.running.job
        with self._lock:
            self._forget(o.running)
            self.counts[label] += 1
            self._writes += 1
        self._wake.set()
        if label == "rejected":
            logger.warning(
                "job %d %s queue=%s attempt=%d: late %s rejected by fencing (lease lost; the job now "
                "belongs to another worker or was finished) after %.1fms",
                job.id,
                job.task,
                job.queue,
                job.attempt,
                "completion" if o.ok else "failure",
                o.duration * 1000,
            )
            return
        level = logging.INFO if label == "done" else logging.WARNING
        detail = ""
        if not o.ok:
            first_line = (o.message.splitlines() or [""])[0][:200]
            detail = f": {o.error_class}: {first_line}" if first_line else f": {o.error_class}"
            if label == "retry" and o.retry_in is not None:
                detail += f" (next attempt in {o.retry_in:.1f}s)"
        logger.log(
            level,
            "job %d %s queue=%s attempt=%d/%d %s in %.1fms%s",
            job.id,
            job.task,
            job.queue,
            job.attempt,
            job.max_attempts,
            label,
            o.duration * 1000,
            detail,
        )

    # -- heartbeat --------------------------------------------------------------------------------
    def _heartbeat_thread(self) -> None:
        while not self._forced.is_set():
            with self._lock:
                snapshot = [r for r in self._active.values() if not r.released]
            interval = min([self.heartbeat_interval, *(r.lease / 3 for r in snapshot)])
            if self._heartbeat_now.wait(interval):
                self._heartbeat_now.clear()
            if self._forced.is_set():
                return
            self._beat()

    def _beat(self) -> None:
        now = time.monotonic()
        leases: list[tuple[int, int, float]] = []  # (job id, token, lease)
        overran: list[tuple[Running, float]] = []
        with self._lock:
            for r in self._active.values():
                if r.released:
                    continue
                timeout = r.handler.timeout if r.handler else None
                if timeout and not r.finished and r.started_at is not None and now - r.started_at > timeout:
                    overran.append((r, timeout))  # lost or not, its thread is stuck: free the slot
                elif not r.lost:
                    leases.append((r.job.id, r.key, r.lease))
        for r, timeout in overran:
            self._abandon(r, timeout)
        if not leases:
            return
        try:
            beat = Job.objects.heartbeat(leases)
        except DB_ERRORS as exc:
            logger.warning("heartbeat failed (%s); will retry", str(exc).strip()[:200])
            close_old_connections()
            connections[self.alias].close()
            return
        refused = [token for _, token, _ in leases if token in beat.lost]
        with self._lock:
            # A job acknowledged between the snapshot and the beat is not lost, just finished.
            # Nor is one whose handler returned: its outcome is being written, which is what
            # refused the beat; the acknowledger reports how that ended.
            lost = [key for key in refused if key in self._active and not self._active[key].finished]
            for key in lost:  # no point beating it again (and logging this every beat)
                self._active[key].lost = True
        if lost:
            logger.warning(
                "lost the lease of job(s) %s: they were taken back by the sweeper",
                [self._active_id(t) for t in lost],
            )

    def _active_id(self, token: int) -> int | str:
        r = self._active.get(token)
        return r.job.id if r else f"token {token}"

    def _forget(self, r: Running) -> None:
        """Drop ``r`` from the in-flight table (caller holds the lock), unless that key now holds
        another run of the same job and attempt (an abandoned run outlived its rerun's claim)."""
        if self._active.get(r.key) is r:
            del self._active[r.key]

    def _abandon(self, r: Running, timeout: float) -> None:
        """A handler past its ``timeout``: stop heartbeating it (the sweeper takes the job back and
        fencing refuses this run's late result) and give its slot to a fresh thread, since Python
        cannot stop the stuck one. Once more threads are stuck than there are slots, the process
        asks to be replaced: exit code 3, which ``--processes`` (or any process manager) restarts."""
        with self._lock:
            if r.finished or self._active.get(r.key) is not r:
                return
            self._forget(r)
            r.abandoned = True
            self._stuck += 1
            stuck = self._stuck
        logger.error(
            "job %d %s overran its timeout of %.0fs; no longer extending its lease (the sweeper will "
            "take it back and this run's result will be rejected); its slot goes to a new thread",
            r.job.id,
            r.job.task,
            timeout,
        )
        if stuck > self.concurrency and not self._stopping.is_set():
            logger.error(
                "%d job threads are stuck in handlers past their timeout (more than --concurrency %d): "
                "stopping so a fresh process takes over (exit code 3)",
                stuck,
                self.concurrency,
            )
            self._exit_code = 3
            self.stop()
            return
        self._replacements += 1
        self._start_thread(self._job_thread, f"job-replacement-{self._replacements}")
        self._wake.set()

    # -- listener ---------------------------------------------------------------------------------
    def _listen_thread(self) -> None:
        wanted = set(self.queues) if self.queues else None
        channel = self.settings.NOTIFY_CHANNEL
        failures = 0
        while not self._stopping.is_set():
            conn = None
            try:
                wrapper = connections[self.alias]
                conn = wrapper.get_new_connection(wrapper.get_connection_params())
                conn.autocommit = True
                conn.execute(f'LISTEN "{channel}"')
                logger.info("listening for notifications on channel %r", channel)
                failures = 0
                self._wake.set()  # anything enqueued while we were not listening
                while not self._stopping.is_set():
                    for note in conn.notifies(timeout=1.0):
                        if wanted is None or note.payload in wanted:
                            self._wake.set()
            except Exception as exc:
                if self._stopping.is_set():
                    return
                failures += 1
                logger.warning("listener connection failed (%s); reconnecting", str(exc).strip()[:200])
                self._stopping.wait(min(5.0, 0.1 * 2 ** min(failures, 6)))
            finally:
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:
                        pass
            connections[self.alias].close()

    # -- lifecycle --------------------------------------------------------------------------------
    def _start_thread(self, target: Any, name: str) -> None:
        t = threading.Thread(target=self._guarded, args=(target,), name=f"pgjobs-{name}", daemon=True)
        t.start()
        self._threads.append(t)

    def _guarded(self, target: Any) -> None:
        """A worker thread that dies of a bug would leave its jobs heartbeated but never finished
        (stuck in ``running`` for good): stop the whole worker instead, with exit code 4, so its
        jobs are released and a fresh process (``--processes``, systemd) takes over."""
        try:
            target()
        except BaseException:
            logger.critical(
                "internal error in %s; stopping the worker", threading.current_thread().name, exc_info=True
            )
            self._exit_code = self._exit_code or 4
            self.stop()

    def _start_threads(self) -> None:
        for i in range(self.concurrency):
            self._start_thread(self._job_thread, f"job-{i}")
        self._start_thread(self._ack_thread, "ack")
        self._start_thread(self._heartbeat_thread, "heartbeat")
        if self.listen:
            self._start_thread(self._listen_thread, "listen")

    def _shutdown(self) -> int:
        """Release what has not started, wait for what runs, give back the rest. Nothing stays
        ``running`` under this worker's name."""
        self._stopping.set()
        self._release(lambda r: r.started_at is None, "released on shutdown before it started")
        deadline = time.monotonic() + self.options.shutdown_timeout
        while time.monotonic() < deadline and not self._forced.is_set():
            with self._lock:
                if not self._active:
                    break
            self._wake.wait(0.05)
            self._wake.clear()
        self._release(
            lambda r: not r.finished, "released on shutdown while running (not counted as an attempt)"
        )
        for _ in range(self.concurrency):
            self._todo.put(None)
        # Finished jobs keep their outcome: the acknowledger writes what is queued, then stops.
        self._outcomes.put(None)
        ack = next(t for t in self._threads if t.name == "pgjobs-ack")
        ack.join(timeout=2 if self._forced.is_set() else 10)
        # Whatever could not be written goes back to ready rather than waiting for its lease.
        self._release(lambda r: True, "released on shutdown: its outcome could not be written")
        self._forced.set()
        self._heartbeat_now.set()
        connections.close_all()
        return self._exit_code or (1 if self._forced_by_signal else 0)

    def _release(self, which: Any, reason: str) -> None:
        with self._lock:
            chosen = [r for r in self._active.values() if not r.released and which(r)]
            for r in chosen:
                r.released = True
        if not chosen:
            return
        keys = [(r.job.id, r.key) for r in chosen]
        released = self._with_retries("release jobs", lambda: Job.objects.release(keys, reason), set())
        with self._lock:
            for r in chosen:
                self._forget(r)
            self.counts["released"] += len(released)
        if released:
            logger.info("released %d job(s) back to ready: %s", len(released), sorted(released)[:20])

    def _install_signal_handlers(self) -> None:
        def on_signal(signum: int, frame: FrameType | None) -> None:
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

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
