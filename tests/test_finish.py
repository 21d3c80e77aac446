"""Writes after the claim: complete, fail, heartbeat, release; each fenced by worker id and attempt."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import override_settings

from django_pgjobs.exceptions import InvalidJob
from django_pgjobs.managers import MAX_LAST_ERROR
from django_pgjobs.models import Job
from tests.factories import JobFactory
from tests.helpers import db_now, past, row_text

pytestmark = pytest.mark.django_db

WORKER = "worker-test"  # the running trait's locked_by


def running(**kwargs) -> Job:
    """A claimed job whose updated_at is in the past, so any write to it would show."""
    return JobFactory(running=True, updated_at=past(), **kwargs)


def fail(job: Job, *, worker: str = WORKER, attempt: int | None = None, retry_in=10.0, **kwargs):
    options = {"error_class": "ValueError", "message": "bad value", "traceback": "Traceback\nValueError"}
    options.update(kwargs)
    return Job.objects.fail(
        job.pk, worker, job.attempts if attempt is None else attempt, retry_in=retry_in, **options
    )


# -- complete ------------------------------------------------------------------------------------
def test_complete_marks_done_with_result_and_history():
    job = running()
    assert Job.objects.complete(job.pk, WORKER, 1, result={"sent": [1, 2]}) is True

    now = db_now()
    stored = Job.objects.get(pk=job.pk)
    assert stored.status == "done"
    assert stored.result == {"sent": [1, 2]}
    assert stored.finished_at == now and stored.updated_at == now
    assert (stored.locked_by, stored.locked_at, stored.lease_expires_at) == (None, None, None)
    assert stored.attempts == 1
    (entry,) = stored.history
    assert entry["attempt"] == 1 and entry["worker"] == WORKER and entry["outcome"] == "done"
    assert {"started_at", "finished_at"} <= entry.keys()
    assert "error_class" not in entry and "traceback" not in entry  # nulls are stripped


def test_complete_with_no_result_stores_json_null():
    job = running()
    assert Job.objects.complete(job.pk, WORKER, 1)
    assert Job.objects.get(pk=job.pk).result is None


@pytest.mark.parametrize("trait", ["done", "dead", "delayed"])
def test_complete_refuses_a_job_that_is_not_running(trait):
    job = JobFactory(**{trait: True}, attempts=1, locked_by=WORKER, updated_at=past())
    before = row_text(job.pk)
    assert Job.objects.complete(job.pk, WORKER, 1) is False
    assert row_text(job.pk) == before


@pytest.mark.parametrize(
    "worker, attempt",
    [("someone-else", 1), (WORKER, 2), (WORKER, 0)],
    ids=["worker", "attempt+1", "attempt-1"],
)
def test_stale_complete_changes_nothing(worker, attempt):
    job = running()
    before = row_text(job.pk)
    assert Job.objects.complete(job.pk, worker, attempt, result="late") is False
    assert row_text(job.pk) == before


def test_complete_of_a_missing_job_is_refused():
    assert Job.objects.complete(987654321, WORKER, 1) is False


def test_complete_many_accepts_only_the_jobs_still_ours():
    mine = running()
    also_mine = running()
    stale = running(attempts=3)
    before = row_text(stale.pk)
    accepted = Job.objects.complete_many(
        WORKER, [(mine.pk, 1, 1), (also_mine.pk, 1, {"b": 2}), (stale.pk, 2, "late")]
    )
    assert accepted == {mine.pk, also_mine.pk}
    assert Job.objects.get(pk=mine.pk).result == 1
    assert Job.objects.get(pk=also_mine.pk).result == {"b": 2}
    assert row_text(stale.pk) == before
    assert Job.objects.complete_many(WORKER, []) == set()


# -- fail ----------------------------------------------------------------------------------------
def test_fail_schedules_a_retry_after_the_given_delay():
    job = running()
    outcome = fail(job, retry_in=12.5)

    now = db_now()
    stored = Job.objects.get(pk=job.pk)
    assert outcome.status == "ready" and outcome.run_at == stored.run_at
    assert stored.status == "ready"
    assert stored.run_at == now + dt.timedelta(seconds=12.5)
    assert stored.attempts == 1  # the attempt is spent; the next claim makes it 2
    assert stored.finished_at is None
    assert (stored.locked_by, stored.locked_at, stored.lease_expires_at) == (None, None, None)
    assert stored.last_error == "ValueError: bad value"
    (entry,) = stored.history
    assert entry["outcome"] == "failed" and entry["attempt"] == 1 and entry["worker"] == WORKER
    assert (entry["error_class"], entry["message"], entry["traceback"]) == (
        "ValueError",
        "bad value",
        "Traceback\nValueError",
    )


def test_fail_with_zero_delay_is_due_at_once():
    job = running()
    fail(job, retry_in=0)
    assert Job.objects.get(pk=job.pk).run_at == db_now()
    assert [j.pk for j in Job.objects.claim(None, "w2")] == [job.pk]


def test_fail_at_max_attempts_goes_dead_with_finished_at():
    job = running(attempts=3, max_attempts=3)
    run_at = job.run_at
    outcome = fail(job, retry_in=10)

    stored = Job.objects.get(pk=job.pk)
    assert outcome.status == "dead" and stored.status == "dead"
    assert stored.finished_at == db_now()
    assert stored.run_at == run_at
    assert stored.last_error == "ValueError: bad value"
    assert stored.locked_by is None and stored.lease_expires_at is None


def test_fail_with_no_retry_goes_dead_even_with_attempts_left():
    job = running(attempts=1, max_attempts=5)
    outcome = fail(job, retry_in=None)
    stored = Job.objects.get(pk=job.pk)
    assert outcome.status == stored.status == "dead"
    assert stored.finished_at == db_now()


def test_fail_without_message_records_the_class():
    job = running()
    fail(job, message="")
    assert Job.objects.get(pk=job.pk).last_error == "ValueError"


def test_fail_truncates_last_error_and_message():
    job = running()
    fail(job, message="x" * 5000)
    stored = Job.objects.get(pk=job.pk)
    assert len(stored.last_error) == MAX_LAST_ERROR == 2000
    assert stored.last_error == ("ValueError: " + "x" * 5000)[:2000]
    assert stored.history[-1]["message"] == "x" * 2000


@override_settings(PGJOBS={"TRACEBACK_LIMIT": 100})
def test_fail_keeps_the_end_of_a_long_traceback():
    job = running()
    traceback = "".join(f"line {i}\n" for i in range(500))
    fail(job, traceback=traceback)
    stored_tb = Job.objects.get(pk=job.pk).history[-1]["traceback"]
    assert stored_tb == "...(truncated)...\n" + traceback[-100:]


@override_settings(PGJOBS={"TRACEBACK_LIMIT": 100})
def test_fail_keeps_a_traceback_at_the_limit_whole():
    job = running()
    fail(job, traceback="t" * 100)
    assert Job.objects.get(pk=job.pk).history[-1]["traceback"] == "t" * 100


@override_settings(PGJOBS={"HISTORY_LIMIT": 3})
def test_history_is_appended_and_bounded():
    old = [{"attempt": i, "outcome": "failed", "message": f"old {i}"} for i in (1, 2, 3)]
    job = running(attempts=4, max_attempts=9, history=old)
    fail(job, message="newest", retry_in=0)

    history = Job.objects.get(pk=job.pk).history
    assert [e["message"] for e in history] == ["old 2", "old 3", "newest"]
    # Below the cap the list just grows.
    (claimed,) = Job.objects.claim(None, "w2")
    Job.objects.complete(claimed.pk, "w2", claimed.attempts)
    history = Job.objects.get(pk=job.pk).history
    assert len(history) == 3
    assert [e["outcome"] for e in history] == ["failed", "failed", "done"]
    assert history[-1]["attempt"] == 5 and history[-1]["worker"] == "w2"


def test_history_grows_one_entry_per_attempt():
    job = running(max_attempts=3)
    for attempt in (1, 2, 3):
        (claimed,) = [job] if attempt == 1 else Job.objects.claim(None, WORKER)
        assert claimed.attempts == attempt
        fail(claimed, message=f"attempt {attempt}", retry_in=0)
    stored = Job.objects.get(pk=job.pk)
    assert stored.status == "dead"
    assert [(e["attempt"], e["message"]) for e in stored.history] == [
        (1, "attempt 1"),
        (2, "attempt 2"),
        (3, "attempt 3"),
    ]


@pytest.mark.parametrize(
    "worker, attempt",
    [("someone-else", 1), (WORKER, 2), (WORKER, 0)],
    ids=["worker", "attempt+1", "attempt-1"],
)
def test_stale_fail_changes_nothing(worker, attempt):
    job = running()
    before = row_text(job.pk)
    assert fail(job, worker=worker, attempt=attempt) is None
    assert fail(job, worker=worker, attempt=attempt, retry_in=None) is None
    assert row_text(job.pk) == before


@pytest.mark.parametrize("trait", ["done", "dead", "delayed"])
def test_fail_refuses_a_job_that_is_not_running(trait):
    job = JobFactory(**{trait: True}, attempts=1, locked_by=WORKER, updated_at=past())
    before = row_text(job.pk)
    assert fail(job, attempt=1) is None
    assert row_text(job.pk) == before


@pytest.mark.parametrize("retry_in", [-1, float("nan"), float("inf")])
def test_fail_refuses_a_negative_or_infinite_delay(retry_in):
    job = running()
    before = row_text(job.pk)
    with pytest.raises(InvalidJob, match="retry delay"):
        fail(job, retry_in=retry_in)
    assert row_text(job.pk) == before


# -- heartbeat -----------------------------------------------------------------------------------
def test_heartbeat_extends_the_lease():
    job = running()
    assert Job.objects.heartbeat(WORKER, [(job.pk, 1, 300)]) == {job.pk}
    now = db_now()
    stored = Job.objects.get(pk=job.pk)
    assert stored.lease_expires_at == now + dt.timedelta(seconds=300)
    assert stored.updated_at == now
    assert (stored.status, stored.attempts, stored.locked_by) == ("running", 1, WORKER)


def test_heartbeat_is_fenced_per_job():
    mine = running()
    other_worker = running(locked_by="other")
    reclaimed = running(attempts=2)  # swept and claimed again since we took attempt 1
    done = JobFactory(done=True, attempts=1, locked_by=WORKER, updated_at=past())
    before = {j.pk: row_text(j.pk) for j in (other_worker, reclaimed, done)}

    alive = Job.objects.heartbeat(
        WORKER, [(mine.pk, 1, 60), (other_worker.pk, 1, 60), (reclaimed.pk, 1, 60), (done.pk, 1, 60)]
    )
    assert alive == {mine.pk}
    assert {pk: row_text(pk) for pk in before} == before
    assert Job.objects.heartbeat(WORKER, []) == set()


def test_heartbeat_can_shorten_a_lease_per_job():
    a, b = running(), running()
    Job.objects.heartbeat(WORKER, [(a.pk, 1, 5), (b.pk, 1, 500)])
    now = db_now()
    assert Job.objects.get(pk=a.pk).lease_expires_at == now + dt.timedelta(seconds=5)
    assert Job.objects.get(pk=b.pk).lease_expires_at == now + dt.timedelta(seconds=500)


# -- release -------------------------------------------------------------------------------------
def test_release_returns_the_job_without_spending_the_attempt():
    job = running(attempts=2, run_at=past(600))
    assert Job.objects.release(WORKER, [(job.pk, 2)], reason="worker shutting down") == {job.pk}

    stored = Job.objects.get(pk=job.pk)
    assert stored.status == "ready"
    assert stored.attempts == 1
    assert stored.run_at == job.run_at  # keeps its place in line
    assert (stored.locked_by, stored.locked_at, stored.lease_expires_at, stored.started_at) == (
        None,
        None,
        None,
        None,
    )
    (entry,) = stored.history
    assert entry["outcome"] == "released" and entry["attempt"] == 2
    assert entry["message"] == "worker shutting down"
    # Claimed again, it runs as attempt 2 once more.
    (claimed,) = Job.objects.claim(None, "w2")
    assert claimed.attempts == 2


@pytest.mark.parametrize("worker, attempt", [("someone-else", 1), (WORKER, 2)], ids=["worker", "attempt"])
def test_stale_release_changes_nothing(worker, attempt):
    job = running()
    before = row_text(job.pk)
    assert Job.objects.release(worker, [(job.pk, attempt)]) == set()
    assert row_text(job.pk) == before


def test_release_refuses_jobs_that_are_not_running():
    job = JobFactory(done=True, attempts=1, locked_by=WORKER, updated_at=past())
    before = row_text(job.pk)
    assert Job.objects.release(WORKER, [(job.pk, 1)]) == set()
    assert row_text(job.pk) == before
    assert Job.objects.release(WORKER, []) == set()


@pytest.mark.django_db(transaction=True)
def test_release_wakes_workers_of_the_queue(pg_connect):
    job = JobFactory(running=True, queue="released-q")
    listener = pg_connect()
    listener.execute("LISTEN django_pgjobs")
    Job.objects.release(WORKER, [(job.pk, 1)])
    assert [n.payload for n in listener.notifies(timeout=10, stop_after=1)] == ["released-q"]
