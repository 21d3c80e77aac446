"""Writes after the claim: complete, fail, heartbeat, release; each fenced by the claim token."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import override_settings

from django_pgjobs.exceptions import InvalidJob
from django_pgjobs.models import Job
from django_pgjobs.store import Failure
from django_pgjobs.validation import MAX_LAST_ERROR
from tests.factories import JobFactory
from tests.helpers import db_now, past, row_text

pytestmark = pytest.mark.django_db

WORKER = "worker-test"  # the running trait's locked_by


def running(**kwargs) -> Job:
    """A claimed job whose updated_at is in the past, so any write to it would show."""
    return JobFactory(running=True, updated_at=past(), **kwargs)


def fail(job: Job, *, token: int | None = None, retry_in=10.0, **kwargs):
    """Record a failure of ``job``'s current claim (or of ``token``); its outcome, or None."""
    options = {"error_class": "ValueError", "message": "bad value", "traceback": "Traceback\nValueError"}
    options.update(kwargs)
    token = job.claim_token if token is None else token
    outcomes = Job.objects.fail([Failure(job.pk, token, retry_in=retry_in, **options)])
    return outcomes.get(token)


def complete(job: Job, result=None, *, token: int | None = None) -> bool:
    token = job.claim_token if token is None else token
    return Job.objects.complete([(job.pk, token, result)]) == {token: "done"}


# -- complete ------------------------------------------------------------------------------------
def test_complete_marks_done_with_result_and_history():
    job = running()
    assert complete(job, {"sent": [1, 2]}) is True

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
    assert complete(job)
    assert Job.objects.get(pk=job.pk).result is None


@pytest.mark.parametrize("trait", ["done", "dead", "delayed", "cancelled"])
def test_complete_refuses_a_job_that_is_not_running(trait):
    job = JobFactory(**{trait: True}, attempts=1, locked_by=WORKER, claim_token=77, updated_at=past())
    before = row_text(job.pk)
    assert complete(job) is False
    assert row_text(job.pk) == before


def test_stale_complete_changes_nothing_whatever_the_worker_id_or_attempt():
    """The fence is the token alone: a late write from an earlier claim of this job is refused
    even when it comes from the same worker id with the same attempt number (an operator retry
    kept the count, two processes share --worker-id)."""
    job = running()
    before = row_text(job.pk)
    for stale in (job.claim_token - 1, job.claim_token + 1, 0):
        assert complete(job, "late", token=stale) is False
    assert row_text(job.pk) == before


def test_a_completed_claim_cannot_complete_twice():
    job = running()
    assert complete(job, 1)
    after = row_text(job.pk)
    assert complete(job, 2) is False
    assert row_text(job.pk) == after


def test_complete_of_a_missing_job_is_refused():
    assert Job.objects.complete([(987654321, 1, None)]) == {}


def test_complete_in_a_batch_accepts_only_the_claims_still_held():
    mine = running()
    also_mine = running()
    stale = running(attempts=3)
    before = row_text(stale.pk)
    accepted = Job.objects.complete(
        [
            (mine.pk, mine.claim_token, 1),
            (also_mine.pk, also_mine.claim_token, {"b": 2}),
            (stale.pk, stale.claim_token + 1000, "late"),
        ]
    )
    assert accepted == {mine.claim_token: "done", also_mine.claim_token: "done"}
    assert Job.objects.get(pk=mine.pk).result == 1
    assert Job.objects.get(pk=also_mine.pk).result == {"b": 2}
    assert row_text(stale.pk) == before
    assert Job.objects.complete([]) == {}


# -- fail ----------------------------------------------------------------------------------------
def test_fail_schedules_a_retry_after_the_given_delay():
    job = running()
    outcome = fail(job, retry_in=12.5)

    now = db_now()
    stored = Job.objects.get(pk=job.pk)
    assert outcome.status == "scheduled" and outcome.run_at == stored.run_at
    assert stored.status == "scheduled"
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


def test_fail_with_zero_delay_is_due_at_once_at_the_back_of_the_line():
    job = running()
    assert fail(job, retry_in=0).status == "ready"
    assert Job.objects.get(pk=job.pk).run_at == db_now()
    assert [j.id for j in Job.objects.claim(None, "w2")] == [job.pk]


