"""Per-queue figures for operators: ``manage.py jobstats`` and the Prometheus metrics read them here.

The job table of a busy deployment is mostly ``done`` rows kept for the retention window (days of
them: a million rows is ordinary), and these figures are read often (a scrape every 15-30 s, a
``jobstats --watch`` every 2 s). So by default nothing here reads every row:

* ``scheduled``, ``ready`` and ``running`` are counted **exactly**, each through its own partial
  index (``pgjobs_job_scheduled_idx``, ``pgjobs_job_claim_idx``, ``pgjobs_job_running_idx``): their
  size is the backlog and the fleet's concurrency, not the table's.
* ``done``, ``dead`` and ``cancelled`` are counted **within windows** (finished in the last minute,
  in the last hour) through ``pgjobs_job_finished_idx`` on ``(status, finished_at)``: a fixed
  slice of the table however long retention is. ``counts`` then holds the last hour's for them
  (``QueueStats.final_window_seconds`` says so).
* ``exact=True`` counts every state over the whole table with one ``GROUP BY queue, status`` (a
  parallel sequential scan: the plain ``GROUP BY`` took 200-430 ms on 1,000,000 jobs on 2 shared
  cores, the default snapshot 35-60 ms, always 0.14-0.18x of it in the same run;
  ``benchmarks/bench_stats.py``). For ``jobstats --exact``, not for a scrape.

Failed means *finished dead in the window*. A failed attempt that was retried leaves a ``ready`` or
``scheduled`` row whose failure time lives only in its ``history`` JSON, which no index holds:
counting those would read every backlog row's history, so they are not counted (the worker's
log and the job's history have them).

Queues are those with a job in a counted state (so, by default, a queue whose only jobs finished
over an hour ago is not listed: nothing is happening there), a paused row, or a live worker naming
it. All times are the database's clock (``statement_timestamp()``), as the sweeper and the claim
use, not the web server's.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction

from .conf import get_settings
from .fleet import live_workers
from .models import QueuePause, Status, WorkerProcess
from .queue_control import paused

#: The window ``counts`` of the final states cover by default (and ``done_last_hour`` always).
HOUR_SECONDS = 3600.0
MINUTE_SECONDS = 60.0

#: The live backlog, exactly, one partial index each; and how long the oldest *due* job has waited.
#: A due job is a ``ready`` one or a ``scheduled`` one whose ``run_at`` has passed but that no worker
#: has promoted yet: with no worker running, due jobs pile up as ``scheduled`` and only this sees
#: them. Its ``FILTER`` reads no more rows than the count already does.
#: ``UNION ALL`` of one branch per state: a single ``status IN (...)`` cannot be matched to the
#: three partial indexes and becomes a scan of the table.
BACKLOG = """
SELECT j.queue, 'ready' AS status, count(*) AS n,
       extract(epoch FROM statement_timestamp() - min(j.run_at))::float8 AS oldest_due_wait
FROM pgjobs_job AS j WHERE j.status = 'ready' GROUP BY j.queue
UNION ALL
SELECT j.queue, 'scheduled', count(*),
       extract(epoch FROM statement_timestamp() - min(j.run_at)
                             FILTER (WHERE j.run_at <= statement_timestamp()))::float8
FROM pgjobs_job AS j WHERE j.status = 'scheduled' GROUP BY j.queue
UNION ALL
SELECT j.queue, 'running', count(*), NULL
FROM pgjobs_job AS j WHERE j.status = 'running' GROUP BY j.queue
"""

#: Jobs that finished in the last hour, and of those in the last minute, by queue and final state:
#: a range of ``pgjobs_job_finished_idx`` per state (the table's newest pages, since a job finishes
#: soon after it is appended). One branch per state: ``status IN ('done', 'dead', 'cancelled')`` is
#: the index's own predicate, so the planner drops it from the index condition, is left with a
#: range on the index's *second* column, and scans the table instead (measured: 250 ms instead of
#: 45 ms on a million jobs).
FINISHED = """
SELECT f.queue, f.status, count(*) AS last_hour,
       count(*) FILTER (WHERE f.finished_at >= statement_timestamp() - make_interval(secs => %(minute)s))
