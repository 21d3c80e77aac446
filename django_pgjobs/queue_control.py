"""Pausing and resuming queues: a row in ``pgjobs_queue_pause`` per paused queue.

Every worker re-reads the table about once a second (:data:`REFRESH_SECONDS`, before a claim) and
claims nothing from a paused queue; jobs already running there finish, and enqueues go on. The
state lives in the database, so every worker of the fleet obeys it, including ones started later.
Resuming also wakes the queue's idle workers (a NOTIFY after commit), so claims restart at once.

The admin's pause/resume buttons and ``manage.py jobqueues`` come through here.
"""

from __future__ import annotations

from django.db import connections, transaction

from .conf import get_settings
from .models import QueuePause
from .notify import notifier
from .validation import MAX_QUEUE_LENGTH

#: How often a worker re-reads the paused queues.
REFRESH_SECONDS = 1.0

PAUSE = """
INSERT INTO pgjobs_queue_pause AS p (queue, paused_at, paused_by)
VALUES (%s, now(), %s)
ON CONFLICT (queue) DO NOTHING
RETURNING p.queue
"""
RESUME = "DELETE FROM pgjobs_queue_pause AS p WHERE p.queue = %s RETURNING p.queue"
#: What workers run every REFRESH_SECONDS (a table of a few rows).
PAUSED = "SELECT queue FROM pgjobs_queue_pause"


def _check(queue: str) -> str:
    if not isinstance(queue, str) or not queue.strip() or len(queue) > MAX_QUEUE_LENGTH or "\x00" in queue:
        raise ValueError(f"queue name {queue!r} must be 1-{MAX_QUEUE_LENGTH} characters, without NUL")
    return queue


def pause(queue: str, *, by: str = "", using: str | None = None) -> bool:
    """Pause ``queue``; False when it was already paused (nothing changed)."""
    alias = using or get_settings().DATABASE
    with connections[alias].cursor() as cursor:
        cursor.execute(PAUSE, [_check(queue), by[:200]])
        return bool(cursor.fetchall())


def resume(queue: str, *, using: str | None = None) -> bool:
    """Resume ``queue``; False when it was not paused."""
    alias = using or get_settings().DATABASE
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(RESUME, [_check(queue)])
        resumed = bool(cursor.fetchall())
        if resumed:
            notifier().wake_after_commit(alias, [queue])
    return resumed


def paused(using: str | None = None) -> list[QueuePause]:
    """The paused queues, by name."""
    return list(QueuePause.objects.using(using or get_settings().DATABASE).order_by("queue"))


def paused_names(cursor: object) -> frozenset[str]:
    """The paused queue names, read on a worker's own cursor."""
    cursor.execute(PAUSED)  # type: ignore[attr-defined]
    return frozenset(r[0] for r in cursor.fetchall())  # type: ignore[attr-defined]

