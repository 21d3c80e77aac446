"""@task jobs run by real ``runjobs`` processes: priority order, the RUNNING state, failures and
retries, async tasks, context, signals in the worker process, and transactions."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_pgjobs.models import Job
from django_pgjobs.tasks import PgJobsBackend
from django_pgjobs.tasks.compat import TaskResultStatus
from tests.processes import executions, wait_for, worker_env
from tests.tasks.taskapp import tasks as t

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("clean_executions")]


def test_higher_priority_runs_first(workers):
    """Django's priorities run higher first. Enqueued low to high, one worker thread, one burst:
    the order of execution is by priority, then first in, first out."""
    for priority, label in [(-5, "p-5"), (0, "p0"), (10, "p10-first"), (0, "p0-second"), (10, "p10-second")]:
        t.record.using(priority=priority).enqueue(label)
    worker = workers("--burst", "-c", "1")
    assert worker.wait() == 0, worker.output()
    assert [v for _, _, v, _ in executions("task")] == ["p10-first", "p10-second", "p0", "p0-second", "p-5"]


def test_a_result_goes_from_ready_to_running_to_successful(workers):
    result = t.wait_for_release.enqueue()
    assert result.status == TaskResultStatus.READY
    worker = workers("--worker-id", "tasks-w1", "--poll-interval", "0.2")

    def running():
        result.refresh()
        return result.status == TaskResultStatus.RUNNING

    wait_for(running, 30, "the task to start")
    # A worker's id, then "#" and its process incarnation.
    assert [w.split("#")[0] for w in result.worker_ids] == ["tasks-w1"] and result.attempts == 1
    assert result.started_at is not None and result.finished_at is None
    wait_for(lambda: executions("waiting"), 30, "the task body to run")
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO test_executions (kind, job_id) VALUES ('release', %s)", [int(result.id)])

    def finished():
        result.refresh()
        return result.is_finished

    wait_for(finished, 30, "the task to finish")
    assert result.status == TaskResultStatus.SUCCESSFUL, worker.output()
    assert result.return_value == "released"
    assert result.finished_at >= result.started_at >= result.enqueued_at


def test_outcomes_of_a_burst(workers):
    failing = t.failing_task_value_error.using(max_attempts=1).enqueue()
    complex_ = t.complex_exception.using(max_attempts=1).enqueue()
    flaky = t.flaky.enqueue(succeed_on=2)
    async_noop = t.noop_task_async.enqueue()
    async_context = t.get_context_async.enqueue("a")
    context = t.get_context.enqueue()
    tuple_ = t.returns_tuple.enqueue()
    unstorable = t.returns_unstorable.using(max_attempts=1).enqueue()
    deferred = t.noop_task.using(run_after=timezone.now() + dt.timedelta(hours=1)).enqueue()
    # A row naming a module-level function that is not a task (a forged or stale row): never
    # imported, never run.
    forged, _ = Job.objects.enqueue(
        "tests.tasks.taskapp.tasks.not_a_task", {"args": [], "kwargs": {}}, max_attempts=1
    )

    worker = workers("--burst", "-c", "4", "--worker-id", "tasks-burst")
    assert worker.wait() == 0, worker.output()
    for r in (failing, complex_, flaky, async_noop, async_context, context, tuple_, unstorable, deferred):
        r.refresh()

    def seen(r):  # what a failed assertion shows: the result, its errors and the worker's log
        return (r.task.name, r.status, r.attempts, [e.traceback for e in r.errors], worker.output())

    assert failing.status == TaskResultStatus.FAILED, seen(failing)
    assert failing.errors[0].exception_class is ValueError
    assert failing.errors[0].traceback.endswith("ValueError: This task failed due to ValueError\n")
    assert failing.finished_at >= failing.started_at >= failing.enqueued_at
    assert 'ValueError(ValueError("This task failed"))' in complex_.errors[0].traceback

    assert flaky.status == TaskResultStatus.SUCCESSFUL, seen(flaky)
    assert flaky.return_value == 2
    assert flaky.attempts == 2 and [w.split("#")[0] for w in flaky.worker_ids] == ["tasks-burst"] * 2
    assert [e.exception_class for e in flaky.errors] == [RuntimeError]
    assert [int(v) for _, _, v, _ in executions("flaky")] == [1, 2]

    assert async_noop.status == TaskResultStatus.SUCCESSFUL, seen(async_noop)
    assert async_noop.return_value is None
    assert async_context.status == TaskResultStatus.SUCCESSFUL, seen(async_context)
    assert async_context.return_value == {"attempt": 1, "label": "a"}
    assert [v for _, _, v, _ in executions("async")] == ["a"]
    value = dict(context.return_value)
    assert [w.split("#")[0] for w in value.pop("worker_ids")] == ["tasks-burst"]
    assert value == {"id": context.id, "attempt": 1, "status": "RUNNING", "started": True}
    assert tuple_.status == TaskResultStatus.SUCCESSFUL, seen(tuple_)
    assert tuple_.return_value == [1, "two"]
    assert unstorable.status == TaskResultStatus.FAILED, seen(unstorable)
    assert unstorable.errors[0].exception_class is TypeError
    assert (deferred.status, deferred.attempts) == (TaskResultStatus.READY, 0), seen(deferred)

    forged_row = Job.objects.get(pk=forged.id)
    assert forged_row.status == "dead" and "no handler registered" in forged_row.last_error
    assert executions("not_a_task") == []


def test_signals_are_sent_in_the_worker_process(workers):
    flaky = t.flaky.enqueue(succeed_on=2)
    failing = t.failing_task_value_error.using(max_attempts=1).enqueue()
    breaks = t.breaks_finished_receiver.enqueue()
    worker = workers("--burst", "-c", "1", env=worker_env(PGJOBS_TEST_TASK_SIGNALS="1"))
    assert worker.wait() == 0, worker.output()

    def sent(result):
        return [v for _, job_id, v, _ in executions("signal") if job_id == int(result.id)]

    sender = PgJobsBackend.__name__
    assert sent(flaky) == [
        f"started|{sender}|flaky|RUNNING|1|0|",
        f"finished|{sender}|flaky|READY|1|1|RuntimeError",  # retry scheduled: ready to run again
        f"started|{sender}|flaky|RUNNING|2|1|",
        f"finished|{sender}|flaky|SUCCESSFUL|2|1|",
    ]
    assert sent(failing) == [
        f"started|{sender}|failing_task_value_error|RUNNING|1|0|",
        f"finished|{sender}|failing_task_value_error|FAILED|1|1|ValueError",
    ]
    # (The last field is sys.exc_info() in the receiver: Django's logging receiver needs it to log
    # a failed task's traceback.)
    # A task_finished receiver that raises does not turn a finished run into a retry.
    breaks.refresh()
    assert breaks.status == TaskResultStatus.SUCCESSFUL and breaks.attempts == 1
    assert [v for _, _, v, _ in executions("task")] == ["breaks_finished_receiver"]
    # task_enqueued was sent where the enqueue happened: in this process, not the worker.
    assert not [v for v in sent(flaky) if v.startswith("enqueued")]


def test_a_rolled_back_enqueue_never_runs(workers):
    worker = workers("--poll-interval", "0.2")
    worker.wait_for_log("listening for notifications")
    with pytest.raises(RuntimeError), transaction.atomic():
        t.record.enqueue("rolled back")
        raise RuntimeError("roll back")
    with transaction.atomic():
        committed = t.record.enqueue("committed")

    def done():
        committed.refresh()
        return committed.is_finished

    wait_for(done, 20, "the committed task to run")
    assert committed.return_value == "committed"
    assert Job.objects.count() == 1
    assert [v for _, _, v, _ in executions("task")] == ["committed"]
