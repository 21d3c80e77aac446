"""Recovery and retention: sweeping expired leases (one sweeper at a time) and pruning old jobs."""

from __future__ import annotations

import pytest

from django_pgjobs import store as sql
from django_pgjobs.exceptions import InvalidJob
from django_pgjobs.models import Job
from django_pgjobs.store import SWEEP_LOCK_KEY, SweepResult
from tests.factories import JobFactory
from tests.helpers import db_now, job_count, past, row_text

pytestmark = pytest.mark.django_db


def expired(**kwargs) -> Job:
    """A running job whose lease lapsed an hour ago (well before the test transaction's now())."""
    options = {"lease_expires_at": past(3600), "updated_at": past(), **kwargs}
    return JobFactory(expired=True, **options)


# -- sweep ---------------------------------------------------------------------------------------
def test_sweep_returns_an_expired_lease_to_ready_in_its_old_place_in_line():
    job = expired(run_at=past(7200))
    newer = JobFactory(run_at=past(60))  # enqueued since; due, waiting
    result = Job.objects.sweep()

    assert result == SweepResult(ran=True, to_ready=[job.pk], to_dead=[])
    stored = Job.objects.get(pk=job.pk)
    assert stored.status == "ready"
    # Its run_at is kept: it does not queue behind everything enqueued while its worker was dying.
    assert stored.run_at == job.run_at
    assert stored.attempts == 1  # the lapsed attempt counts
    assert stored.finished_at is None
    assert (stored.locked_by, stored.locked_at, stored.lease_expires_at) == (None, None, None)
    assert stored.last_error == "lease expired (worker worker-gone, attempt 1)"
    (entry,) = stored.history
    assert entry["outcome"] == "lease expired" and entry["message"] == "lease expired"
    assert entry["attempt"] == 1 and entry["worker"] == "worker-gone"
    # It is claimed again first.
    assert [j.id for j in Job.objects.claim(None, "w2", limit=2)] == [job.pk, newer.pk]


def test_sweep_dead_letters_a_job_whose_attempts_are_spent():
    job = expired(attempts=3, max_attempts=3)
    result = Job.objects.sweep()

    assert result == SweepResult(ran=True, to_ready=[], to_dead=[job.pk])
    stored = Job.objects.get(pk=job.pk)
    assert stored.status == "dead"
    assert stored.finished_at == db_now()
    assert stored.run_at == job.run_at
    assert stored.last_error == "lease expired (worker worker-gone, attempt 3)"
    assert stored.history[-1]["outcome"] == "lease expired"


def test_sweep_leaves_live_leases_and_other_states_alone():
    live = JobFactory(running=True, updated_at=past())
    others = [
        JobFactory(run_at=past(), updated_at=past()),
        JobFactory(done=True, lease_expires_at=past(), updated_at=past()),
        JobFactory(dead=True, lease_expires_at=past(), updated_at=past()),
        JobFactory(delayed=True, updated_at=past()),
    ]
    before = {j.pk: row_text(j.pk) for j in [live, *others]}
    assert Job.objects.sweep() == SweepResult(ran=True)
    assert {pk: row_text(pk) for pk in before} == before


def test_sweep_takes_at_most_limit_rows_per_call():
    jobs = [expired(lease_expires_at=past(60 * i)) for i in (1, 60, 10)]

    first = Job.objects.sweep(limit=2).to_ready
    assert len(first) == 2
    assert Job.objects.filter(status="running").count() == 1
    second = Job.objects.sweep(limit=2).to_ready
    assert sorted(first + second) == sorted(j.pk for j in jobs)
    assert Job.objects.sweep(limit=2) == SweepResult(ran=True)


def test_sweep_reports_ready_and_dead_separately():
    a = expired()
    b = expired(attempts=5, max_attempts=5)
    c = expired(attempts=2, max_attempts=5)
    result = Job.objects.sweep()
    assert result.to_ready == sorted([a.pk, c.pk])
    assert result.to_dead == [b.pk]


def test_sweep_is_refused_while_another_connection_holds_the_lock(pg_connect):
    job = expired()
    before = row_text(job.pk)
    other = pg_connect()
    with other.transaction():
        (held,) = other.execute(sql.TRY_SWEEP_LOCK, {"key": SWEEP_LOCK_KEY}).fetchone()
        assert held is True
        assert Job.objects.sweep() == SweepResult(ran=False)
        assert row_text(job.pk) == before
    # Released at the other transaction's commit.
    assert Job.objects.sweep().to_ready == [job.pk]


def test_sweep_without_the_lock_runs_even_when_it_is_held(pg_connect):
    job = expired()
    other = pg_connect()
    with other.transaction():
        other.execute(sql.TRY_SWEEP_LOCK, {"key": SWEEP_LOCK_KEY})
        assert Job.objects.sweep(lock=False).to_ready == [job.pk]


def test_sweep_preview_counts_without_changing_anything():
    jobs = [expired(), expired(), expired(attempts=5, max_attempts=5), JobFactory(running=True)]
    before = {j.pk: row_text(j.pk) for j in jobs}
    assert Job.objects.sweep_preview() == (2, 1, 0)
    assert {pk: row_text(pk) for pk in before} == before


@pytest.mark.django_db(transaction=True)
def test_sweep_wakes_workers_of_queues_with_jobs_back_to_ready(pg_connect):
    expired(queue="swept-q")
    expired(queue="dead-q", attempts=5, max_attempts=5)
    listener = pg_connect()
    listener.execute("LISTEN django_pgjobs")
    Job.objects.sweep()
    Job.objects.enqueue("tests.noop", queue="marker")
    assert [n.payload for n in listener.notifies(timeout=10, stop_after=2)] == ["swept-q", "marker"]


# -- prune ---------------------------------------------------------------------------------------
def test_prune_deletes_old_finished_jobs_in_bounded_batches():
    old_done = [JobFactory(done=True, finished_at=past(7200 + i)) for i in range(5)]
    recent_done = JobFactory(done=True, finished_at=past(60))
    old_dead = JobFactory(dead=True, finished_at=past(7200))
    ready = JobFactory()
    running = JobFactory(running=True)

    assert Job.objects.prune("done", 3600, limit=2) == 2
    # Oldest first.
    remaining_old = set(Job.objects.filter(pk__in=[j.pk for j in old_done]).values_list("pk", flat=True))
    assert remaining_old == {j.pk for j in old_done[:3]}
    assert Job.objects.prune("done", 3600, limit=2) == 2
    assert Job.objects.prune("done", 3600, limit=2) == 1
    assert Job.objects.prune("done", 3600, limit=2) == 0

    kept = set(Job.objects.values_list("pk", flat=True))
    assert kept == {recent_done.pk, old_dead.pk, ready.pk, running.pk}


def test_prune_dead_and_cancelled_jobs_is_separate():
    old_dead = JobFactory(dead=True, finished_at=past(7200))
    old_cancelled = JobFactory(cancelled=True, finished_at=past(7200))
    JobFactory(done=True, finished_at=past(7200))
    assert Job.objects.prune("dead", 3600) == 1
    assert not Job.objects.filter(pk=old_dead.pk).exists()
    assert Job.objects.prune("cancelled", 3600) == 1
    assert not Job.objects.filter(pk=old_cancelled.pk).exists()
    assert job_count() == 1


@pytest.mark.parametrize("status", ["ready", "scheduled", "running", "bogus"])
def test_prune_refuses_unfinished_states(status):
    JobFactory(finished_at=past(7200))
    with pytest.raises(InvalidJob, match="only done, dead or cancelled"):
        Job.objects.prune(status, 0)
    assert job_count() == 1
