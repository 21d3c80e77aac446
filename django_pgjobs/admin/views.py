"""The queue overview page, and the changelist filters' value lists.

The overview is read-only but for its Pause/Resume buttons, which post to :mod:`.queues`.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db import connections
from django.db.models import Count, Min, Q, QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from ..conf import get_settings
from ..fleet import live_workers
from ..models import FINAL_STATUSES, Job, QueuePause, Status
from ..queue_control import paused
from ..throughput import throughput
from .chart import render_chart
from .pages import crumbs, page_context
from .workers import QueueWorkers, workers_per_queue

if TYPE_CHECKING:
    from . import JobAdmin

#: Most distinct values a queue/task filter lists in the sidebar.
FILTER_VALUES_LIMIT = 200

#: Running jobs whose lease has expired: the worker is presumed gone and the job waits for the
#: sweeper. Compared with the database clock (``Now()``), as the sweeper does, not the web server's.
LEASE_EXPIRED = Q(status=Status.RUNNING, lease_expires_at__lt=Now())


#: Newest jobs (a backward primary-key scan) whose values the filter sidebar lists.
FILTER_SAMPLE_ROWS = 10_000


def distinct_values(column: str, using: str, limit: int = FILTER_VALUES_LIMIT) -> list[str]:
    """Values of ``queue`` or ``task`` for the filter sidebar, without reading the whole table.

    No index covers these columns for every row (each would be written on every state change; the
    lean partial indexes are what keeps claims and completions cheap), and a loose scan without one
    read the table once per distinct value: 9.9 s on a million jobs. So the list is what is known
    cheaply: registered handlers' names and queues (this process imports every app's ``jobs.py``),
    queues with ready jobs (a loose scan of the claim index), queues named by live workers or
    paused, and the values among the newest ``FILTER_SAMPLE_ROWS`` jobs. A value only older jobs
    hold is still filtered by its URL (``?queue=...``), and the filter then lists it too.
    """
    if column not in {"queue", "task"}:
        raise ValueError(column)
    from ..fleet import live_workers
    from ..models import QueuePause
    from ..registry import registered

    handlers = registered().values()
    values: set[str] = set()
    if column == "task":
        values |= {h.name for h in handlers}
    else:
        values |= {h.queue or get_settings().DEFAULT_QUEUE for h in handlers}
        values |= set(Job.objects.db_manager(using).store.ready_queues())
        values |= {q for w in live_workers(using) for q in (w.queues or [])}
        values |= set(QueuePause.objects.using(using).values_list("queue", flat=True))
    connection = connections[using]
    table = connection.ops.quote_name(Job._meta.db_table)
    col = connection.ops.quote_name(column)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT s.v FROM (SELECT {col} AS v FROM {table} ORDER BY id DESC LIMIT %s) AS s",
            [FILTER_SAMPLE_ROWS],
        )
        values |= {row[0] for row in cursor.fetchall()}
    return sorted(values)[:limit]


class _DistinctValueFilter(admin.SimpleListFilter):
    column = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        values = distinct_values(self.column, get_settings().DATABASE)
        current = self.value()
        if current and current not in values:
            values.append(current)
        return [(v, v) for v in values]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        return queryset.filter(**{self.column: value}) if value else queryset


class QueueFilter(_DistinctValueFilter):
    title = "queue"
    parameter_name = "queue"
    column = "queue"


class TaskFilter(_DistinctValueFilter):
    title = "task"
    parameter_name = "task"
    column = "task"


class LeaseExpiredFilter(admin.SimpleListFilter):
    """Stuck jobs: "running", but the worker stopped renewing its lease (crashed, frozen, cut off).

    They stay running until a sweeper returns them to ready (or dead); if none runs they would stay
    there unseen, so they can be listed (the lease index keeps this cheap).
    """

    title = "lease"
    parameter_name = "lease"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("expired", "Lease expired")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        return queryset.filter(LEASE_EXPIRED) if self.value() == "expired" else queryset


@dataclass
class QueueRow:
    queue: str
    counts: dict[str, int] = field(default_factory=dict)
    oldest_ready_due: dt.datetime | None = None
    oldest_ready_age: dt.timedelta | None = None
    finished_last_hour: int = 0
    failed_last_hour: int = 0
    lease_expired: int = 0  # running, lease expired: waiting for the sweeper
    paused: QueuePause | None = None
    workers: QueueWorkers = field(default_factory=QueueWorkers)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def overview_rows(using: str) -> tuple[list[QueueRow], dict[str, int]]:
    """Per-queue counts by status (and of running jobs whose lease expired), the oldest due ready
    job's age, and the last hour's outcomes.

    Three queries: one GROUP BY (queue, status), which also counts expired leases since it reads every
    row anyway; the oldest due ``run_at`` per queue from the partial claim index; finished/dead in the
    last hour from the (status, finished_at) index.
    """
    now = timezone.now()
    jobs = Job.objects.using(using).order_by()
    rows: dict[str, QueueRow] = defaultdict(lambda: QueueRow(queue=""))

    def row(queue: str) -> QueueRow:
        if queue not in rows:
            rows[queue] = QueueRow(queue=queue, counts={s.value: 0 for s in Status})
        return rows[queue]

    grouped = jobs.values("queue", "status").annotate(
        n=Count("id"), expired=Count("id", filter=LEASE_EXPIRED)
    )
    for item in grouped:
        r = row(item["queue"])
        r.counts[item["status"]] = item["n"]
        r.lease_expired += item["expired"]
    due = jobs.filter(status=Status.READY).values("queue").annotate(oldest=Min("run_at"))
    for oldest in due:
        r = row(oldest["queue"])
        r.oldest_ready_due = oldest["oldest"]
        r.oldest_ready_age = max(now - oldest["oldest"], dt.timedelta(0))
    recent = (
        jobs.filter(status__in=FINAL_STATUSES, finished_at__gte=now - dt.timedelta(hours=1))
        .values("queue")
        .annotate(
            done=Count("id", filter=Q(status=Status.DONE)),
            dead=Count("id", filter=Q(status=Status.DEAD)),
        )
    )
    for outcome in recent:
        r = row(outcome["queue"])
        r.finished_last_hour = outcome["done"]
        r.failed_last_hour = outcome["dead"]
    ordered = [rows[q] for q in sorted(rows)]
    totals = {s.value: sum(r.counts.get(s.value, 0) for r in ordered) for s in Status}
    totals["finished_last_hour"] = sum(r.finished_last_hour for r in ordered)
    totals["failed_last_hour"] = sum(r.failed_last_hour for r in ordered)
    totals["lease_expired"] = sum(r.lease_expired for r in ordered)
    return ordered, totals


def overview_view(modeladmin: JobAdmin, request: HttpRequest) -> TemplateResponse:
    """Counts per queue, paused queues (also those without jobs) and the live workers of each
    queue, the trends charts; Pause/Resume buttons for those who may operate."""
    from django.core.exceptions import PermissionDenied

    if not modeladmin.has_view_permission(request):
        raise PermissionDenied
    using = get_settings().DATABASE
    rows, totals = overview_rows(using)
    by_queue = {r.queue: r for r in rows}
    pauses = paused(using)
    live = list(live_workers(using).order_by("worker_id", "name"))
    # A paused queue and a queue a worker names are rows even with no jobs: the former can be
    # resumed from here, the latter shows who waits on it.
    for queue in {p.queue for p in pauses} | {q for w in live for q in (w.queues or [])}:
        if queue not in by_queue:
            by_queue[queue] = QueueRow(queue=queue, counts={s.value: 0 for s in Status})
    for p in pauses:
        by_queue[p.queue].paused = p
    per_queue = workers_per_queue(live, list(by_queue))
    for queue, row in by_queue.items():
        row.workers = per_queue[queue]
    site = modeladmin.admin_site.name
    context = page_context(
        modeladmin,
        request,
        "Job queue overview",
        crumbs(modeladmin, None, ("Overview", None)),
        rows=[by_queue[q] for q in sorted(by_queue)],
        totals=totals,
        statuses=[s.value for s in Status],
        now=timezone.now(),
        live_workers=live,
        can_operate=modeladmin.has_operate_permission(request),
        pause_url=reverse(f"{site}:django_pgjobs_job_queue", args=["pause"]),
        resume_url=reverse(f"{site}:django_pgjobs_job_queue", args=["resume"]),
        workers_url=reverse(f"{site}:django_pgjobs_job_workers"),
        periodic_url=reverse(f"{site}:django_pgjobs_job_periodic"),
        chart_minutes=render_chart(throughput("minute", using), "minute", chart_id="pgjobs-chart-minute"),
        chart_hours=render_chart(throughput("hour", using), "hour", chart_id="pgjobs-chart-hour"),
    )
    return TemplateResponse(request, "admin/django_pgjobs/overview.html", context)
