"""Shared by the backend tests: signal capture, and attempts driven through the job manager.

Every call that moves a job between states is here (claim, complete, fail, release, sweep, cancel,
retry), so the tests follow a change of the manager's API in one place."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.dispatch import Signal

from django_pgjobs.models import Job
from django_pgjobs.registry import JobContext, get_handler
from django_pgjobs.store import Claim, Failure

WORKER = "test-worker:1"


@contextmanager
def captured(*signals: Signal) -> Iterator[list[tuple[str, type, Any, Any]]]:
    """(signal name, sender, status at send time, exception being handled) for each send."""
    import sys

    from django_pgjobs.tasks.compat import task_enqueued, task_finished, task_started

    names = {id(task_enqueued): "enqueued", id(task_started): "started", id(task_finished): "finished"}
    seen: list[tuple[str, type, Any, Any]] = []
    receivers = []
    for signal in signals:

        def receive(sender: type, task_result: Any, signal: Signal = signal, **kwargs: Any) -> None:
            exc = sys.exc_info()[1]
            seen.append((names[id(signal)], sender, task_result.status, exc))

        signal.connect(receive, weak=False)
        receivers.append((signal, receive))
    try:
        yield seen
    finally:
        for signal, receive in receivers:
            signal.disconnect(receive)


def claim(job_id: int, worker: str = WORKER, lease: float = 60.0) -> Claim:
    """Claim exactly this job (the test's only ready one) the way a worker does."""
    claimed = Job.objects.claim(None, worker, limit=1, lease=lease)
    assert [j.id for j in claimed] == [job_id], claimed
    return claimed[0]


def run_claimed(job: Claim, worker: str = WORKER) -> Any:
    """What the worker's job thread does with a claim: the registered handler's ``run``."""
    handler = get_handler(job.task)
    return handler.run(JobContext.for_claim(job, worker), job.args, job.kwargs)


def complete(job: Claim, value: Any, worker: str = WORKER) -> None:
    assert Job.objects.complete([(job.id, job.token, value)]) == {job.token: "done"}


def fail(job: Claim, exc: BaseException, retry_in: float | None, worker: str = WORKER) -> str:
    """Record a failed attempt the way the worker does (class path without 'builtins.'); returns
    the job's new status."""
    import traceback

    try:
        raise exc
    except BaseException:
        text = traceback.format_exc()
    error_class = f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins.")
    outcomes = Job.objects.fail([Failure(job.id, job.token, error_class, str(exc), text, retry_in)])
    assert job.token in outcomes
    return outcomes[job.token].status


def release(job: Claim, worker: str = WORKER) -> None:
    assert Job.objects.release([(job.id, job.token)], "shutdown") == {job.id}


def sweep_expired() -> list[int]:
    """One sweep pass; the ids that went dead."""
    return Job.objects.sweep(lock=False).to_dead


def cancel(job_id: int, by: str) -> None:
    assert Job.objects.cancel([job_id], by=by) == [job_id]


def retry(job_id: int, by: str) -> None:
    assert Job.objects.retry([job_id], by=by) == [job_id]
