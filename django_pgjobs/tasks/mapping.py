"""Our jobs, seen through Django's tasks API: states, priorities and the attempt history mapped to
``TaskResult``.

This is the one module that knows both sides. When the job storage changes (states, the priority
direction, the history format), this is what to adapt; the backend, the task class and the worker
adapter only call the functions below.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from .compat import Task, TaskError, TaskResult, TaskResultStatus
from .errors import JobCancelled, LeaseExpired

if TYPE_CHECKING:
    from ..models import Job
    from ..registry import JobContext

# -- states -------------------------------------------------------------------------------------
#: Our job states -> Django's. Django 6.0, 6.1 and its main branch have only READY, RUNNING,
#: SUCCESSFUL and FAILED, so a cancelled job is FAILED (its errors name :class:`JobCancelled`).
STATUS: dict[str, TaskResultStatus] = {
    "scheduled": TaskResultStatus.READY,
    "ready": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "done": TaskResultStatus.SUCCESSFUL,
    "dead": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}
FINISHED = frozenset({TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED})


def task_status(job_status: str) -> TaskResultStatus:
    try:
        return STATUS[job_status]
    except KeyError:
        raise ValueError(f"job status {job_status!r} has no django.tasks equivalent") from None


# -- priorities ---------------------------------------------------------------------------------
def to_pgjobs_priority(priority: int) -> int:
    """Django's priority (-100..100, higher runs first) -> the value stored in the job row.

    The identity: since 0.2 django-pgjobs runs higher priorities first too (``ORDER BY priority
    DESC``), so a ``@task`` and a ``@job`` with the same priority value are equals in one queue.
    ``tests/tasks/test_worker.py::test_higher_priority_runs_first`` checks the direction against a
    real worker.
    """
    return int(priority)


def from_pgjobs_priority(priority: int) -> int:
    """The inverse of :func:`to_pgjobs_priority` (a stored priority -> Django's)."""
    return int(priority)


# -- scheduling ---------------------------------------------------------------------------------
def run_at_for(run_after: dt.datetime | None) -> dt.datetime | None:
    """``Task.run_after`` -> the ``run_at`` our enqueue takes (aware datetimes only). With
    ``USE_TZ = False`` Django hands out naive local times; they are read in ``TIME_ZONE``."""
    if run_after is None or timezone.is_aware(run_after):
        return run_after
    if settings.USE_TZ:
        return run_after  # refused by the backend's validation before it gets here
    return timezone.make_aware(run_after)


# -- the attempt history ------------------------------------------------------------------------
#: History outcomes that are a run of the task (each spent an attempt).
RUN_OUTCOMES = frozenset({"done", "failed", "lease expired", "cancelled after finishing"})
#: Every outcome that ends an attempt (a released or snoozed attempt was claimed, its number is used).
ATTEMPT_OUTCOMES = RUN_OUTCOMES | {"released", "snoozed"}
#: History outcomes that are an error in Django's sense (the run failed, or it never could run).
ERROR_OUTCOMES = frozenset({"failed", "lease expired", "cancelled", "cancelled after finishing"})
#: An operator's Retry in the admin: the job starts over with a fresh attempt budget.
#: A worker id for an attempt whose history entry was dropped by ``PGJOBS["HISTORY_LIMIT"]``.
UNKNOWN_WORKER = "(not in history)"


def exception_class_path(error_class: str | None) -> str:
    """Our stored ``error_class`` -> a path ``import_string`` resolves. The worker strips the
    ``builtins.`` prefix ("ValueError"); Django's ``TaskError.exception_class`` needs it back."""
    if not error_class:
        return "builtins.Exception"
    return error_class if "." in error_class else f"builtins.{error_class}"


def _class_path(cls: type[BaseException]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def task_error(entry: Mapping[str, Any]) -> TaskError:
    """One failed history entry -> Django's ``TaskError`` (class path and traceback)."""
    outcome = entry.get("outcome")
    if outcome == "lease expired":
        path = _class_path(LeaseExpired)
        where = f"worker {entry.get('worker', '?')}, attempt {entry.get('attempt', '?')}"
        text = f"{path}: lease expired ({where})\n"
    elif outcome == "cancelled":
        path = _class_path(JobCancelled)
        text = f"{path}: {entry.get('message') or 'cancelled'}\n"
    else:
        path = exception_class_path(entry.get("error_class"))
        text = entry.get("traceback") or f"{path}: {entry.get('message') or ''}\n"
    return TaskError(exception_class_path=path, traceback=text)


def worker_ids(job: Job) -> list[str]:
    """One worker id per attempt, in attempt order, so that ``TaskResult.attempts`` (and
    ``TaskContext.attempt``) equal ``Job.attempts``. Attempt numbers never repeat: an operator's
    retry keeps counting, and an attempt handed back on shutdown keeps its number.

    A running job's last attempt is its current claim (``locked_by``); earlier ones come from the
    history (an entry dropped by ``HISTORY_LIMIT`` shows as :data:`UNKNOWN_WORKER`).
    """
    count = job.attempts
    by_attempt: dict[int, str] = {}
    for entry in job.history or []:
        if entry.get("outcome") in ATTEMPT_OUTCOMES and isinstance(entry.get("attempt"), int):
            by_attempt[entry["attempt"]] = str(entry.get("worker") or UNKNOWN_WORKER)
    if job.status == "running" and job.locked_by and count:
        by_attempt[count] = job.locked_by
    return [by_attempt.get(n, UNKNOWN_WORKER) for n in range(1, count + 1)]


def _runs(history: Iterable[Mapping[str, Any]]) -> list[dt.datetime]:
    starts = []
    for entry in history:
        if entry.get("outcome") in RUN_OUTCOMES and entry.get("started_at"):
            parsed = parse_datetime(str(entry["started_at"]))
            if parsed is not None:
                starts.append(parsed)
    return starts


# -- TaskResult ---------------------------------------------------------------------------------
def result_task(definition: Task, job: Job, backend: str) -> Task:
    """The ``Task`` a stored job is a run of: its definition with the options the row was enqueued
    with. Built without re-validating: a stored result must stay readable after ``QUEUES`` or the
    definition changed (validation is for enqueueing)."""
    run_after = job.run_at if job.run_at and job.created_at and job.run_at > job.created_at else None
    changes: dict[str, Any] = {
        "priority": from_pgjobs_priority(job.priority),
        "queue_name": job.queue,
        "run_after": run_after,
        "backend": backend,
    }
    if hasattr(definition, "idempotency_key"):
        changes["idempotency_key"] = job.idempotency_key
    return copy_task(definition, **changes)


def copy_task(task: Task, **changes: Any) -> Task:
    """``dataclasses.replace`` without ``__post_init__`` (which would validate against the backend
    again). ``Task`` is a frozen dataclass with slots: fields are set with ``object.__setattr__``."""
    cls = type(task)
    clone = object.__new__(cls)
    for name in _field_names(cls):
        object.__setattr__(clone, name, changes[name] if name in changes else getattr(task, name))
    return clone


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    """Per class, once: ``dataclasses.fields()`` showed up in every enqueue's profile."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def result_from_job(job: Job, definition: Task, backend: str) -> TaskResult:
    """A complete ``TaskResult`` from a job row (every column loaded)."""
    status = task_status(job.status)
    history: list[dict[str, Any]] = job.history or []
    starts = _runs(history)
    if job.status == "running" and job.started_at:
        starts.append(job.started_at)
    result: TaskResult = TaskResult(
        task=result_task(definition, job, backend),
        id=str(job.id),
        status=status,
        enqueued_at=job.created_at,
        started_at=min(starts) if starts else None,
        last_attempted_at=job.started_at or (max(starts) if starts else None),
        finished_at=job.finished_at if status in FINISHED else None,
        args=job.args,
        kwargs=job.kwargs,
        backend=backend,
        errors=[task_error(e) for e in history if e.get("outcome") in ERROR_OUTCOMES],
        worker_ids=worker_ids(job),
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", job.result)
    return result


def result_from_claim(
    definition: Task, context: JobContext, args: list[Any], kwargs: dict[str, Any], backend: str
) -> TaskResult:
    """A RUNNING ``TaskResult`` from what the claim handed the worker, without reading the row.

    Only for a run nobody can look at closely: a task without ``takes_context`` whose signals have
    no receivers but the framework's own, which log the id, the task path and the status (exact
    here). The rest is what the claim knows: the job's priority and ``run_after`` are the
    definition's, ``enqueued_at`` and ``started_at`` are unknown (None), ``last_attempted_at`` is
    now, earlier attempts' workers are :data:`UNKNOWN_WORKER` and their errors are left out.
    """
    changes: dict[str, Any] = {"queue_name": context.queue, "backend": backend}
    if hasattr(definition, "idempotency_key"):
        changes["idempotency_key"] = context.idempotency_key
    return TaskResult(
        task=copy_task(definition, **changes),
        id=str(context.job_id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=None,
        last_attempted_at=timezone.now(),
        finished_at=None,
        args=args,
        kwargs=kwargs,
        backend=backend,
        errors=[],
        worker_ids=[UNKNOWN_WORKER] * (context.attempt - 1) + [context.worker_id],
    )
