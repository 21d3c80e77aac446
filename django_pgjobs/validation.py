"""What a job must be before it is written: the enqueue options, checked into SQL parameters.

Everything is refused here, before any statement runs, with an error that names the job and the
option, so bad input never reaches the table (and never half-reaches it in a bulk enqueue).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from .conf import get_settings
from .exceptions import InvalidJob
from .payloads import check_payload, dumps

MAX_QUEUE_LENGTH = 100
MAX_TASK_LENGTH = 200
MAX_KEY_LENGTH = 255
MAX_LAST_ERROR = 2000
SMALLINT = (-32768, 32767)
MAX_INT = 2**31 - 1
#: Longest delay accepted; beyond it timestamps overflow in PostgreSQL.
MAX_DELAY_SECONDS = 100 * 365.25 * 24 * 3600
#: Queue names may not start with this: the NOTIFY channel's payload is the queue name, and
#: ``pgjobs:cancel`` and ``pgjobs:queues`` are the workers' control messages, so a queue named like
#: one would never be woken by its enqueues (the listener takes the notification for the control).
RESERVED_QUEUE_PREFIX = "pgjobs:"


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


def text(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidJob(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > limit:
        raise InvalidJob(f"{what} is {len(value)} characters long; the limit is {limit}")
    if "\x00" in value:
        raise InvalidJob(f"{what} may not contain NUL characters")
    return value


def queue_name(value: Any) -> str:
    """A queue name: 1-``MAX_QUEUE_LENGTH`` characters, no NUL, not in the reserved ``pgjobs:``
    namespace (see :data:`RESERVED_QUEUE_PREFIX`)."""
    name = text(value, "queue name", MAX_QUEUE_LENGTH)
    if name.startswith(RESERVED_QUEUE_PREFIX):
        raise InvalidJob(
            f"queue name {name!r} is reserved: names starting with {RESERVED_QUEUE_PREFIX!r} are the "
            "workers' control messages on the NOTIFY channel; choose another name"
        )
    return name


def integer(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidJob(f"{what} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise InvalidJob(f"{what} must be between {low} and {high}, got {value}")
    return value


def schedule(run_at: Any, delay: Any) -> tuple[dt.datetime | None, float]:
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


def serialised_payload(task: str, payload: Any, *, checked: bool = False) -> str:
    """The payload as JSON text, refused when it would not round-trip or is over the size limit.

    ``checked``: the caller (``JobHandler.payload_for``) already checked the values one argument
    at a time, so only the shape and size are left to check here.
    """
    if not checked:
        check_payload(task, payload)
    serialised = dumps(payload)  # ASCII (json's default escaping): characters == bytes
    limit = get_settings().MAX_PAYLOAD_BYTES
    if len(serialised) > limit:
        raise InvalidJob(
            f"job {task!r}: payload is {len(serialised):,} bytes of JSON; the limit is {limit:,} "
            "(PGJOBS['MAX_PAYLOAD_BYTES']). Store large data elsewhere and pass its id."
        )
    return serialised


def job_parameters(new: NewJob, *, checked: bool = False) -> dict[str, Any]:
    """Validate one job's options into the store's enqueue parameters, or raise
    :class:`InvalidJob` naming the job and the option."""
    s = get_settings()
    task = text(new.task, "task name", MAX_TASK_LENGTH)
    try:
        queue = queue_name(s.DEFAULT_QUEUE if new.queue is None else new.queue)
        priority = integer(
            s.DEFAULT_PRIORITY if new.priority is None else new.priority, "priority", *SMALLINT
        )
        max_attempts = integer(
            s.DEFAULT_MAX_ATTEMPTS if new.max_attempts is None else new.max_attempts,
            "max_attempts",
            1,
            MAX_INT,
        )
        key = new.idempotency_key
        if key is not None:
            text(key, "idempotency_key", MAX_KEY_LENGTH)
        run_at, delay = schedule(new.run_at, new.delay)
    except InvalidJob as exc:
        raise InvalidJob(f"job {task!r}: {exc}") from None
    return {
        "task": task,
        "queue": queue,
        "payload": serialised_payload(task, new.payload, checked=checked),
        "priority": priority,
        "max_attempts": max_attempts,
        "run_at": run_at,
        "delay": delay,
        "idempotency_key": key,
    }
