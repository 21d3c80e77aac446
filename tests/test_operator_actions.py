"""Operator actions (admin): retry, cancel, run_now, discard, edit; none may touch a running job."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from django_pgjobs.exceptions import InvalidJob, PayloadNotSerializable
from django_pgjobs.models import Job
from tests.factories import JobFactory
from tests.helpers import db_now, past, row_text

pytestmark = pytest.mark.django_db


def make(state: str, **kwargs) -> Job:
    """A job in ``state`` (ready, delayed (scheduled), running, done, dead, cancelled) with
    updated_at in the past."""
    traits = {"ready": {}, "delayed": {"delayed": True}}.get(state, {state: True})
    options = {"updated_at": past(), **kwargs}
    if state == "ready":
        options.setdefault("run_at", past())
    return JobFactory(**traits, **options)


def unchanged(jobs: list[Job]):
    before = {j.pk: row_text(j.pk) for j in jobs}
    return lambda: {pk: row_text(pk) for pk in before} == before


# -- retry ---------------------------------------------------------------------------------------
def test_retry_puts_a_dead_job_back_with_a_fresh_budget():
    job = make("dead", run_at=past(7200))  # attempts 5 of 5
    assert Job.objects.retry([job.pk], by="alice") == [job.pk]

    now = db_now()
    stored = Job.objects.get(pk=job.pk)
    # The count is kept (attempt numbers never repeat) and the budget grows by the handler's
    # max_attempts (tests.testapp.jobs.record has none: the default, 5).
    assert (stored.status, stored.attempts, stored.max_attempts, stored.finished_at) == ("ready", 5, 10, None)
    assert stored.run_at == now and stored.updated_at == now
    assert stored.last_error == "RuntimeError: boom"  # kept for the record
    assert len(stored.history) == 2  # the old failure is kept
    assert stored.history[-1]["outcome"] == "retried"
    assert stored.history[-1]["message"] == "retried by alice"
    (claimed,) = Job.objects.claim(None, "w1")
    assert claimed.id == job.pk and claimed.attempt == 6


def test_retry_budget_is_the_handlers_max_attempts_or_the_one_given():
    from tests.testapp.jobs import always_fails  # max_attempts=3

    own = make("dead", task=always_fails.name, attempts=3, max_attempts=3)
    other = make("dead", attempts=2, max_attempts=2)
    Job.objects.retry([own.pk, other.pk])
    assert Job.objects.get(pk=own.pk).max_attempts == 3 + 3
    assert Job.objects.get(pk=other.pk).max_attempts == 2 + 5  # no handler budget: the default
    again = make("dead", attempts=7, max_attempts=7)
    Job.objects.retry([again.pk], attempts=1)
    assert Job.objects.get(pk=again.pk).max_attempts == 8
    with pytest.raises(InvalidJob, match="attempts must be between 1"):
        Job.objects.retry([again.pk], attempts=0)


def test_retry_brings_back_a_cancelled_job():
    job = make("cancelled")
    assert Job.objects.retry([job.pk]) == [job.pk]
    assert Job.objects.get(pk=job.pk).status == "ready"


def test_retry_without_operator_name():
    job = make("dead")
    Job.objects.retry([job.pk])
    assert Job.objects.get(pk=job.pk).history[-1]["message"] == "retried"


@pytest.mark.parametrize("state", ["ready", "delayed", "running", "done"])
def test_retry_refuses_jobs_that_are_not_dead_or_cancelled(state):
    job = make(state)
    same = unchanged([job])
    assert Job.objects.retry([job.pk]) == []
    assert same()


def test_retry_of_a_mixed_selection_touches_only_dead_jobs():
    dead = [make("dead"), make("dead")]
    others = [make("running"), make("ready"), make("done")]
    same = unchanged(others)
    assert Job.objects.retry([j.pk for j in dead + others] + [999999]) == sorted(j.pk for j in dead)
    assert same()


# -- cancel --------------------------------------------------------------------------------------
@pytest.mark.parametrize("state", ["ready", "delayed"])
def test_cancel_stops_a_waiting_job_for_good(state):
    job = make(state)
    assert Job.objects.cancel([job.pk], by="bob") == [job.pk]
    stored = Job.objects.get(pk=job.pk)
    assert stored.status == "cancelled"
    assert stored.finished_at == db_now()
    assert stored.last_error == "cancelled by bob"
    assert stored.history[-1]["outcome"] == "cancelled"
    assert stored.history[-1]["message"] == "cancelled by bob"


@pytest.mark.parametrize("state", ["done", "dead", "cancelled"])
def test_cancel_refuses_finished_jobs(state):
    job = make(state)
    same = unchanged([job])
    assert Job.objects.cancel([job.pk]) == []
    assert same()


def test_cancel_asks_a_running_job_to_stop_and_leaves_it_to_its_worker():
    job = make("running")
    assert Job.objects.cancel([job.pk], by="bob") == [job.pk]
    stored = Job.objects.get(pk=job.pk)
    assert (stored.status, stored.claim_token, stored.locked_by) == (
        "running",
        job.claim_token,
        job.locked_by,
    )
    assert (stored.cancel_requested_at, stored.cancel_requested_by) == (db_now(), "bob")
    assert stored.history == job.history
    # Asking again changes nothing (the first request and its author stand).
    assert Job.objects.cancel([job.pk], by="carol") == []
    assert Job.objects.get(pk=job.pk).cancel_requested_by == "bob"


# -- run_now -------------------------------------------------------------------------------------
def test_run_now_makes_a_delayed_job_due():
    job = make("delayed")
    assert Job.objects.run_now([job.pk]) == [job.pk]
    stored = Job.objects.get(pk=job.pk)
    assert stored.run_at == db_now()
    assert stored.status == "ready"
    assert [j.id for j in Job.objects.claim(None, "w1")] == [job.pk]


@pytest.mark.parametrize("state", ["ready", "running", "done", "dead", "cancelled"])
def test_run_now_refuses_jobs_that_are_due_or_not_waiting(state):
    job = make(state, run_at=timezone.now() + dt.timedelta(hours=1)) if state != "ready" else make(state)
    same = unchanged([job])
    assert Job.objects.run_now([job.pk]) == []
    assert same()


@pytest.mark.django_db(transaction=True)
def test_retry_and_run_now_wake_workers(pg_connect):
    dead = JobFactory(dead=True, queue="retried-q")
    delayed = JobFactory(delayed=True, queue="run-now-q")
    listener = pg_connect()
    listener.execute("LISTEN django_pgjobs")
    Job.objects.retry([dead.pk])
    Job.objects.run_now([delayed.pk])
    assert [n.payload for n in listener.notifies(timeout=10, stop_after=2)] == ["retried-q", "run-now-q"]


# -- discard -------------------------------------------------------------------------------------
def test_discard_deletes_jobs_that_are_not_running():
    gone = [make("ready"), make("delayed"), make("done"), make("dead"), make("cancelled")]
    live = make("running")
    same = unchanged([live])
    assert Job.objects.discard([j.pk for j in gone] + [live.pk]) == sorted(j.pk for j in gone)
    assert list(Job.objects.values_list("pk", flat=True)) == [live.pk]
    assert same()


def test_discard_refuses_a_running_job():
    live = make("running")
    same = unchanged([live])
    assert Job.objects.discard([live.pk]) == []
    assert same()


# -- edit ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("state", ["ready", "delayed", "dead", "cancelled"])
def test_edit_changes_a_job_that_has_not_run_to_completion(state):
    job = make(state)
    run_at = timezone.now() + dt.timedelta(days=2)
    edited = Job.objects.edit(
        job.pk, payload={"args": [7], "kwargs": {}}, run_at=run_at, priority=-3, max_attempts=8, queue="q2"
    )
    stored = Job.objects.get(pk=job.pk)
    assert edited is not None and edited.pk == job.pk
    assert stored.payload == {"args": [7], "kwargs": {}}
    assert (stored.run_at, stored.priority, stored.max_attempts, stored.queue) == (run_at, -3, 8, "q2")
    # A waiting job moved to the day after tomorrow waits as scheduled; a failed one stays failed.
    assert stored.status == {"ready": "scheduled", "delayed": "scheduled"}.get(state, job.status)
    assert stored.updated_at == db_now()
    assert (edited.payload, edited.queue) == (stored.payload, stored.queue)


def test_edit_keeps_what_is_not_given():
    job = make("ready", payload={"args": [1], "kwargs": {}}, priority=4, max_attempts=3, queue="q1")
    Job.objects.edit(job.pk, priority=5)
    stored = Job.objects.get(pk=job.pk)
    assert (stored.payload, stored.priority, stored.max_attempts, stored.queue, stored.run_at) == (
        {"args": [1], "kwargs": {}},
        5,
        3,
        "q1",
        job.run_at,
    )


@pytest.mark.parametrize("state", ["running", "done"])
def test_edit_refuses_a_running_or_done_job(state):
    """Running: a worker holds it. Done: it already ran with what it had; an edit would only
    make its row lie about what ran."""
    job = make(state)
    same = unchanged([job])
    assert Job.objects.edit(job.pk, priority=9, payload={"args": [1]}) is None
    assert same()


def test_edit_of_a_missing_job_returns_none():
    assert Job.objects.edit(123456789, priority=1) is None


@pytest.mark.parametrize(
    "changes, error, message",
    [
        ({"payload": {"when": dt.datetime(2030, 1, 1)}}, PayloadNotSerializable, "tests.testapp.jobs.record"),
        ({"payload": [1, 2]}, InvalidJob, "payload must be a JSON object"),
        ({"run_at": dt.datetime(2030, 1, 1)}, InvalidJob, "naive"),
        ({"priority": 99999}, InvalidJob, "priority must be between"),
        ({"max_attempts": 0}, InvalidJob, "max_attempts must be between 1"),
        ({"queue": ""}, InvalidJob, "queue name"),
        ({"queue": "q" * 101}, InvalidJob, "queue name"),
    ],
)
def test_edit_validates_like_enqueue_and_writes_nothing(changes, error, message):
    job = make("ready")
    same = unchanged([job])
    with pytest.raises(error, match=message):
        Job.objects.edit(job.pk, **changes)
    assert same()


def test_orm_reads_use_the_pgjobs_database_like_the_state_changes():
    """The admin lists and ``edit``'s lookup read through the ORM; they must see the database the
    manager's SQL writes to, not whatever a router picks."""
    from django.test import override_settings

    with override_settings(PGJOBS={"DATABASE": "jobs"}):
        assert Job.objects.all().db == "jobs"
        assert Job.objects.filter(status="dead").db == "jobs"
        assert Job.objects.db_manager("default").all().db == "default"
    assert Job.objects.all().db == "default"
