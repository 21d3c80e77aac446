"""sweepjobs: lease recovery, dry run, retention in batches, the advisory lock, --loop."""

from __future__ import annotations

import datetime as dt
import io
import signal
import threading

import pytest
from django.core.checks import Error
from django.core.management import call_command
from django.db import connection, connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_pgjobs.checks import check_pgjobs
from django_pgjobs.models import Job
from django_pgjobs.store import SWEEP_LOCK_KEY
from django_pgjobs.sweeper import run_sweep
from tests.factories import force_update
from tests.processes import WorkerProcess, wait_for, worker_env
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)


def expired_running(n: int, *, max_attempts: int = 5, worker: str = "w-dead") -> list[int]:
    """``n`` jobs claimed by a worker that then vanished: running, with a lease already lapsed."""
    ids = [jobs.echo.using(max_attempts=max_attempts).enqueue(i).id for i in range(n)]
    claimed = Job.objects.claim(None, worker, limit=n, lease=0.001)
    assert sorted(j.id for j in claimed) == sorted(ids)
    wait_for(lambda: sum(Job.objects.sweep_preview()) == n, 10, "leases to lapse")
    return ids


def sweepjobs(*args: str) -> str:
    out = io.StringIO()
    call_command("sweepjobs", *args, stdout=out)
    return out.getvalue()


def finished(status: str, n: int, age: dt.timedelta) -> list[int]:
    ids = [jobs.echo.using(max_attempts=1).enqueue(f"{status}-{i}").id for i in range(n)]
    force_update(ids, status=status, finished_at=timezone.now() - age, attempts=1, updated_at=timezone.now())
    return ids


def test_one_pass_returns_expired_leases_to_ready_or_dead_with_history():
    ready_ids = expired_running(3, max_attempts=5, worker="w-a")
    dead_ids = []
    for i in range(2):  # a job on its last attempt goes dead, not back to ready
        job = jobs.echo.using(max_attempts=1).enqueue(f"last-{i}")
        Job.objects.claim(None, "w-b", limit=1, lease=0.001)
        dead_ids.append(job.id)
    wait_for(lambda: Job.objects.sweep_preview() == (3, 2, 0), 10, "leases to lapse")
    out = sweepjobs()
    assert "expired leases: 3 back to ready, 2 dead" in out, out
    for job in Job.objects.filter(pk__in=ready_ids):
        assert job.status == "ready" and job.locked_by is None and job.lease_expires_at is None
        assert job.run_at <= timezone.now()
        entry = job.history[-1]
        assert entry["outcome"] == "lease expired"
        assert entry["worker"] == "w-a" and entry["attempt"] == 1
        assert job.last_error == "lease expired (worker w-a, attempt 1)"
    for job in Job.objects.filter(pk__in=dead_ids):
        assert job.status == "dead" and job.finished_at is not None
        assert job.history[-1]["outcome"] == "lease expired" and job.history[-1]["worker"] == "w-b"
    # A second pass has nothing to do.
    assert "expired leases: 0 back to ready, 0 dead" in sweepjobs()


def test_live_leases_are_left_alone():
    job = jobs.echo.enqueue("alive")
    Job.objects.claim(None, "w-live", limit=1, lease=60)
    assert "0 back to ready, 0 dead" in sweepjobs()
    job.refresh_from_db()
    assert job.status == "running" and job.locked_by == "w-live"


def test_dry_run_reports_and_changes_nothing():
    ids = expired_running(4)
    old_done = finished("done", 3, dt.timedelta(days=30))
    before = list(Job.objects.order_by("id").values_list("id", "status", "updated_at"))
    out = sweepjobs("--dry-run")
    assert "dry run: expired leases: 4 would go back to ready, 0 would go dead" in out, out
    assert "3 done would be pruned" in out, out
    assert list(Job.objects.order_by("id").values_list("id", "status", "updated_at")) == before
    assert Job.objects.filter(pk__in=ids, status="running").count() == 4
    assert Job.objects.filter(pk__in=old_done).count() == 3


@override_settings(PGJOBS={"BATCH_SIZE": 7, "RETENTION_DONE_SECONDS": 3600.0})
def test_retention_prunes_old_done_jobs_in_batches_and_keeps_everything_else():
    old_done = finished("done", 30, dt.timedelta(hours=2))
    recent_done = finished("done", 3, dt.timedelta(minutes=5))
    old_dead = finished("dead", 4, dt.timedelta(days=365))  # dead retention is off by default
    ready = jobs.echo.enqueue("waiting").id
    with CaptureQueriesContext(connection) as queries:
        out = sweepjobs()
    assert "30 done pruned (older than 1h)" in out and "0 dead pruned (dead retention off)" in out
    deletes = [q for q in queries.captured_queries if "DELETE FROM pgjobs_job" in q["sql"]]
    assert len(deletes) == 5, len(deletes)  # 7 + 7 + 7 + 7 + 2: bounded batches, one statement each
    assert not Job.objects.filter(pk__in=old_done).exists()
    assert Job.objects.filter(pk__in=recent_done).count() == 3
    assert Job.objects.filter(pk__in=old_dead).count() == 4
    assert Job.objects.filter(pk=ready).exists()


