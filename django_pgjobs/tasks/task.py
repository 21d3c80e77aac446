"""``PgJobsTask``: the backend's ``task_class``, a Django ``Task`` with django-pgjobs' options.

Django 6.1 (and the ``django-tasks`` backport) pass extra ``@task(...)`` keyword arguments to the
backend's ``task_class``, so on those versions::

    @task(max_attempts=8, backoff={"base": 3, "cap": 600}, lease=120, timeout=900)
    def rebuild_index(shard: int) -> None: ...

Django 6.0's decorator takes no extra arguments; there the ``PGJOBS`` settings apply
(``DEFAULT_MAX_ATTEMPTS``, ``BACKOFF_*``, ``LEASE_SECONDS``, no timeout). On every version
``.using()`` also takes the per-call options ``max_attempts`` and ``idempotency_key``::

    send_receipt.using(idempotency_key=f"invoice:{invoice.pk}:receipt").enqueue(invoice.pk)

``backoff``, ``lease`` and ``timeout`` belong to the definition (the worker reads them from the
registry, by task name), so ``.using()`` does not take them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .compat import Task

#: What ``@task(backoff=...)`` accepts: the ``@job`` forms (a dict of base/cap/jitter, or a callable
#: ``(attempt, exception) -> seconds | None``).
Backoff = Mapping[str, float] | Callable[[int, BaseException | None], "float | None"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PgJobsTask(Task):
    """A ``Task`` that also carries django-pgjobs options; every field defaults to "not set", so a
    plain ``@task`` behaves exactly like Django's own ``Task``."""

    #: Runs before the job is dead-lettered (``None``: ``PGJOBS["DEFAULT_MAX_ATTEMPTS"]``).
    max_attempts: int | None = None
    #: Delay before a retry (``None``: the ``PGJOBS["BACKOFF_*"]`` policy). Not hashed: a dict.
    backoff: Backoff | None = field(default=None, hash=False)
    #: Seconds a claim lives without a heartbeat (``None``: ``PGJOBS["LEASE_SECONDS"]``).
    lease: float | None = None
    #: Longest run before the job is taken back and retried elsewhere (``None``: no limit).
    timeout: float | None = None
    #: Per call, through ``.using()``: the same key returns the existing job instead of a new one.
    idempotency_key: str | None = None

    def using(
        self,
        *,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        **options: Any,
    ) -> PgJobsTask:
        """Django's ``Task.using()`` (priority, queue_name, run_after, backend, ...) plus our
        per-call options. Validated by the backend like any new ``Task``."""
        # Task.using by name, not super(): zero-argument super() breaks in slotted dataclasses.
        task: PgJobsTask = Task.using(self, **options)  # type: ignore[assignment]
        ours: dict[str, Any] = {
            name: value
            for name, value in (("idempotency_key", idempotency_key), ("max_attempts", max_attempts))
            if value is not None
        }
        return replace(task, **ours) if ours else task
