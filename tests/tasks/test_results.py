"""TaskResult in every state a job can be in, read with get_result/aget_result/refresh/arefresh.

Each state is reached the way the queue reaches it: through the job manager's own statements
(claim, complete, fail, sweep, cancel, retry, release), or through the registered handler's
``run``, which is what the worker's job thread calls (test_worker.py runs real workers)."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings

from django_pgjobs.models import Job
from django_pgjobs.tasks import JobCancelled, LeaseExpired, PgJobsBackend
from django_pgjobs.tasks.compat import (
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    task_backends,
    task_finished,
    task_started,
)
from django_pgjobs.tasks.mapping import UNKNOWN_WORKER
from tests.helpers import db_now
from tests.tasks.helpers import (
    WORKER,
    cancel,
    captured,
    claim,
    complete,
    fail,
    release,
    retry,
    run_claimed,
    sweep_expired,
)
from tests.tasks.taskapp import tasks as t

pytestmark = pytest.mark.django_db


def backend() -> PgJobsBackend:
    return task_backends["default"]  # type: ignore[return-value]


# -- every state ---------------------------------------------------------------------------------
def test_ready_result_equals_what_enqueue_returned():
    result = t.calculate_meaning_of_life.enqueue()
    again = backend().get_result(result.id)
    assert again == result
    assert t.calculate_meaning_of_life.get_result(result.id) == result
    assert async_to_sync(t.calculate_meaning_of_life.aget_result)(result.id) == result


def test_running_result(django_assert_num_queries):
    result = t.calculate_meaning_of_life.enqueue()
    claim(int(result.id))
    with django_assert_num_queries(1):
        result.refresh()
    assert result.status == TaskResultStatus.RUNNING and not result.is_finished
    assert result.worker_ids == [WORKER] and result.attempts == 1
    assert result.started_at == result.last_attempted_at == db_now()
    assert result.finished_at is None
    with pytest.raises(ValueError, match="not finished yet"):
        result.return_value  # noqa: B018


def test_successful_result():
    result = t.calculate_meaning_of_life.enqueue()
    job = claim(int(result.id))
    complete(job, 42)
    async_to_sync(result.arefresh)()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.is_finished
    assert result.return_value == 42
    assert result.finished_at == db_now() and result.errors == []
    assert result.worker_ids == [WORKER]


def test_failed_attempt_with_a_retry_scheduled_is_ready_with_its_error():
    result = t.failing_task_value_error.enqueue()
    job = claim(int(result.id))
    assert fail(job, ValueError("This task failed due to ValueError"), retry_in=600) == "scheduled"
    result.refresh()
    assert result.status == TaskResultStatus.READY and not result.is_finished
    assert result.finished_at is None
    assert result.attempts == 1 and result.worker_ids == [WORKER]
    assert result.last_attempted_at == result.started_at == db_now()
    [error] = result.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert error.traceback.endswith("ValueError: This task failed due to ValueError\n")


def test_failed_for_good_after_every_attempt():
    result = t.failing_task_value_error.using(max_attempts=2).enqueue()
    for n, worker in enumerate(["w-a", "w-b"], start=1):
        job = claim(int(result.id), worker=worker)
        assert fail(job, ValueError(f"no {n}"), retry_in=0, worker=worker) == ("ready" if n == 1 else "dead")
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.is_finished
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    assert result.worker_ids == ["w-a", "w-b"] and result.attempts == 2
    assert [e.traceback.splitlines()[-1] for e in result.errors] == ["ValueError: no 1", "ValueError: no 2"]
    assert result.finished_at == db_now()


def test_exception_classes_resolve_builtin_and_dotted():
    from django_pgjobs.exceptions import InvalidJob

    for exc, path in (
        (PermissionError("nope"), "builtins.PermissionError"),
        (InvalidJob("bad"), "django_pgjobs.exceptions.InvalidJob"),
    ):
        result = t.noop_task.using(max_attempts=1).enqueue()
        fail(claim(int(result.id)), exc, retry_in=None)
        [error] = backend().get_result(result.id).errors
        assert (error.exception_class_path, error.exception_class) == (path, type(exc))


def test_lease_expired_is_an_error_naming_the_lost_worker():
    result = t.noop_task.using(max_attempts=1).enqueue()
    claim(int(result.id), worker="vanished:9", lease=-1)  # a lease already in the past
    assert sweep_expired() == [int(result.id)]
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class is LeaseExpired
    assert "worker vanished:9, attempt 1" in error.traceback
    assert result.worker_ids == ["vanished:9"]


def test_cancelled_job_is_failed_with_a_cancellation_error():
    result = t.noop_task.enqueue()
    cancel(int(result.id), by="alice")
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.worker_ids == [] and result.started_at is None
    [error] = result.errors
    assert error.exception_class is JobCancelled and "cancelled by alice" in error.traceback


def test_operator_retry_grants_a_fresh_budget_keeps_counting_and_keeps_the_errors():
    result = t.noop_task.using(max_attempts=1).enqueue()
    fail(claim(int(result.id)), RuntimeError("boom"), retry_in=None)
    retry(int(result.id), by="bob")
    result.refresh()
    assert result.status == TaskResultStatus.READY
    assert result.attempts == 1 and result.worker_ids == [WORKER]  # attempt numbers never repeat
    assert [e.exception_class for e in result.errors] == [RuntimeError]
    claim(int(result.id), worker="w-2")
    result.refresh()
    assert result.worker_ids == [WORKER, "w-2"] and result.attempts == 2


def test_released_job_is_ready_and_the_release_costs_no_attempt_of_its_budget():
    result = t.noop_task.enqueue()
    job = claim(int(result.id))
    release(job)
    result.refresh()
    assert result.status == TaskResultStatus.READY
    # The claim's number stays used (numbers never repeat), its budget grows by one instead.
    assert (result.attempts, result.worker_ids, result.errors, result.started_at) == (1, [WORKER], [], None)
    from django_pgjobs.models import Job

    assert Job.objects.get(pk=int(result.id)).max_attempts == 6


@override_settings(PGJOBS={"HISTORY_LIMIT": 2})
def test_attempts_count_stays_exact_when_the_history_was_trimmed():
    result = t.noop_task.using(max_attempts=5).enqueue()
    for n in range(1, 4):
        fail(claim(int(result.id), worker=f"w{n}"), RuntimeError(f"e{n}"), retry_in=0, worker=f"w{n}")
    result.refresh()
    assert result.attempts == 3
    assert result.worker_ids == [UNKNOWN_WORKER, "w2", "w3"]
    assert len(result.errors) == 2  # what the history still holds


# -- a run, as the worker's job thread does it ------------------------------------------------------
def test_run_sends_started_then_finished_and_stores_nothing_itself():
    result = t.calculate_meaning_of_life.enqueue()
    job = claim(int(result.id))
    with captured(task_started, task_finished) as signals:
        assert run_claimed(job) == 42
    assert signals == [
        ("started", PgJobsBackend, TaskResultStatus.RUNNING, None),
        ("finished", PgJobsBackend, TaskResultStatus.SUCCESSFUL, None),
    ]
    assert Job.objects.get(pk=job.id).status == "running"  # the worker writes the outcome


def test_a_failed_run_sends_finished_inside_the_exception_handler():
    result = t.failing_task_value_error.using(max_attempts=2).enqueue()
    job = claim(int(result.id))
    with captured(task_started, task_finished) as signals, pytest.raises(ValueError):
        run_claimed(job)
    started, finished = signals
    assert started[2] == TaskResultStatus.RUNNING
    # Attempt 1 of 2 under the default backoff: a retry follows, so READY ("ready to run again").
    assert finished[2] == TaskResultStatus.READY and isinstance(finished[3], ValueError)


def test_the_last_failed_attempt_finishes_failed():
    result = t.failing_task_value_error.using(max_attempts=1).enqueue()
    with captured(task_finished) as signals, pytest.raises(ValueError):
        run_claimed(claim(int(result.id)))
    assert signals[0][2] == TaskResultStatus.FAILED


@pytest.mark.usefixtures("clean_executions")
def test_a_backoff_that_gives_up_finishes_failed_and_tells_the_worker_the_same(monkeypatch):
    from django_pgjobs.registry import get_handler

    result = t.flaky.using(max_attempts=5).enqueue(succeed_on=9)
    job = claim(int(result.id))
    handler = get_handler(job.task)
    calls = []

    def policy(attempt, exc):  # random in real life; the worker must not get a second opinion
        calls.append(attempt)
        return None

    monkeypatch.setattr(handler, "backoff", policy)
    with captured(task_finished) as signals, pytest.raises(RuntimeError) as info:
        run_claimed(job)
    assert signals[0][2] == TaskResultStatus.FAILED
    assert handler.retry_delay(1, info.value) is None  # the decision the signal reported
    assert calls == [1]  # asked once


def test_a_run_nobody_observes_reads_nothing_and_one_that_is_observed_reads_the_row(
    django_assert_num_queries,
):
    """Only the framework's logging receivers listen: the run needs no query (and so no database
    connection for a task that does not use one). A receiver of our own sees the full result."""
    job = claim(int(t.calculate_meaning_of_life.enqueue().id))
    with django_assert_num_queries(0):
        assert run_claimed(job) == 42
    job = claim(int(t.calculate_meaning_of_life.enqueue().id))
    with captured(task_started), django_assert_num_queries(1):
        run_claimed(job)
    job = claim(int(t.calculate_meaning_of_life.enqueue().id))
    with captured(task_finished), django_assert_num_queries(1):
        run_claimed(job)


def test_what_a_receiver_of_our_own_sees_is_the_stored_state():
    result = t.calculate_meaning_of_life.enqueue()
    job = claim(int(result.id), worker="seen-by")
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append((task_result.enqueued_at, task_result.started_at, task_result.worker_ids))

    task_started.connect(receiver, sender=PgJobsBackend)
    try:
        run_claimed(job, worker="seen-by")
    finally:
        task_started.disconnect(receiver, sender=PgJobsBackend)
    ((enqueued_at, started_at, worker_ids),) = seen
    assert enqueued_at >= db_now() and started_at == db_now() and worker_ids == ["seen-by"]


@pytest.mark.usefixtures("clean_executions")
def test_context_has_the_attempt_and_the_running_result():
    result = t.get_context.enqueue()
    job = claim(int(result.id), worker="ctx-worker")
    value = run_claimed(job, worker="ctx-worker")
    assert value == {
        "id": result.id,
        "attempt": 1,
        "status": "RUNNING",
        "worker_ids": ["ctx-worker"],
        "started": True,
    }


def test_return_values_are_normalised_and_unstorable_ones_fail_the_run():
    job = claim(int(t.returns_tuple.enqueue().id))
    assert run_claimed(job) == [1, "two"]
    complete(job, [1, "two"])
    bad = claim(int(t.returns_unstorable.enqueue().id))
    with captured(task_finished) as signals, pytest.raises(TypeError, match="Unsupported type"):
        run_claimed(bad)
    assert signals[0][2] == TaskResultStatus.READY


def test_async_task_runs_through_asgiref():
    job = claim(int(t.noop_task_async.enqueue().id))
    assert run_claimed(job) is None


# -- ids that are not results ------------------------------------------------------------------------
@pytest.mark.parametrize("result_id", ["123456789", "abc", "", "-1", "1.5", " 1", "9" * 30])
def test_unknown_ids(result_id):
    with pytest.raises(TaskResultDoesNotExist):
        backend().get_result(result_id)
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(backend().aget_result)(result_id)


def test_a_job_that_is_not_a_task_is_not_a_result():
    from tests.testapp.jobs import noop

    job = noop.enqueue()
    with pytest.raises(TaskResultDoesNotExist, match=r"not a django\.tasks task"):
        backend().get_result(str(job.id))
    unregistered, _ = Job.objects.enqueue("tests.tasks.taskapp.tasks.not_a_task", {"args": [], "kwargs": {}})
    with pytest.raises(TaskResultDoesNotExist, match=r"not a django\.tasks task"):
        backend().get_result(str(unregistered.id))


def test_a_result_of_another_task_is_a_mismatch():
    result = t.noop_task.enqueue()
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        t.calculate_meaning_of_life.get_result(result.id)
