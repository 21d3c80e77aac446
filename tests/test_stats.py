"""queue_stats(): counts by state, the oldest due wait, the outcome windows, paused queues and live
workers, against rows put in place with the factories at chosen times."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.utils import timezone

from django_pgjobs import queue_control
from django_pgjobs import stats as stats_module
from django_pgjobs.models import Status, WorkerProcess
from django_pgjobs.stats import HOUR_SECONDS, QueueStats, queue_stats, snapshot
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def ago(seconds: float) -> dt.datetime:
    return timezone.now() - dt.timedelta(seconds=seconds)


def worker(name: str, queues: list[str], *, live: bool = True, in_flight: int = 0) -> WorkerProcess:
    now = timezone.now()
    return WorkerProcess.objects.using("default").create(
        name=f"{name}#1",
        worker_id=name,
        host="test-host",
        pid=4242,
        queues=queues,
        queue_limits={},
        concurrency=4,
        version="test",
        started_at=now - dt.timedelta(minutes=5),
        heartbeat_at=now if live else now - dt.timedelta(minutes=2),
        expires_at=now + dt.timedelta(seconds=30) if live else now - dt.timedelta(seconds=30),
        in_flight=in_flight,
    )


def by_queue() -> dict[str, QueueStats]:
    return {q.queue: q for q in queue_stats()}


def test_no_jobs_no_queues():
    assert queue_stats() == []


def test_every_state_is_counted_and_absent_ones_are_zero():
    JobFactory.create_batch(2, queue="mail")
    JobFactory(queue="mail", delayed=True)
    JobFactory(queue="mail", running=True)
    JobFactory(queue="mail", done=True)
    JobFactory(queue="mail", dead=True)
    JobFactory(queue="mail", cancelled=True)
    JobFactory(queue="other", running=True)

    stats = by_queue()
    assert list(stats) == ["mail", "other"]
    assert stats["mail"].counts == {
        "scheduled": 1,
        "ready": 2,
        "running": 1,
        "done": 1,
        "dead": 1,
        "cancelled": 1,
    }
    assert set(stats["other"].counts) == {s.value for s in Status}
    assert stats["other"].counts["running"] == 1
    assert sum(stats["other"].counts.values()) == 1
    assert stats["mail"].final_window_seconds == HOUR_SECONDS


def test_outcome_windows_and_exact_counts():
    JobFactory(queue="q", done=True, finished_at=ago(20))  # last minute
    JobFactory(queue="q", done=True, finished_at=ago(25))  # last minute
    JobFactory(queue="q", done=True, finished_at=ago(30 * 60))  # last hour
    JobFactory(queue="q", done=True, finished_at=ago(2 * 3600))  # older
    JobFactory(queue="q", dead=True, finished_at=ago(10))  # last minute
    JobFactory(queue="q", dead=True, finished_at=ago(50 * 60))  # last hour
    JobFactory(queue="q", dead=True, finished_at=ago(3 * 3600))  # older
    JobFactory(queue="q", cancelled=True, finished_at=ago(5 * 60))
    JobFactory(queue="q", cancelled=True, finished_at=ago(5 * 3600))
    # A queue whose only jobs finished long ago: nothing is happening there.
    JobFactory(queue="quiet", done=True, finished_at=ago(6 * 3600))

    q = by_queue()
    assert set(q) == {"q"}
    s = q["q"]
    assert (s.done_last_minute, s.done_last_hour) == (2, 3)
    assert (s.failed_last_minute, s.failed_last_hour) == (1, 2)
    # By default the final states count the last hour's.
    assert (s.counts["done"], s.counts["dead"], s.counts["cancelled"]) == (3, 2, 1)

    exact = {x.queue: x for x in queue_stats(exact=True)}
    assert set(exact) == {"q", "quiet"}
    e = exact["q"]
    assert e.final_window_seconds is None
    assert (e.counts["done"], e.counts["dead"], e.counts["cancelled"]) == (4, 3, 2)
    # The windows are the same either way.
    assert (e.done_last_minute, e.done_last_hour, e.failed_last_minute, e.failed_last_hour) == (2, 3, 1, 2)
    assert exact["quiet"].counts["done"] == 1


def test_oldest_due_wait_is_the_oldest_ready_run_at():
    JobFactory(queue="q", run_at=ago(120))
    JobFactory(queue="q", run_at=ago(10))
    JobFactory(queue="q", delayed=True)  # not due: does not count
    JobFactory(queue="idle", running=True, run_at=ago(900))  # running: not waiting

    stats = by_queue()
    assert 115 < stats["q"].oldest_due_wait_seconds < 180
    assert stats["idle"].oldest_due_wait_seconds is None


def test_a_scheduled_job_past_its_run_at_is_due_too():
    """No worker promotes scheduled jobs when none runs: they are the ones that wait the longest."""
    JobFactory(queue="q", status=Status.SCHEDULED, run_at=ago(600))
    JobFactory(queue="q", run_at=ago(60))

    wait = by_queue()["q"].oldest_due_wait_seconds
    assert 595 < wait < 660


def test_paused_queue_is_listed_even_without_jobs():
    JobFactory(queue="mail")
    assert queue_control.pause("idle", by="tester")

    stats = by_queue()
    assert list(stats) == ["idle", "mail"]
    assert stats["idle"].paused is True
    assert stats["mail"].paused is False
    assert sum(stats["idle"].counts.values()) == 0
    assert [p.queue for p in snapshot().pauses] == ["idle"]


def test_live_workers_per_queue_and_expired_ones_not_counted():
    JobFactory(queue="mail")
    JobFactory(queue="default")
    worker("all", [])  # claims from every queue
    worker("mailer", ["mail", "reports"], in_flight=3)
    worker("gone", ["mail", "ghost"], live=False)

    stats = by_queue()
    # "reports" is listed because a live worker names it; "ghost" only by an expired one: not listed.
    assert list(stats) == ["default", "mail", "reports"]
    assert stats["mail"].live_workers == 2
    assert stats["default"].live_workers == 1
    assert stats["reports"].live_workers == 2
    snap = snapshot()
    assert [w.worker_id for w in snap.workers] == ["all", "mailer"]


@pytest.mark.django_db(transaction=True, databases=["default", "jobs"])
def test_reads_from_the_jobs_database_alias_only():
    """With PGJOBS["DATABASE"] = "jobs" nothing is read from "default" (which may hold no jobs)."""
    from django.db import connections
    from django.test import override_settings
    from django.test.utils import CaptureQueriesContext

    JobFactory(queue="mail")
    worker("all", [])
    with (
        override_settings(PGJOBS={"DATABASE": "jobs"}),
        CaptureQueriesContext(connections["default"]) as on_default,
        CaptureQueriesContext(connections["jobs"]) as on_jobs,
    ):
        stats = queue_stats()
    assert [(q.queue, q.live_workers) for q in stats] == [("mail", 1)]
    assert on_default.captured_queries == []
    assert len(on_jobs.captured_queries) >= 4
    # Outside a transaction, every statement reads one snapshot.
    sql = [q["sql"] for q in on_jobs.captured_queries]
    assert sql[sql.index("BEGIN") + 1] == stats_module.ONE_SNAPSHOT


def test_the_backlog_statements_use_their_partial_indexes():
    """The point of the module: no statement of the default snapshot reads the whole table."""
    from django_pgjobs import stats

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny table would be scanned anyway
        plans = []
        for statement, params in (
            (stats.BACKLOG, None),
            (stats.FINISHED, {"minute": 60.0, "hour": 3600.0}),
        ):
            cursor.execute("EXPLAIN " + statement, params)
            plans.append("\n".join(r[0] for r in cursor.fetchall()))
    backlog, finished = plans
    # Ready jobs through either claim index (both are partial on ready; the planner picks one).
    assert "pgjobs_job_claim_idx" in backlog or "pgjobs_job_claim_any_idx" in backlog, backlog
    for index in ("pgjobs_job_scheduled_idx", "pgjobs_job_running_idx"):
        assert index in backlog, backlog
    assert "pgjobs_job_finished_idx" in finished
    # Each finished branch is a range of the index (status and time), not a filter over it.
    assert finished.count("Index Cond") >= 3 or finished.count("Recheck Cond") >= 3