def test_fail_records_several_outcomes_in_one_statement():
    a, b = running(), running(attempts=5, max_attempts=5)
    outcomes = Job.objects.fail(
        [
            Failure(a.pk, a.claim_token, "KeyError", "a", None, 0),
            Failure(b.pk, b.claim_token, "OSError", "b", "tb", 1),
            Failure(b.pk, b.claim_token + 1, "OSError", "stale", None, 1),
        ]
    )
    assert {t: o.status for t, o in outcomes.items()} == {a.claim_token: "ready", b.claim_token: "dead"}
    assert Job.objects.get(pk=b.pk).last_error == "OSError: b"


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


@override_settings(PGJOBS={"TRACEBACK_LIMIT": 0})
def test_a_traceback_limit_of_zero_keeps_no_traceback():
    # traceback[-0:] is the whole string: a limit of 0 used to keep every character.
    job = running()
    fail(job, traceback="Traceback (most recent call last):\n" + "frame\n" * 1000)
    assert Job.objects.get(pk=job.pk).history[-1]["traceback"] == "...(truncated)...\n"


@override_settings(PGJOBS={"TRACEBACK_LIMIT": 1})
def test_a_traceback_limit_of_one_keeps_the_last_character():
    job = running()
    fail(job, traceback="Traceback\nValueError!")
    assert Job.objects.get(pk=job.pk).history[-1]["traceback"] == "...(truncated)...\n!"


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
    Job.objects.complete([(claimed.id, claimed.token, None)])
    history = Job.objects.get(pk=job.pk).history
    assert len(history) == 3
    assert [e["outcome"] for e in history] == ["failed", "failed", "done"]
    assert history[-1]["attempt"] == 5 and history[-1]["worker"] == "w2"


def test_history_grows_one_entry_per_attempt():
    job = running(max_attempts=3)
    for attempt in (1, 2, 3):
        if attempt > 1:
            (claimed,) = Job.objects.claim(None, WORKER)
            assert claimed.attempt == attempt
            job = Job.objects.get(pk=claimed.id)
        fail(job, message=f"attempt {attempt}", retry_in=0)
    stored = Job.objects.get(pk=job.pk)
    assert stored.status == "dead"
    assert [(e["attempt"], e["message"]) for e in stored.history] == [
        (1, "attempt 1"),
        (2, "attempt 2"),
        (3, "attempt 3"),
    ]


def test_stale_fail_changes_nothing():
    job = running()
    before = row_text(job.pk)
    for stale in (job.claim_token - 1, job.claim_token + 1):
        assert fail(job, token=stale) is None
        assert fail(job, token=stale, retry_in=None) is None
    assert row_text(job.pk) == before


@pytest.mark.parametrize("trait", ["done", "dead", "delayed", "cancelled"])
def test_fail_refuses_a_job_that_is_not_running(trait):
    job = JobFactory(**{trait: True}, attempts=1, locked_by=WORKER, claim_token=78, updated_at=past())
    before = row_text(job.pk)
    assert fail(job) is None
    assert row_text(job.pk) == before


@pytest.mark.parametrize("retry_in", [-1, float("nan"), float("inf")])
def test_fail_refuses_a_negative_or_infinite_delay(retry_in):
    job = running()
    before = row_text(job.pk)
    with pytest.raises(InvalidJob, match="retry delay"):
        fail(job, retry_in=retry_in)
    assert row_text(job.pk) == before


# -- heartbeat -----------------------------------------------------------------------------------
def test_heartbeat_extends_the_lease_and_changes_nothing_else():
    job = running()
    before = Job.objects.get(pk=job.pk)
    beat = Job.objects.heartbeat([(job.pk, job.claim_token, 300)])
    assert (beat.extended, beat.busy, beat.lost) == ({job.claim_token}, set(), set())
    now = db_now()
    stored = Job.objects.get(pk=job.pk)
    assert stored.lease_expires_at == now + dt.timedelta(seconds=300)
    assert stored.updated_at == before.updated_at  # a beat is not a state change
    assert (stored.status, stored.attempts, stored.locked_by) == ("running", 1, WORKER)


