"""JobManager: the Python face of :mod:`django_pgjobs.sql`, and the only code that moves jobs
between states. Worker, sweeper, admin and the public ``enqueue`` API all come through here.

Each operation is one statement on the configured database's Django connection. Outside a
transaction that statement commits on its own (the claim's row locks last one statement); inside the
caller's ``transaction.atomic()`` it joins it, so a job enqueued with the data it is about commits or
rolls back with that data.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import connections, models, transaction
from django.db.models.base import DEFERRED
from django.utils import timezone

from . import sql
from .conf import get_settings
from .exceptions import IdempotencyConflict, InvalidJob
from .payloads import check_payload, dumps

if TYPE_CHECKING:
    from .models import Job

MAX_QUEUE_LENGTH = 100
MAX_TASK_LENGTH = 200
MAX_KEY_LENGTH = 255
MAX_LAST_ERROR = 2000
SMALLINT = (-32768, 32767)
_JSON_COLUMNS = frozenset({"payload", "result", "history"})


@functools.cache
def _model_attnames(model: type[models.Model]) -> tuple[str, ...]:
    """Concrete field names in model order (what ``Model.from_db`` expects), once per model."""
    return tuple(f.attname for f in model._meta.concrete_fields)


#: Longest delay accepted; beyond it timestamps overflow in PostgreSQL.
MAX_DELAY_SECONDS = 100 * 365.25 * 24 * 3600
#: Advisory lock key for "one sweeper at a time" (a stable 32-bit hash of the name).
SWEEP_LOCK_KEY = zlib.crc32(b"django_pgjobs.sweep")


@dataclass(frozen=True)
class NewJob:
    """One job for :meth:`JobManager.enqueue_many`; options left None take the defaults."""

    task: str
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    run_at: dt.datetime | None = None
    delay: float | dt.timedelta | None = None
    max_attempts: int | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True)
class Enqueued:
    id: int
    created: bool


@dataclass(frozen=True)
class FailureOutcome:
    """What :meth:`JobManager.fail` did: None when fencing refused the write."""

    status: str
    run_at: dt.datetime


@dataclass(frozen=True)
class SweepResult:
    ran: bool  # False when another process held the sweep lock
    to_ready: list[int] = field(default_factory=list)
    to_dead: list[int] = field(default_factory=list)


def _text(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidJob(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > limit:
        raise InvalidJob(f"{what} is {len(value)} characters long; the limit is {limit}")
    if "\x00" in value:
        raise InvalidJob(f"{what} may not contain NUL characters")
    return value


def _integer(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidJob(f"{what} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise InvalidJob(f"{what} must be between {low} and {high}, got {value}")
    return value


def _schedule(run_at: Any, delay: Any) -> tuple[dt.datetime | None, float]:
    """Validate ``run_at``/``delay`` into (absolute time or None, delay seconds)."""
    if run_at is not None and delay is not None:
        raise InvalidJob("give run_at or delay, not both")
    if run_at is not None:
        if not isinstance(run_at, dt.datetime):
            raise InvalidJob(f"run_at must be a datetime, got {type(run_at).__name__}")
        if timezone.is_naive(run_at):
            raise InvalidJob(
                f"run_at {run_at.isoformat()} is naive; pass an aware datetime "
                "(django.utils.timezone.now() + timedelta(...))"
            )
        return run_at, 0.0
    if delay is None:
        return None, 0.0
    seconds = delay.total_seconds() if isinstance(delay, dt.timedelta) else delay
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidJob(f"delay must be seconds or a timedelta, got {delay!r}")
    if not seconds >= 0:  # also rejects NaN
        raise InvalidJob(f"delay must be >= 0 seconds, got {delay!r}")
    if not seconds <= MAX_DELAY_SECONDS:  # also inf: PostgreSQL would say "interval out of range"
        raise InvalidJob(f"delay must be at most {MAX_DELAY_SECONDS:.0f} seconds (100 years), got {delay!r}")
    return None, float(seconds)


def normalise(new: NewJob) -> dict[str, Any]:
    """Validate one job's options into SQL parameters, or raise :class:`InvalidJob`."""
    s = get_settings()
    task = _text(new.task, "task name", MAX_TASK_LENGTH)
    queue = _text(s.DEFAULT_QUEUE if new.queue is None else new.queue, "queue name", MAX_QUEUE_LENGTH)
    priority = _integer(s.DEFAULT_PRIORITY if new.priority is None else new.priority, "priority", *SMALLINT)
    max_attempts = _integer(
        s.DEFAULT_MAX_ATTEMPTS if new.max_attempts is None else new.max_attempts,
        "max_attempts",
        1,
        2**31 - 1,
    )
    key = new.idempotency_key
    if key is not None:
        _text(key, "idempotency_key", MAX_KEY_LENGTH)
    check_payload(task, new.payload)
    run_at, delay = _schedule(new.run_at, new.delay)
    return {
        "task": task,
        "queue": queue,
        "payload": dumps(new.payload),
        "priority": priority,
        "max_attempts": max_attempts,
        "run_at": run_at,
        "delay": delay,
        "idempotency_key": key,
    }


