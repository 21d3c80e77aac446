"""Exceptions raised to callers of the public API."""

from __future__ import annotations


class PgJobsError(Exception):
    """Base class for every error django-pgjobs raises on purpose."""


class InvalidJob(PgJobsError, ValueError):
    """Enqueue arguments or options that cannot be stored faithfully; nothing was written."""


class PayloadNotSerializable(InvalidJob, TypeError):
    """A handler argument or result that does not round-trip through JSON unchanged."""


class IdempotencyConflict(PgJobsError):
    """The idempotency key is taken by a job with a different task or payload.

    A key names one side effect; silently replacing what it does would make retries unauditable,
    so the stored row is kept and the caller is told (as payment APIs do).
    """

    def __init__(self, key: str, *, task: str | None = None) -> None:
        self.key = key
        self.task = task
        detail = f" (new task {task!r})" if task else ""
        super().__init__(
            f"idempotency key {key!r} already belongs to a job with a different task or payload"
            f"{detail}; the stored job was left unchanged"
        )


class UnknownTask(PgJobsError, LookupError):
    """No handler is registered under the task name stored in a row."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no handler registered for task {name!r}")


class DuplicateTaskName(PgJobsError):
    """Two different functions registered under one task name."""


class DirectWriteRefused(PgJobsError, TypeError):
    """An ORM write on jobs (``save()``, ``delete()``, ``QuerySet.update()``...).

    Job rows change only through the store (``Job.objects``), whose every statement re-checks the
    row's state and fence. An ORM write cannot: a row loaded before a claim and saved after it put
    a running job back to ``ready`` with no owner, and a second worker ran it concurrently.
    """

    def __init__(self, operation: str, instead: str) -> None:
        self.operation = operation
        super().__init__(
            f"{operation} is refused on jobs: rows change only through Job.objects, which fences "
            f"every write on the job's state; {instead}"
        )
