"""``Job.objects``: the Python face of :mod:`django_pgjobs.store`, and ORM reads.

Reads (the admin's lists, ``Job.objects.get(pk=...)``) are ordinary querysets on
``PGJOBS["DATABASE"]``. Writes are the store's statements; the queryset's own writers refuse with
the operation to use instead (see :class:`~django_pgjobs.exceptions.DirectWriteRefused`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from django.db import models

from .conf import get_settings
from .payloads import check_payload, dumps
from .store import (
    Claim,
    Enqueued,
    Failure,
    FailureOutcome,
    HeartbeatResult,
    PromoteResult,
    Store,
    SweepResult,
)
from .validation import (
    MAX_INT,
    SMALLINT,
    NewJob,
    integer,
    queue_name,
    schedule,
    serialised_payload,
)

if TYPE_CHECKING:
    from .models import Job

__all__ = [
    "Claim",
    "Enqueued",
    "Failure",
    "FailureOutcome",
    "HeartbeatResult",
    "JobManager",
    "JobQuerySet",
    "NewJob",
    "PromoteResult",
    "SweepResult",
]


def _refuse(operation: str, instead: str) -> NoReturn:
    from .exceptions import DirectWriteRefused

    raise DirectWriteRefused(operation, instead)


class JobQuerySet(models.QuerySet["Job"]):
    """Reads as usual; writes refuse (they would bypass the state checks and the fence)."""

    def update(self, **kwargs: Any) -> NoReturn:
        _refuse(
            "QuerySet.update()",
            "use Job.objects.edit(id, ...) for a waiting or dead job, or retry(), cancel(), run_now()",
        )

    def delete(self) -> NoReturn:
        _refuse("QuerySet.delete()", "use Job.objects.discard(ids), which never deletes a running job")

    def bulk_create(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse("QuerySet.bulk_create()", "use Job.objects.enqueue_many([NewJob(...), ...])")

    def bulk_update(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse("QuerySet.bulk_update()", "use Job.objects.edit(id, ...) per job")

    def create(self, **kwargs: Any) -> NoReturn:
        _refuse("QuerySet.create()", "enqueue with a @job handler's .enqueue() or Job.objects.enqueue()")

    def get_or_create(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse("QuerySet.get_or_create()", "enqueue with an idempotency_key: a duplicate returns the job")

    def update_or_create(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse("QuerySet.update_or_create()", "use Job.objects.edit(id, ...)")


class JobManager(models.Manager.from_queryset(JobQuerySet)):  # type: ignore[misc]
    """Owner of the job state machine (``docs/architecture.md``); each method is one store call."""

    @property
    def db_alias(self) -> str:
        return self._db or get_settings().DATABASE

    @property
    def store(self) -> Store:
        return Store(self.db_alias)

    def get_queryset(self) -> models.QuerySet[Job]:
        """ORM reads go to the same database as the state changes, ``PGJOBS["DATABASE"]``, not
        wherever a router would send them."""
        return super().get_queryset().using(self.db_alias)

    # -- enqueue ----------------------------------------------------------------------------------
    def enqueue(
        self,
        task: str,
        payload: dict[str, Any] | None = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: dt.datetime | None = None,
        delay: float | dt.timedelta | None = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[Job, bool]:
        """Insert a job, or return the one that already holds ``idempotency_key``.

        Returns ``(job, created)``. Raises :class:`InvalidJob` (nothing written) for bad options and
        :class:`IdempotencyConflict` when the key belongs to a different task or payload.
        """
        return self.store.enqueue(
            NewJob(
                task,
                {} if payload is None else payload,
                queue,
                priority,
                run_at,
                delay,
                max_attempts,
                idempotency_key,
            )
        )

    def enqueue_many(self, jobs: Iterable[NewJob], *, batch_size: int = 5000) -> list[Enqueued]:
        """Enqueue many jobs with one statement per batch, all-or-nothing; results in input order."""
        return self.store.enqueue_many(jobs, batch_size=batch_size)

    # -- worker side ------------------------------------------------------------------------------
    def claim(
        self,
        queues: Sequence[str] | None,
        worker: str,
        limit: int = 1,
        lease: float | None = None,
        *,
        quotas: Mapping[str, int] | None = None,
    ) -> list[Claim]:
        """Claim up to ``limit`` ready jobs (every queue when ``queues`` is None)."""
        lease_seconds = get_settings().LEASE_SECONDS if lease is None else lease
        return self.store.claim(worker, limit=limit, lease=lease_seconds, queues=queues, quotas=quotas)

    def complete(self, finished: Sequence[tuple[int, int, Any]]) -> dict[int, str]:
        """Mark ``(job id, claim token, result)`` done; returns the claim tokens the fence accepted,
        each with the status written (``cancelled`` for a job asked to stop that finished)."""
        return self.store.complete([(i, t, dumps(r)) for i, t, r in finished])

    def fail(self, failures: Sequence[Failure]) -> dict[int, FailureOutcome]:
        """Record failed attempts (retry later, or dead), by claim token; tokens missing were
        refused by the fence."""
        return self.store.fail(failures)

    def heartbeat(self, leases: Sequence[tuple[int, int, float]]) -> HeartbeatResult:
        """Extend the leases of ``(job id, claim token, seconds)``."""
        return self.store.heartbeat(leases)

    def release(self, jobs: Sequence[tuple[int, int]], reason: str = "released") -> set[int]:
        """Give ``(job id, claim token)`` back to ready without charging the attempt."""
        return self.store.release(jobs, reason)

    def release_unknown(self, worker: str, known_tokens: Iterable[int], reason: str) -> list[int]:
        """Release ``worker``'s running jobs whose claim tokens are not in ``known_tokens``."""
        return self.store.release_unknown(worker, known_tokens, reason)

    def promote(self, *, limit: int = 1000) -> PromoteResult:
        """Scheduled jobs that fell due become ready."""
        return self.store.promote(limit=limit)

    # -- recovery ---------------------------------------------------------------------------------
    def sweep(self, *, limit: int = 1000, lock: bool = True) -> SweepResult:
        """Expired leases back to ready, or dead when their attempts are spent."""
        return self.store.sweep(limit=limit, lock=lock)

    def sweep_preview(self) -> tuple[int, int, int]:
        """(would go ready, would go dead, would be cancelled) for a dry run; changes nothing."""
        return self.store.sweep_preview()

    def prune(self, status: str, older_than: float, *, limit: int = 1000) -> int:
        """Delete up to ``limit`` finished jobs in ``status`` older than ``older_than`` seconds."""
        return self.store.prune(status, older_than, limit=limit)

    # -- operator actions -------------------------------------------------------------------------
    def retry(self, ids: Iterable[int], *, by: str | None = None, attempts: int | None = None) -> list[int]:
        """Dead or cancelled jobs back to ready with a fresh budget of attempts; history is kept."""
        if attempts is not None:
            integer(attempts, "attempts", 1, MAX_INT)
        return self.store.retry(ids, by=by, attempts=attempts)

    def cancel(self, ids: Iterable[int], *, by: str | None = None) -> list[int]:
        """Scheduled or ready jobs to cancelled at once, with the reason recorded; running jobs
        asked to stop (see README "Cancelling running jobs"). Returns the ids of both."""
        return self.store.cancel(ids, by=by).changed

    def run_now(self, ids: Iterable[int]) -> list[int]:
        """Scheduled jobs become due now."""
        return self.store.run_now(ids)

    def discard(self, ids: Iterable[int]) -> list[int]:
        """Delete jobs that are not running; running ones are left alone."""
        return self.store.discard(ids)

    def edit(
        self,
        job_id: int,
        *,
        payload: dict[str, Any] | None = None,
        run_at: dt.datetime | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        queue: str | None = None,
    ) -> Job | None:
        """Change a waiting, dead or cancelled job; None when it is running, done (it already ran
        with what it had) or gone. Values are checked like an enqueue's."""
        current = self.filter(pk=job_id).values_list("task", flat=True).first()
        if current is None:
            return None
        changes: dict[str, Any] = {}
        if payload is not None:
            check_payload(current, payload)
            changes["payload"] = serialised_payload(current, payload, checked=True)
        if run_at is not None:
            schedule(run_at, None)
            changes["run_at"] = run_at
        if priority is not None:
            changes["priority"] = integer(priority, "priority", *SMALLINT)
        if max_attempts is not None:
            changes["max_attempts"] = integer(max_attempts, "max_attempts", 1, MAX_INT)
        if queue is not None:
            changes["queue"] = queue_name(queue)
        return self.store.edit(job_id, changes)
