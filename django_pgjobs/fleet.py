"""The workers registry: one row per live ``runjobs`` process in ``pgjobs_worker``.

Written by the worker's heartbeat thread on its own connection: :func:`register` at start, :func:`beat`
every heartbeat (one HOT update of one row: ``expires_at``, ``heartbeat_at`` and ``in_flight`` are in
no index), :func:`deregister` on a clean exit. A process that dies without deregistering stops
being live when its ``expires_at`` passes (:data:`LIVE_BEATS` heartbeat intervals after its last
beat) and the sweep deletes its row after a grace period (:func:`prune`). A beat that finds its
row gone (pruned while the process was frozen) registers it again.

Reads (the admin's Workers page, ``jobstats``, the metrics) use :func:`live_workers`.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db.models import Q
from django.db.models.functions import Now

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from .models import WorkerProcess
    from .store import Store

#: A worker is live until this many heartbeat intervals pass without a beat.
LIVE_BEATS = 3
#: Rows of workers gone for longer than this are deleted by the sweep.
PRUNE_AFTER_SECONDS = 3600.0

REGISTER = """
INSERT INTO pgjobs_worker AS w
    (name, worker_id, host, pid, queues, queue_limits, concurrency, version, started_at,
     heartbeat_at, expires_at, in_flight)
VALUES (%(name)s::text, %(worker_id)s::text, %(host)s::text, %(pid)s::int, %(queues)s::jsonb,
        %(queue_limits)s::jsonb, %(concurrency)s::int, %(version)s::text, now(), now(),
        now() + make_interval(secs => %(live)s::float8), %(in_flight)s::int)
ON CONFLICT (name) DO UPDATE
SET heartbeat_at = now(), expires_at = EXCLUDED.expires_at, in_flight = EXCLUDED.in_flight
RETURNING w.name
"""

BEAT = """
UPDATE pgjobs_worker AS w
SET heartbeat_at = now(), expires_at = now() + make_interval(secs => %(live)s::float8),
    in_flight = %(in_flight)s::int
WHERE w.name = %(name)s::text
RETURNING w.name
"""

DEREGISTER = "DELETE FROM pgjobs_worker AS w WHERE w.name = %(name)s::text RETURNING w.name"

PRUNE = """
DELETE FROM pgjobs_worker AS w
WHERE w.expires_at < now() - make_interval(secs => %(grace)s::float8)
RETURNING w.name
"""


@dataclass(frozen=True)
class Registration:
    """What a worker process says about itself."""

    name: str
    worker_id: str
    concurrency: int
    queues: Sequence[str] = ()
    queue_limits: dict[str, int] | None = None
    host: str = ""
    pid: int = 0

    def params(self, live_seconds: float, in_flight: int) -> dict[str, Any]:
        from . import __version__

        return {
            "name": self.name,
            "worker_id": self.worker_id,
            "host": self.host or socket.gethostname(),
            "pid": self.pid or os.getpid(),
            "queues": json.dumps(list(self.queues)),
            "queue_limits": json.dumps(self.queue_limits or {}),
            "concurrency": self.concurrency,
            "version": __version__,
            "live": float(live_seconds),
            "in_flight": in_flight,
        }


def register(store: Store, who: Registration, *, live_seconds: float, in_flight: int = 0) -> None:
    store.run(REGISTER, who.params(live_seconds, in_flight))


def beat(store: Store, who: Registration, *, live_seconds: float, in_flight: int) -> None:
    """Push this process's row forward; registers again if the row was pruned meanwhile."""
    if not store.run(BEAT, {"name": who.name, "live": float(live_seconds), "in_flight": in_flight}):
        register(store, who, live_seconds=live_seconds, in_flight=in_flight)


def deregister(store: Store, name: str) -> None:
    store.run(DEREGISTER, {"name": name})


def prune(store: Store, grace_seconds: float = PRUNE_AFTER_SECONDS) -> list[str]:
    """Delete the rows of workers not live for ``grace_seconds``; returns their names."""
    return [r[0] for r in store.run(PRUNE, {"grace": float(grace_seconds)})]


def live_workers(using: str | None = None) -> QuerySet[WorkerProcess]:
    """Workers whose last beat is recent enough (see :data:`LIVE_BEATS`)."""
    from .conf import get_settings
    from .models import WorkerProcess

    return WorkerProcess.objects.using(using or get_settings().DATABASE).filter(Q(expires_at__gt=Now()))
