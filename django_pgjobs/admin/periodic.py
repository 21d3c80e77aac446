"""The Periodic page: every schedule in force (``@job(cron=/every=)`` and ``PGJOBS["PERIODIC"]``)
with its next run and its last run (a link to that job).

Schedules are read from this process's registry and settings, the same code the workers run, so
the page shows what a worker started now would do (a running worker keeps the schedules it started
with: a changed schedule takes effect when the workers restart). The last run comes from
:func:`django_pgjobs.periodic.overview`: the jobs of the schedule's last few ticks, found by their
idempotency keys (exact index lookups, whatever the table's size).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse

from ..conf import get_settings
from ..periodic import InvalidSchedule, overview
from .pages import crumbs, page_context

if TYPE_CHECKING:
    from . import JobAdmin


def periodic_view(modeladmin: JobAdmin, request: HttpRequest) -> TemplateResponse:
    """Needs view permission on jobs, as the overview does."""
    if not modeladmin.has_view_permission(request):
        raise PermissionDenied
    site = modeladmin.admin_site.name
    overview_url = reverse(f"{site}:django_pgjobs_job_overview")
    problem = None
    try:
        rows = overview(get_settings().DATABASE)
    except InvalidSchedule as exc:  # the system check says so at start-up too
        rows, problem = [], str(exc)
    change = f"{site}:django_pgjobs_job_change"
    context = page_context(
        modeladmin,
        request,
        "Periodic jobs",
        crumbs(modeladmin, None, ("Overview", overview_url), ("Periodic jobs", None)),
        rows=[(row, reverse(change, args=[row.last_job_id]) if row.last_job_id else None) for row in rows],
        problem=problem,
        overview_url=overview_url,
    )
    return TemplateResponse(request, "admin/django_pgjobs/periodic.html", context)