def test_heartbeat_is_fenced_per_claim():
    mine = running()
    reclaimed = running(attempts=2)  # swept and claimed again since our claim
    done = JobFactory(done=True, attempts=1, locked_by=WORKER, claim_token=79, updated_at=past())
    before = {j.pk: row_text(j.pk) for j in (reclaimed, done)}

    beat = Job.objects.heartbeat(
        [(mine.pk, mine.claim_token, 60), (reclaimed.pk, reclaimed.claim_token - 1000, 60), (done.pk, 79, 60)]
    )
    assert beat.extended == {mine.claim_token}
    assert beat.lost == {reclaimed.claim_token - 1000, 79}
    assert {pk: row_text(pk) for pk in before} == before
    assert Job.objects.heartbeat([]).extended == set()


@pytest.mark.django_db(transaction=True)
def test_heartbeat_skips_a_row_another_session_has_locked_and_extends_the_rest(pg_connect):
    """One locked row (a user's SELECT ... FOR UPDATE, an admin transaction) must not hold up the
    leases of every other job the worker runs: it is reported busy, the others are extended."""
    locked, free = running(), running()
    blocker = pg_connect()
    blocker.execute("BEGIN")
    blocker.execute("SELECT 1 FROM pgjobs_job WHERE id = %s FOR UPDATE", [locked.pk])
    try:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")  # a wait would fail the test, not hang it
        beat = Job.objects.heartbeat([(locked.pk, locked.claim_token, 60), (free.pk, free.claim_token, 60)])
    finally:
        blocker.execute("ROLLBACK")
    assert (beat.extended, beat.busy, beat.lost) == ({free.claim_token}, {locked.claim_token}, set())


def test_heartbeat_can_shorten_a_lease_per_job():
    a, b = running(), running()
    Job.objects.heartbeat([(a.pk, a.claim_token, 5), (b.pk, b.claim_token, 500)])
    now = db_now()
    assert Job.objects.get(pk=a.pk).lease_expires_at == now + dt.timedelta(seconds=5)
    assert Job.objects.get(pk=b.pk).lease_expires_at == now + dt.timedelta(seconds=500)


# -- release -------------------------------------------------------------------------------------
def test_release_returns_the_job_without_spending_the_attempt():
    job = running(attempts=2, run_at=past(600))
    assert Job.objects.release([(job.pk, job.claim_token)], reason="worker shutting down") == {job.pk}

    stored = Job.objects.get(pk=job.pk)
    assert stored.status == "ready"
    # Attempt 2 stays used (numbers never repeat); the budget grows by one instead.
    assert (stored.attempts, stored.max_attempts) == (2, 6)
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
    # Claimed again, it runs as attempt 3 with 3 attempts still to go, as before the release.
    (claimed,) = Job.objects.claim(None, "w2")
    assert (claimed.attempt, claimed.max_attempts) == (3, 6)


def test_stale_release_changes_nothing():
    job = running()
    before = row_text(job.pk)
    assert Job.objects.release([(job.pk, job.claim_token + 1)]) == set()
    assert row_text(job.pk) == before


def test_release_refuses_jobs_that_are_not_running():
    job = JobFactory(done=True, attempts=1, locked_by=WORKER, claim_token=80, updated_at=past())
    before = row_text(job.pk)
    assert Job.objects.release([(job.pk, 80)]) == set()
    assert row_text(job.pk) == before
    assert Job.objects.release([]) == set()


def test_release_unknown_hands_back_only_this_workers_claims_it_does_not_know():
    known = running(locked_by="pod-0#a1")
    unknown = running(locked_by="pod-0#a1")
    other_incarnation = running(locked_by="pod-0#b2")  # same --worker-id, another process
    same = {j.pk: row_text(j.pk) for j in (known, other_incarnation)}
    released = Job.objects.release_unknown("pod-0#a1", [known.claim_token], "claim reply lost")
    assert released == [unknown.pk]
    assert Job.objects.get(pk=unknown.pk).status == "ready"
    assert {pk: row_text(pk) for pk in same} == same


@pytest.mark.django_db(transaction=True)
def test_release_wakes_workers_of_the_queue(pg_connect):
    job = JobFactory(running=True, queue="released-q")
    listener = pg_connect()
    listener.execute("LISTEN django_pgjobs")
    Job.objects.release([(job.pk, job.claim_token)])
    assert [n.payload for n in listener.notifies(timeout=10, stop_after=1)] == ["released-q"]
