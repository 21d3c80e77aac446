"""Exceptions raised to callers of the public API."""

from __future__ import annotations

import datetime as dt


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


class JobCancelled(PgJobsError):
    """The job was cancelled: raised in a running handler by ``context.check_cancelled()`` once it
    was asked to stop (and how an ``async def`` handler's cancelled task ends), or by a handler that
    cancels itself. The job ends ``cancelled`` and is never retried."""


class Snooze(Exception):
    """Raised by a handler: run this job again in ``seconds`` without spending an attempt.

    The attempt history records the snooze; a job snoozed more than ``PGJOBS["MAX_SNOOZES"]`` times
    goes dead with that reason, so a bug cannot snooze for ever. ``seconds`` outside 0 to
    ``MAX_DELAY_SECONDS`` (100 years) raises ``ValueError`` here, in the handler: an ordinary
    failure of the attempt, retried by the handler's backoff.
    """

    def __init__(self, seconds: float | int | dt.timedelta) -> None:
        # The store's own bound (imported here: validation imports this module).
        from .validation import MAX_DELAY_SECONDS

        value = seconds.total_seconds() if isinstance(seconds, dt.timedelta) else seconds
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not 0 <= value <= MAX_DELAY_SECONDS:
            raise ValueError(
                f"Snooze(seconds): a number of seconds from 0 to {MAX_DELAY_SECONDS:.0f} (100 years, the "
                f"longest delay a job can be given), not {seconds!r}"
            )
        self.seconds = float(value)
        super().__init__(f"snoozed for {self.seconds:g}s")


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
