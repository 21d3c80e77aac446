"""The @task functions the backend tests enqueue; autodiscovered (tasks.py) like a user's."""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection

from django_pgjobs.tasks import FRAMEWORK

if FRAMEWORK == "django.tasks":
    from django.tasks import TaskContext, task, task_backends
else:
    from django_tasks import TaskContext, task, task_backends  # type: ignore[no-redef]

#: Django 6.1 and the backport pass extra @task(...) arguments to the backend's task_class;
#: Django 6.0's decorator takes none.
DECORATOR_FORWARDS_OPTIONS = any(
    p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(task).parameters.values()
)


def pgjobs_task(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``@task(**options)`` with django-pgjobs options on every Django version: through the
    decorator where it forwards them, otherwise by building the backend's ``task_class`` the way
    Django 6.1's decorator does."""
    if DECORATOR_FORWARDS_OPTIONS:
        return task(**options)  # type: ignore[no-any-return]

    def wrap(func: Callable[..., Any]) -> Any:
        django_options = {
            "priority": options.pop("priority", 0),
            "queue_name": options.pop("queue_name", "default"),
            "backend": options.pop("backend", "default"),
            "takes_context": options.pop("takes_context", False),
        }
        return task_backends[django_options["backend"]].task_class(
            func=func, run_after=None, **django_options, **options
        )

    return wrap


def record_row(kind: str, job_id: int | None, value: Any = None) -> None:
    """A row in the side-effect table (created by the ``clean_executions`` fixture)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO test_executions (kind, job_id, value, pid) VALUES (%s, %s, %s, %s)",
            [kind, job_id, None if value is None else str(value), os.getpid()],
        )


@task()
def noop_task(*args: Any, **kwargs: Any) -> None:
    return None


@task
def noop_task_from_bare_decorator(*args: Any, **kwargs: Any) -> None:
    return None


@task()
async def noop_task_async(*args: Any, **kwargs: Any) -> None:
    return None


@task()
def calculate_meaning_of_life() -> int:
    return 42


@task()
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Returns exactly what it received."""
    return {"args": list(args), "kwargs": kwargs}


@task()
def typed(a: int, b: int = 2, *, c: Any = None) -> int:
    return a + b


@task()
def returns_tuple() -> tuple[int, str]:
    return (1, "two")


@task()
def returns_unstorable() -> Any:
    return {"when": object()}


@task()
def failing_task_value_error() -> None:
    raise ValueError("This task failed due to ValueError")


@task()
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task(queue_name="reports")
def record(label: str) -> str:
    """Writes its label, so a test can see the order tasks ran in."""
    record_row("task", None, label)
    return label


@task(takes_context=True)
def get_context(context: TaskContext) -> dict[str, Any]:
    result = context.task_result
    record_row("context", int(result.id), context.attempt)
    return {
        "id": result.id,
        "attempt": context.attempt,
        "status": str(result.status),
        "worker_ids": result.worker_ids,
        "started": result.started_at is not None,
    }


@task(takes_context=True)
async def get_context_async(context: TaskContext, label: str) -> dict[str, Any]:
    """Async, with database access through the async ORM path (sync_to_async), in the worker."""
    await sync_to_async(record_row)("async", int(context.task_result.id), label)
    return {"attempt": context.attempt, "label": label}


@pgjobs_task(takes_context=True, backoff=lambda attempt, exc: 0.0)
def flaky(context: TaskContext, succeed_on: int) -> int:
    """Fails until its ``succeed_on``-th attempt; retried at once (backoff 0)."""
    record_row("flaky", int(context.task_result.id), context.attempt)
    if context.attempt < succeed_on:
        raise RuntimeError(f"attempt {context.attempt} fails on purpose")
    return context.attempt


@task(takes_context=True)
def wait_for_release(context: TaskContext, timeout: float = 30.0) -> str:
    """Runs until the test writes a 'release' row for this job (bounded), so a test can look at
    a job while it is RUNNING without sleeping for a fixed time."""
    job_id = int(context.task_result.id)
    record_row("waiting", job_id)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM test_executions WHERE kind = 'release' AND job_id = %s", [job_id])
            if cursor.fetchone():
                return "released"
        time.sleep(0.02)
    raise TimeoutError("never released")


@task()
def breaks_finished_receiver() -> str:
    """A task_finished receiver raises for this one (tests/tasks/taskapp/apps.py)."""
    record_row("task", None, "breaks_finished_receiver")
    return "ran"


def not_a_task() -> None:
    """A module-level function that is *not* a task: a row naming it must not run it."""
    record_row("not_a_task", None)
