"""The Workers page, and the live workers per queue the overview shows.

Reads only: the registry (``pgjobs_worker``, a row per ``runjobs`` process, kept by the workers'
heartbeats; see :mod:`django_pgjobs.fleet`) and the running jobs of those workers (``Job.locked_by``
is the worker's name; the partial ``pgjobs_job_running_idx`` serves the lookup). Liveness is
:func:`~django_pgjobs.fleet.live_workers`' rule (``expires_at`` in the future, by the database
clock), not recomputed here. Rows past ``expires_at`` are "gone": the process stopped beating
(crashed, killed, frozen, cut off) without deregistering; the sweep deletes them after
``fleet.PRUNE_AFTER_SECONDS``, so the page shows roughly the last hour's losses.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse

from ..conf import get_settings
from ..fleet import live_workers
from ..models import Job, Status, WorkerProcess
from .pages import crumbs, page_context

if TYPE_CHECKING:
    from . import JobAdmin

#: Most gone workers listed (newest loss first).
GONE_LIMIT = 50
#: Most running jobs listed on the page (the fleet's total concurrency bounds them anyway).
RUNNING_LIMIT = 2000


@dataclass
class WorkerRow:
    worker: WorkerProcess
    live: bool
    running: list[Job] = field(default_factory=list)

    @property
    def queues_display(self) -> list[str]:
        """``mail (max 4)``, ``default``, or ``all queues`` (limits exist for named queues only)."""
        limits = self.worker.queue_limits or {}
        if not self.worker.queues:
            return ["all queues"]
        return [f"{q} (max {limits[q]})" if q in limits else str(q) for q in self.worker.queues]


def worker_rows(using: str) -> tuple[list[WorkerRow], list[WorkerRow]]:
    """Live workers (by worker id) and gone ones (latest expiry first), each with its running jobs.

    Three queries: live rows, gone rows (the complement, by the same rule), running jobs of both.
    """
    live = [WorkerRow(w, True) for w in live_workers(using).order_by("worker_id", "name")]
    gone = [
        WorkerRow(w, False)
        for w in WorkerProcess.objects.using(using)
        .exclude(pk__in=live_workers(using).values("pk"))
        .order_by("-expires_at", "name")[:GONE_LIMIT]
    ]
    by_name = {r.worker.name: r for r in live + gone}
    if by_name:
        running = (
            Job.objects.using(using)
            .filter(status=Status.RUNNING, locked_by__in=list(by_name))
            .only("id", "task", "queue", "locked_by", "started_at", "lease_expires_at", "attempts")
            .order_by("started_at", "id")[:RUNNING_LIMIT]
        )
        for job in running:
            by_name[job.locked_by or ""].running.append(job)
    return live, gone


@dataclass
class QueueWorkers:
    """The live workers that claim from one queue, and the slots they give it."""

    workers: list[WorkerProcess] = field(default_factory=list)
    slots: int = 0


def workers_per_queue(live: list[WorkerProcess], queues: list[str]) -> dict[str, QueueWorkers]:
    """For each of ``queues``: the live workers claiming from it (an empty queue list is every
    queue) and their slots there (concurrency, capped by a ``-q queue:N`` limit)."""
    found: dict[str, QueueWorkers] = defaultdict(QueueWorkers)
    for queue in queues:
        entry = found[queue]
        for worker in live:
            if worker.claims_from(queue):
                limit = (worker.queue_limits or {}).get(queue)
                entry.workers.append(worker)
                entry.slots += min(worker.concurrency, int(limit)) if limit else worker.concurrency
    return dict(found)


def workers_view(modeladmin: JobAdmin, request: HttpRequest) -> TemplateResponse:
    """Needs view permission on jobs, as the overview does (it shows job ids and tasks)."""
    if not modeladmin.has_view_permission(request):
        raise PermissionDenied
    live, gone = worker_rows(get_settings().DATABASE)
    site = modeladmin.admin_site.name
    overview = reverse(f"{site}:django_pgjobs_job_overview")
    context = page_context(
        modeladmin,
        request,
        "Workers",
        crumbs(modeladmin, None, ("Overview", overview), ("Workers", None)),
        live=live,
        gone=gone,
        overview_url=overview,
        in_flight=sum(r.worker.in_flight for r in live),
        concurrency=sum(r.worker.concurrency for r in live),
    )
    return TemplateResponse(request, "admin/django_pgjobs/workers.html", context)
