"""Pausing and resuming queues: a row in ``pgjobs_queue_pause`` per paused queue.

Every worker re-reads the table about once a second (:data:`REFRESH_SECONDS`, before a claim) and
claims nothing from a paused queue; jobs already running there finish, and enqueues go on. The
state lives in the database, so every worker of the fleet obeys it, including ones started later.
Both also notify the workers (:data:`QUEUES_CHANGED` after commit), so a listening worker re-reads
the table at once: a pause takes effect within milliseconds, and a resumed queue's idle workers
claim at once. Without LISTEN a worker re-reads the table before a claim when its copy is older
than ``REFRESH_SECONDS``.

The admin's pause/resume buttons and ``manage.py jobqueues`` come through here.
"""

from __future__ import annotations

from django.db import connections, transaction

from .conf import get_settings
from .models import QueuePause
from .notify import notifier
from .store import Store
from .validation import queue_name

#: How often a worker re-reads the paused queues.
REFRESH_SECONDS = 1.0
#: The NOTIFY payload that makes workers re-read the paused queues now.
QUEUES_CHANGED = "pgjobs:queues"

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
    """The enqueue side's rule for queue names (:func:`~django_pgjobs.validation.queue_name`; its
    ``InvalidJob`` is a ``ValueError``): a name no job can have is refused, not paused."""
    return queue_name(queue)


def pause(queue: str, *, by: str = "", using: str | None = None) -> bool:
    """Pause ``queue``; False when it was already paused (nothing changed)."""
    alias = using or get_settings().DATABASE
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(PAUSE, [_check(queue), str(by or "")[:200]])
        changed = bool(cursor.fetchall())
        if changed:
            notifier().wake_after_commit(alias, [QUEUES_CHANGED])
    return changed


def resume(queue: str, *, using: str | None = None) -> bool:
    """Resume ``queue``; False when it was not paused."""
    alias = using or get_settings().DATABASE
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(RESUME, [_check(queue)])
        resumed = bool(cursor.fetchall())
        if resumed:
            notifier().wake_after_commit(alias, [QUEUES_CHANGED, queue])
    return resumed


def paused(using: str | None = None) -> list[QueuePause]:
    """The paused queues, by name."""
    return list(QueuePause.objects.using(using or get_settings().DATABASE).order_by("queue"))


def paused_names(store: Store) -> frozenset[str]:
    """The paused queue names, read on a worker's own connection."""
    return frozenset(r[0] for r in store.run(PAUSED, {}))