def _canonical(payload_json: str) -> str:
    """A serialised payload with object keys sorted, so equal JSON objects compare equal."""
    return json.dumps(json.loads(payload_json), sort_keys=True, separators=(",", ":"))


def _ids(ids: Iterable[int]) -> list[int]:
    return [int(i) for i in ids]


class JobManager(models.Manager["Job"]):
    """Owner of the job state machine: ready -> running -> done | ready (retry) | dead."""

    # -- plumbing ---------------------------------------------------------------------------------
    @property
    def db_alias(self) -> str:
        return self._db or get_settings().DATABASE

    def get_queryset(self) -> models.QuerySet[Job]:
        """ORM reads (admin lists, ``edit``'s lookup) go to the same database as the state
        changes, ``PGJOBS["DATABASE"]``, not wherever a router would send them."""
        return super().get_queryset().using(self.db_alias)

    def _execute(self, statement: str, params: dict[str, Any]) -> list[tuple]:
        with connections[self.db_alias].cursor() as cursor:
            cursor.execute(statement, params)
            return cursor.fetchall() if cursor.description else []

    def _build(self, row: Sequence[Any], columns: Sequence[str] = sql.JOB_COLUMNS) -> Job:
        """A model instance from a ``RETURNING`` row; columns not returned are deferred (read on
        first access, like ``QuerySet.only()``)."""
        values = list(row[: len(columns)])
        # Django's psycopg setup hands jsonb back as text for JSONField.from_db_value; raw rows may
        # already be decoded depending on the cursor, so accept both.
        for i, name in enumerate(columns):
            if name in _JSON_COLUMNS and isinstance(values[i], str):
                values[i] = json.loads(values[i])
        by_name = dict(zip(columns, values, strict=True))
        attnames = _model_attnames(self.model)
        return self.model.from_db(
            self.db_alias,
            [name for name in attnames if name in by_name],
            [by_name.get(name, DEFERRED) for name in attnames],  # model field order
        )

    @staticmethod
    def _error_params(
        error_class: str | None = None, message: str | None = None, traceback: str | None = None
    ) -> dict[str, Any]:
        s = get_settings()
        if traceback is not None and len(traceback) > s.TRACEBACK_LIMIT:
            traceback = "...(truncated)...\n" + traceback[-s.TRACEBACK_LIMIT :]
        return {
            "error_class": error_class,
            "message": None if message is None else message[:MAX_LAST_ERROR],
            "traceback": traceback,
            "history_limit": s.HISTORY_LIMIT,
        }

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
        params = normalise(
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
        params["channel"] = get_settings().NOTIFY_CHANNEL
        rows = self._execute(sql.ENQUEUE, params)
        if not rows:
            raise IdempotencyConflict(params["idempotency_key"], task=params["task"])
        row = rows[0]
        return self._build(row), bool(row[len(sql.JOB_COLUMNS)])

    def enqueue_many(self, jobs: Iterable[NewJob], *, batch_size: int = 5000) -> list[Enqueued]:
        """Enqueue many jobs with one statement per batch; results are in input order.

        All-or-nothing: the batches run in one transaction (or the caller's), so a conflict or bad
        input anywhere writes nothing.
        """
        prepared = [normalise(j) for j in jobs]
        results: list[Enqueued] = []
        with transaction.atomic(using=self.db_alias):
            for start in range(0, len(prepared), batch_size):
                results.extend(self._enqueue_batch(prepared[start : start + batch_size]))
        return results

    def _enqueue_batch(self, batch: list[dict[str, Any]]) -> list[Enqueued]:
        # Fold repeated keys within the batch (ON CONFLICT may not hit one row twice per statement).
        first_with_key: dict[str, int] = {}
        unique: list[dict[str, Any]] = []
        position: list[int] = []  # input index -> index into `unique`
        for params in batch:
            key = params["idempotency_key"]
            if key is not None and key in first_with_key:
                earlier = unique[first_with_key[key]]
                # Compare as the table would (jsonb ignores object key order), not as raw text.
                if (earlier["task"], _canonical(earlier["payload"])) != (
                    params["task"],
                    _canonical(params["payload"]),
                ):
                    raise IdempotencyConflict(key, task=params["task"])
                position.append(first_with_key[key])
                continue
            if key is not None:
                first_with_key[key] = len(unique)
            position.append(len(unique))
            unique.append(params)

        def column(name: str) -> list[Any]:
            return [p[name] for p in unique]

        rows = self._execute(
            sql.ENQUEUE_MANY,
            {
                "tasks": column("task"),
                "queues": column("queue"),
                "payloads": column("payload"),
                "priorities": column("priority"),
                "max_attempts": column("max_attempts"),
                "run_ats": column("run_at"),
                "delays": column("delay"),
                "keys": column("idempotency_key"),
                "channel": get_settings().NOTIFY_CHANNEL,
            },
        )
        by_key = {key: (job_id, created) for job_id, key, created, _ in rows if key is not None}
        keyless = sorted((job_id, created) for job_id, key, created, _ in rows if key is None)
        keyless_iter = iter(keyless)  # drawn from the sequence in input order, so ids ascend
        outcome: list[Enqueued] = []
        for params in unique:
            key = params["idempotency_key"]
            if key is None:
                job_id, created = next(keyless_iter)
            elif key in by_key:
                job_id, created = by_key[key]
            else:
                raise IdempotencyConflict(key, task=params["task"])
            outcome.append(Enqueued(int(job_id), bool(created)))
        # A key repeated within the batch is a duplicate of its first occurrence.
        seen: set[int] = set()
        ordered: list[Enqueued] = []
        for index in position:
            e = outcome[index]
            ordered.append(Enqueued(e.id, e.created and index not in seen))
            seen.add(index)
        return ordered

    # -- worker side ------------------------------------------------------------------------------
    def claim(
        self,
        queues: Sequence[str] | None,
        worker_id: str,
        limit: int = 1,
        lease: float | None = None,
    ) -> list[Job]:
        """Claim up to ``limit`` ready jobs (one statement per queue named, at most ``limit`` in all).

        ``queues=None`` claims from every queue in one statement.
        """
        if limit < 1:
            return []
        lease_seconds = get_settings().LEASE_SECONDS if lease is None else lease
        base = {"worker_id": worker_id, "lease": float(lease_seconds)}
        if not queues:
            rows = self._execute(sql.CLAIM_ANY, {**base, "limit": limit})
            return [self._build(r, sql.CLAIM_COLUMNS) for r in rows]
        claimed: list[Job] = []
        for queue in queues:
            want = limit - len(claimed)
            if want <= 0:
                break
            rows = self._execute(sql.CLAIM_QUEUE, {**base, "limit": want, "queue": queue})
            claimed.extend(self._build(r, sql.CLAIM_COLUMNS) for r in rows)
        claimed.sort(key=lambda j: (j.priority, j.run_at, j.id))
        return claimed

    def complete(self, job_id: int, worker_id: str, attempt: int, result: Any = None) -> bool:
        """Mark a job done with its result; False when fencing refused (the job is not ours now)."""
        return job_id in self.complete_many(worker_id, [(job_id, attempt, result)])

    def complete_many(self, worker_id: str, finished: Sequence[tuple[int, int, Any]]) -> set[int]:
        """Acknowledge ``(job_id, attempt, result)`` in one statement; returns the ids accepted.

        Ids missing from the answer were refused by fencing: their lease lapsed and someone else
        owns (or already finished) the job.
        """
        if not finished:
            return set()
        params = {
            "worker_id": worker_id,
            "ids": [j for j, _, _ in finished],
            "attempts": [a for _, a, _ in finished],
            "results": [dumps(r) for _, _, r in finished],
            **self._error_params(),
        }
        return {r[0] for r in self._execute(sql.COMPLETE, params)}

    def fail(
        self,
        job_id: int,
        worker_id: str,
        attempt: int,
        *,
        error_class: str,
        message: str,
        traceback: str | None = None,
        retry_in: float | None,
    ) -> FailureOutcome | None:
        """Record a failed attempt; schedule the retry ``retry_in`` seconds from now, or dead-letter.

        ``retry_in=None`` means the backoff policy gave up. The job also goes dead when its attempts
        are spent. Returns None when fencing refused the write.
        """
        if retry_in is not None and not (0 <= retry_in <= MAX_DELAY_SECONDS):
            raise InvalidJob(f"retry delay must be a finite number >= 0 seconds, got {retry_in!r}")
        summary = f"{error_class}: {message}" if message else error_class
        params = {
            "id": job_id,
            "worker_id": worker_id,
            "attempt": attempt,
            "delay": None if retry_in is None else float(retry_in),
            "last_error": summary[:MAX_LAST_ERROR],
            **self._error_params(error_class, message, traceback),
        }
        rows = self._execute(sql.FAIL, params)
        if not rows:
            return None
        return FailureOutcome(status=rows[0][1], run_at=rows[0][2])

    def heartbeat(self, worker_id: str, leases: Sequence[tuple[int, int, float]]) -> set[int]:
        """Extend leases of ``(job_id, attempt, lease_seconds)``; returns the ids still ours."""
        if not leases:
            return set()
        rows = self._execute(
            sql.HEARTBEAT,
            {
                "worker_id": worker_id,
                "ids": [j for j, _, _ in leases],
                "attempts": [a for _, a, _ in leases],
                "leases": [float(s) for _, _, s in leases],
            },
        )
        return {r[0] for r in rows}

    def release(self, worker_id: str, jobs: Sequence[tuple[int, int]], reason: str = "released") -> set[int]:
        """Give claimed ``(job_id, attempt)`` back to ready without spending the attempt."""
        if not jobs:
            return set()
        params = {
            "worker_id": worker_id,
            "ids": [j for j, _ in jobs],
            "attempts": [a for _, a in jobs],
            **self._error_params(message=reason),
        }
        rows = self._execute(sql.RELEASE, params)
        self.notify(r[1] for r in rows)
        return {r[0] for r in rows}

    def notify(self, queues: Iterable[str]) -> None:
        """Wake idle workers of these queues (jobs became claimable outside enqueue)."""
        names = sorted(set(queues))
        if names:
            self._execute(sql.NOTIFY, {"channel": get_settings().NOTIFY_CHANNEL, "queues": names})

    # -- recovery ---------------------------------------------------------------------------------
    def sweep(self, *, limit: int = 1000, lock: bool = True) -> SweepResult:
        """Return expired leases to ready (or dead when attempts are spent), ``limit`` rows at most.

        With ``lock`` only one process per database sweeps at a time (transaction-level advisory
        lock); the others return ``SweepResult(ran=False)`` at once.
        """
        with transaction.atomic(using=self.db_alias):
            if lock and not self._execute(sql.TRY_SWEEP_LOCK, {"key": SWEEP_LOCK_KEY})[0][0]:
                return SweepResult(ran=False)
            rows = self._execute(
                sql.SWEEP,
                {"limit": limit, **self._error_params(message="lease expired")},
            )
            result = SweepResult(
                ran=True,
                to_ready=sorted(r[0] for r in rows if r[1] == "ready"),
                to_dead=sorted(r[0] for r in rows if r[1] == "dead"),
            )
            self.notify(r[2] for r in rows if r[1] == "ready")
        return result

    def sweep_preview(self) -> tuple[int, int]:
        """(would go ready, would go dead) for a dry run; changes nothing."""
        row = self._execute(sql.SWEEP_PREVIEW, {})[0]
        return int(row[0]), int(row[1])

    def prune(self, status: str, older_than: float, *, limit: int = 1000) -> int:
        """Delete up to ``limit`` ``done``/``dead`` jobs finished more than ``older_than`` s ago."""
        if status not in ("done", "dead"):
            raise InvalidJob(f"only done or dead jobs can be pruned, not {status!r}")
        rows = self._execute(sql.PRUNE, {"status": status, "age": float(older_than), "limit": limit})
        return len(rows)

    # -- operator actions -------------------------------------------------------------------------
    def retry(self, ids: Iterable[int], *, by: str | None = None) -> list[int]:
        """Dead jobs back to ready, to run now with a fresh attempt budget; history is kept."""
        message = f"retried by {by}" if by else "retried"
        rows = self._execute(sql.RETRY, {"ids": _ids(ids), **self._error_params(message=message)})
        self.notify(r[1] for r in rows)
        return sorted(r[0] for r in rows)

    def cancel(self, ids: Iterable[int], *, by: str | None = None) -> list[int]:
        """Ready (or delayed) jobs straight to dead, with the reason recorded."""
        message = f"cancelled by {by}" if by else "cancelled"
        rows = self._execute(sql.CANCEL, {"ids": _ids(ids), **self._error_params(message=message)})
        return sorted(r[0] for r in rows)

    def run_now(self, ids: Iterable[int]) -> list[int]:
        """Delayed ready jobs become due now."""
        rows = self._execute(sql.RUN_NOW, {"ids": _ids(ids)})
        self.notify(r[1] for r in rows)
        return sorted(r[0] for r in rows)

    def discard(self, ids: Iterable[int]) -> list[int]:
        """Delete jobs that are not running; running ones are refused (left alone)."""
        return sorted(r[0] for r in self._execute(sql.DISCARD, {"ids": _ids(ids)}))

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
        """Change a job that is ready or dead; None when it is running, done (it already ran with
        what it had) or gone."""
        current = self.filter(pk=job_id).values_list("task", flat=True).first()
        if current is None:
            return None
        if payload is not None:
            check_payload(current, payload)
        if run_at is not None:
            _schedule(run_at, None)
        if priority is not None:
            _integer(priority, "priority", *SMALLINT)
        if max_attempts is not None:
            _integer(max_attempts, "max_attempts", 1, 2**31 - 1)
        if queue is not None:
            _text(queue, "queue name", MAX_QUEUE_LENGTH)
        rows = self._execute(
            sql.EDIT,
            {
                "id": job_id,
                "payload": None if payload is None else dumps(payload),
                "run_at": run_at,
                "priority": priority,
                "max_attempts": max_attempts,
                "queue": queue,
            },
        )
        return self._build(rows[0]) if rows else None