FROM (
    SELECT j.queue, j.status, j.finished_at FROM pgjobs_job AS j
    WHERE j.status = 'done' AND j.finished_at >= statement_timestamp() - make_interval(secs => %(hour)s)
    UNION ALL
    SELECT j.queue, j.status, j.finished_at FROM pgjobs_job AS j
    WHERE j.status = 'dead' AND j.finished_at >= statement_timestamp() - make_interval(secs => %(hour)s)
    UNION ALL
    SELECT j.queue, j.status, j.finished_at FROM pgjobs_job AS j
    WHERE j.status = 'cancelled'
      AND j.finished_at >= statement_timestamp() - make_interval(secs => %(hour)s)
) AS f
GROUP BY f.queue, f.status
"""

#: ``exact=True``: every state over the whole table (a parallel sequential scan; see the module).
ALL_COUNTS = "SELECT j.queue, j.status, count(*) FROM pgjobs_job AS j GROUP BY j.queue, j.status"

NOW = "SELECT statement_timestamp()"
#: Every statement of a snapshot sees the same committed state (see :func:`snapshot`).
ONE_SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"


@dataclass(frozen=True)
class QueueStats:
    """One queue's figures, as :func:`queue_stats` read them."""

    queue: str
    #: Jobs by state, every :class:`~django_pgjobs.models.Status` value present (0 if none). The
    #: final states (done, dead, cancelled) count those finished in the last
    #: ``final_window_seconds``, or every row when that is None (``exact=True``).
    counts: dict[str, int]
    #: Seconds the oldest due job (ready, or scheduled and past its run_at) has waited since its
    #: ``run_at``; None when nothing is due.
    oldest_due_wait_seconds: float | None
    done_last_minute: int
    failed_last_minute: int
    done_last_hour: int
    failed_last_hour: int
    #: Live workers that claim from this queue (those naming it and those serving every queue).
    live_workers: int
    paused: bool
    final_window_seconds: float | None = HOUR_SECONDS

    def as_dict(self) -> dict[str, Any]:
        """The stable JSON form (``jobstats --json``)."""
        return {
            "queue": self.queue,
            "counts": dict(self.counts),
            "final_window_seconds": self.final_window_seconds,
            "oldest_due_wait_seconds": self.oldest_due_wait_seconds,
            "done_last_minute": self.done_last_minute,
            "failed_last_minute": self.failed_last_minute,
            "done_last_hour": self.done_last_hour,
            "failed_last_hour": self.failed_last_hour,
            "live_workers": self.live_workers,
            "paused": self.paused,
        }


@dataclass(frozen=True)
class Snapshot:
    """Everything one look at the fleet reads: the queues, the live workers, the paused rows, and
    the database's time they were read at. ``jobstats`` and the metrics take one per refresh, so
    each reads the workers table once."""

    queues: list[QueueStats]
    workers: list[WorkerProcess]
    pauses: list[QueuePause]
    generated_at: dt.datetime
    exact: bool = False


def snapshot(using: str | None = None, *, exact: bool = False) -> Snapshot:
    """Read the fleet once: five or six short statements, none of which scans the table unless
    ``exact`` (see the module docstring for why, and for what the default counts mean).

    They run in one ``REPEATABLE READ READ ONLY`` transaction when the caller has none open, so a
    job that finishes meanwhile is counted once (as running, or as done), not in both statements or
    in neither. Inside the caller's transaction they read with its isolation."""
    alias = using or get_settings().DATABASE
    if connections[alias].in_atomic_block:
        return _read(alias, exact)
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(ONE_SNAPSHOT)  # the transaction's first statement
        return _read(alias, exact)


def _read(alias: str, exact: bool) -> Snapshot:
    counts: dict[str, dict[str, int]] = {}
    waits: dict[str, float] = {}
    finished: dict[str, dict[str, tuple[int, int]]] = {}
    with connections[alias].cursor() as cursor:
        cursor.execute(NOW)
        generated_at = cursor.fetchone()[0]
        cursor.execute(BACKLOG)
        for queue, status, n, wait in cursor.fetchall():
            counts.setdefault(queue, {})[status] = n
            if wait is not None:
                waits[queue] = max(waits.get(queue, 0.0), max(0.0, wait))
        cursor.execute(FINISHED, {"minute": MINUTE_SECONDS, "hour": HOUR_SECONDS})
        for queue, status, last_hour, last_minute in cursor.fetchall():
            finished.setdefault(queue, {})[status] = (last_hour, last_minute)
            if not exact:
                counts.setdefault(queue, {})[status] = last_hour
        if exact:
            cursor.execute(ALL_COUNTS)
            for queue, status, n in cursor.fetchall():
                counts.setdefault(queue, {})[status] = n
    workers = list(live_workers(alias).order_by("worker_id", "name"))
    pauses = paused(alias)
    paused_names = {p.queue for p in pauses}
    named = {q for w in workers for q in (w.queues or [])}

    queues = []
    for queue in sorted(set(counts) | set(finished) | paused_names | named):
        by_state = {s.value: counts.get(queue, {}).get(s.value, 0) for s in Status}
        outcomes = finished.get(queue, {})
        queues.append(
            QueueStats(
                queue=queue,
                counts=by_state,
                oldest_due_wait_seconds=waits.get(queue),
                done_last_minute=outcomes.get(Status.DONE, (0, 0))[1],
                failed_last_minute=outcomes.get(Status.DEAD, (0, 0))[1],
                done_last_hour=outcomes.get(Status.DONE, (0, 0))[0],
                failed_last_hour=outcomes.get(Status.DEAD, (0, 0))[0],
                live_workers=sum(1 for w in workers if w.claims_from(queue)),
                paused=queue in paused_names,
                final_window_seconds=None if exact else HOUR_SECONDS,
            )
        )
    return Snapshot(queues=queues, workers=workers, pauses=pauses, generated_at=generated_at, exact=exact)


def queue_stats(using: str | None = None, *, exact: bool = False) -> list[QueueStats]:
    """Per-queue figures, by queue name (see the module docstring for what is counted and how)."""
    return snapshot(using, exact=exact).queues