@override_settings(PGJOBS={"RETENTION_DONE_SECONDS": None, "RETENTION_DEAD_SECONDS": 86400.0})
def test_dead_retention_when_configured_and_done_retention_off():
    old_dead = finished("dead", 5, dt.timedelta(days=2))
    young_dead = finished("dead", 2, dt.timedelta(hours=1))
    old_done = finished("done", 2, dt.timedelta(days=400))
    assert sweepjobs("--no-prune").endswith("retention skipped\n")
    assert Job.objects.filter(pk__in=old_dead).count() == 5
    out = sweepjobs()
    assert "0 done pruned (done retention off), 5 dead pruned (older than 1d)" in out, out
    assert not Job.objects.filter(pk__in=old_dead).exists()
    assert Job.objects.filter(pk__in=young_dead + old_done).count() == 4


def test_pruning_a_done_job_frees_its_idempotency_key():
    """Documented behaviour: retention ends idempotency protection for a pruned job's key."""
    first, created = Job.objects.enqueue("tests.echo", {"args": [1], "kwargs": {}}, idempotency_key="k:1")
    assert created
    force_update(first.id, status="done", finished_at=timezone.now() - dt.timedelta(days=30))
    again, created = Job.objects.enqueue("tests.echo", {"args": [1], "kwargs": {}}, idempotency_key="k:1")
    assert not created and again.id == first.id  # within retention: still a duplicate
    sweepjobs()
    third, created = Job.objects.enqueue("tests.echo", {"args": [1], "kwargs": {}}, idempotency_key="k:1")
    assert created and third.id != first.id


def test_another_sweeper_holding_the_lock_makes_a_pass_step_aside(pg_connect):
    ids = expired_running(2)
    holder = pg_connect()
    with holder.transaction():
        holder.execute("SELECT pg_advisory_xact_lock(%s)", [SWEEP_LOCK_KEY])
        out = sweepjobs()
        assert "0 back to ready, 0 dead" in out and "another sweeper holds the sweep lock" in out, out
        assert Job.objects.filter(pk__in=ids, status="running").count() == 2
    assert "2 back to ready" in sweepjobs()


def test_concurrent_unlocked_sweeps_recover_each_job_exactly_once():
    """The advisory lock is an optimisation: without it, SKIP LOCKED and the re-checked WHERE still
    make every expired lease recovered exactly once."""
    ids = expired_running(300)
    barrier = threading.Barrier(4)
    reports = []

    def sweep() -> None:
        try:
            barrier.wait()
            reports.append(run_sweep(lock=False, batch_size=25, prune=False))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sweep) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    recovered = [i for r in reports for i in r.to_ready]
    assert len(reports) == 4
    assert sorted(recovered) == sorted(ids)  # no job twice, none missed
    for job in Job.objects.filter(pk__in=ids):
        assert job.status == "ready"
        assert [h["outcome"] for h in job.history] == ["lease expired"]


def test_concurrent_sweepjobs_processes():
    ids = expired_running(200)
    env = worker_env()
    procs = [WorkerProcess("--batch-size", "10", env=env, command="sweepjobs") for _ in range(4)]
    try:
        outputs = []
        for p in procs:
            assert p.wait(60) == 0, p.output()
            outputs.append(p.output())
    finally:
        for p in procs:
            p.stop()
    assert Job.objects.filter(pk__in=ids, status="ready").count() == 200
    assert all(len(j.history) == 1 for j in Job.objects.filter(pk__in=ids))
    total = sum(int(o.split("expired leases: ")[1].split()[0]) for o in outputs if "expired leases" in o)
    assert total == 200, outputs


def test_loop_keeps_sweeping_until_sigterm(workers):
    sweeper = workers("--loop", "--interval", "0.2", command="sweepjobs")
    wait_for(lambda: "sweeping every 0.2s" in sweeper.output(), 30, "sweeper start")
    ids = expired_running(2)
    wait_for(lambda: Job.objects.filter(pk__in=ids, status="ready").count() == 2, 20, "loop to sweep")
    # The report is printed after the sweep commits: wait for it rather than race it.
    wait_for(lambda: "2 back to ready" in sweeper.output(), 20, "the sweep's report")
    sweeper.signal(signal.SIGTERM)
    assert sweeper.wait(20) == 0, sweeper.output()
    assert "sweeper stopped" in sweeper.output()


@pytest.mark.parametrize(
    ("lease", "heartbeat", "ok"), [(60, 10, True), (60, 20, True), (60, 21, False), (30, 30, False)]
)
def test_system_check_rejects_a_heartbeat_not_well_under_the_lease(lease, heartbeat, ok):
    with override_settings(PGJOBS={"LEASE_SECONDS": lease, "HEARTBEAT_SECONDS": heartbeat}):
        errors = [m for m in check_pgjobs() if isinstance(m, Error) and m.id == "django_pgjobs.E004"]
    assert (not errors) is ok


def test_default_timings_are_consistent():
    from django_pgjobs.conf import PgJobsSettings

    d = PgJobsSettings()
    assert d.HEARTBEAT_SECONDS <= d.LEASE_SECONDS / 3
    assert d.SWEEP_INTERVAL_SECONDS < d.LEASE_SECONDS
    assert d.RETENTION_DONE_SECONDS is not None and d.RETENTION_DONE_SECONDS >= 7 * 24 * 3600
