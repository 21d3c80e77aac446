"""The Django admin for jobs: where the queue is operated (often at 3 a.m.).

* **Jobs**: every job, newest first, filterable by status/queue/task, searchable by id, idempotency
  key, task and error text; counts never run a full ``COUNT(*)`` (see :class:`FastCountPaginator`).
* **Dead letters**: only dead jobs (the :class:`~django_pgjobs.models.DeadJob` proxy).
* Actions (retry / cancel / run now need ``django_pgjobs.operate_job``; discard needs delete; edit
  needs change) go through ``Job.objects`` only, in bounded batches; running jobs are refused.
  Editing applies to ready and dead jobs: a running job is a worker's, a done job's run is history.
* **Overview**: per-queue counts, running jobs whose lease expired, oldest ready age, the last
  hour's outcomes, live workers per queue, Pause/Resume per queue (``operate_job``) and the trends
  charts (:mod:`.chart` over :mod:`django_pgjobs.throughput`).
* **Workers**: live ``runjobs`` processes with their running jobs, and recently gone ones
  (:mod:`.workers`).

Both entries use the ``Job`` model's permissions (a dead letter is a job), so one set of grants
covers both.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, ClassVar

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince

from ..exceptions import InvalidJob
from ..models import DeadJob, Job, Status
from . import actions
from .bulk import FastCountPaginator
from .forms import EDITABLE_FIELDS, MAX_JSON_DEPTH, TOO_DEEP, JobEditForm, deeper_than
from .periodic import periodic_view
from .queues import queue_control_view
from .views import LeaseExpiredFilter, QueueFilter, TaskFilter, overview_view
from .workers import workers_view

ERROR_EXCERPT = 80
#: Characters of the error's first line in the list cell's tooltip.
ERROR_TOOLTIP = 500

#: The job page is read-only in these states: a worker holds a running job, and a done job has run to
#: completion (its payload and schedule describe what ran). ``Job.objects.edit`` refuses both too.
READ_ONLY_STATUSES = (Status.RUNNING, Status.DONE)

STATUS_COLOURS: dict[str, str] = {
    Status.SCHEDULED: "#6e7781",
    Status.READY: "#1f6feb",
    Status.RUNNING: "#9a6700",
    Status.DONE: "#1a7f37",
    Status.DEAD: "#cf222e",
    Status.CANCELLED: "#8250df",
}


#: Most characters of JSON a job page shows (and edits) of a payload or result. A page with megabytes
#: in it is unusable; the rest is summarised with the value's size.
PRETTY_LIMIT = 64 * 1024


def json_size(value: Any) -> int:
    """Bytes of compact JSON, as stored and as counted against ``MAX_PAYLOAD_BYTES``."""
    return len(json.dumps(value, separators=(",", ":")))


def too_large_to_show(value: Any) -> bool:
    return json_size(value) > PRETTY_LIMIT


def pretty_json(value: Any) -> str:
    if value is None:
        return "-"
    if deeper_than(value, MAX_JSON_DEPTH):  # a result or payload stored that deep by code
        return format_html('<pre class="pgjobs-json">{}</pre>', TOO_DEEP)
    if too_large_to_show(value):
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)[:PRETTY_LIMIT]
        return format_html(
            '<p class="pgjobs-truncated">{} bytes of JSON; the first {} characters:</p>'
            '<pre class="pgjobs-json">{}…</pre>',
            f"{json_size(value):,}",
            f"{PRETTY_LIMIT:,}",
            text,
        )
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return format_html('<pre class="pgjobs-json">{}</pre>', text)


class JobChangeList(ChangeList):
    """The list never loads payload/result/history (they can be large): only what the columns show."""

    def __init__(self, request: HttpRequest, *args: Any, **kwargs: Any) -> None:
        # PostgreSQL text cannot hold NUL, so a NUL in ?q= or a filter value would make psycopg raise
        # DataError (a 500). Django answers IncorrectLookupParameters with a redirect to ?e=1.
        if any("\x00" in key or any("\x00" in v for v in values) for key, values in request.GET.lists()):
            raise IncorrectLookupParameters("a NUL character in the query string")
        super().__init__(request, *args, **kwargs)

    def get_queryset(self, request: HttpRequest, *args: Any, **kwargs: Any) -> QuerySet:
        return super().get_queryset(request, *args, **kwargs).defer("payload", "result", "history")


class JobAdmin(admin.ModelAdmin):
    list_display: tuple[str, ...] = (
        "id",
        "task_name",
        "queue",
        "status_badge",
        "priority",
        "attempts_display",
        "run_at_short",
        "age",
        "error_excerpt",
    )
    list_display_links = ("id", "task_name")
    list_filter: ClassVar[Any] = ("status", QueueFilter, TaskFilter, LeaseExpiredFilter)
    search_fields = ("task", "idempotency_key", "last_error")  # see get_search_results
    search_help_text = "A job id, an exact idempotency key, or part of a task name or error text."
    ordering: ClassVar[Any] = ("-id",)
    list_per_page = 100
    list_max_show_all = 1000
    show_full_result_count = False
    paginator = FastCountPaginator
    actions: Any = (
        actions.retry_jobs,
        actions.cancel_jobs,
        actions.run_jobs_now,
        actions.discard_jobs,
    )
    form = JobEditForm
    change_list_template = "admin/django_pgjobs/job/change_list.html"
    change_form_template = "admin/django_pgjobs/job/change_form.html"
    readonly_fields = (
        "id",
        "task",
        "status_badge",
        "attempts",
        "idempotency_key",
        "payload_pretty",
        "result_pretty",
        "last_error_pre",
        "locked_by",
        "locked_at",
        "lease_display",
        "cancel_requested_at",
        "cancel_requested_by",
        "snoozes",
        "started_at",
        "finished_at",
        "created_at",
        "updated_at",
        "history_display",
        "queue",
        "priority",
        "run_at",
        "max_attempts",
    )

    # -- permissions: the Job model's grants, for both entries ------------------------------------
    def _has(self, request: HttpRequest, codename: str) -> bool:
        return request.user.has_perm(f"{Job._meta.app_label}.{codename}_job")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs are enqueued by code, through the registry

    def has_view_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return self._has(request, "view") or self._has(request, "change")

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        if obj is not None and obj.status in READ_ONLY_STATUSES:
            return False  # a worker holds it, or it has run to completion: read-only
        return self._has(request, "change")

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        if obj is not None and obj.status == Status.RUNNING:
            return False
        return self._has(request, "delete")

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return self._has(request, "operate")

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        # ``action_location`` arrived in Django 6.1 (actions on the change form); without it in the
        # signature 6.1 warns. Our actions are bulk actions with their own confirmation and bounds,
        # so they stay on the list, as on 5.2 and 6.0; the job page has its own buttons.
        if action_location is None:
            found = super().get_actions(request)
        elif getattr(action_location, "value", action_location) != "CHANGE_LIST":
            return {}  # the job page has its own buttons (``operate_view``)
        else:
            found = super().get_actions(request, action_location=action_location)  # type: ignore[call-arg]
        found.pop("delete_selected", None)  # it deletes with queryset.delete(); discard_jobs is ours
        return found

    # -- list ---------------------------------------------------------------------------------------
    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        condition = Q(idempotency_key=term) | Q(task__icontains=term) | Q(last_error__icontains=term)
        digits = term.lstrip("#")
        # isdigit() alone accepts "²" and other Unicode digits that int() refuses.
        if digits.isascii() and digits.isdigit() and int(digits) < 2**63:
            condition = Q(pk=int(digits)) | Q(idempotency_key=term)
        return queryset.filter(condition), False

    @admin.display(description="task", ordering="task")
    def task_name(self, obj: Job) -> str:
        """The task's dotted name, breakable after each dot (``<wbr>``) but nowhere else: a narrow
        list wraps ``billing.`` / ``charge_card`` instead of squeezing the column to a letter."""
        parts = obj.task.split(".")
        return format_html_join(mark_safe(".<wbr>"), "{}", ((part,) for part in parts))

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj: Job) -> str:
        colour = STATUS_COLOURS.get(obj.status, "#57606a")
        return format_html(
            '<span class="pgjobs-status pgjobs-status-{}" style="color:{};font-weight:bold">{}</span>',
            obj.status,
            colour,
            obj.status,
        )

    @admin.display(description="attempts")
    def attempts_display(self, obj: Job) -> str:
        return f"{obj.attempts}/{obj.max_attempts}"

    @admin.display(description="run at", ordering="run_at")
    def run_at_short(self, obj: Job) -> str:
        return _short_time(obj.run_at)

    @admin.display(description="finished at", ordering="finished_at")
    def finished_at_short(self, obj: Job) -> str:
        return _short_time(obj.finished_at)

    @admin.display(description="age", ordering="created_at")
    def age(self, obj: Job) -> str:
        # timesince joins number and unit with a no-break space; a plain one lets "34 / minutes"
        # wrap in a narrow list (1366 px, sidebar open) instead of pushing the last column off.
        return timesince(obj.created_at, depth=1).replace("\xa0", " ") if obj.created_at else "-"

    @admin.display(description="last error")
    def error_excerpt(self, obj: Job) -> str:
        """The first line, cut at ``ERROR_EXCERPT`` characters, on one line (CSS ellipsis where the
        column is narrower); the cell's tooltip holds the line up to ``ERROR_TOOLTIP``."""
        if not obj.last_error:
            return "-"
        first = obj.last_error.strip().splitlines()[0] if obj.last_error.strip() else ""
        shown = first if len(first) <= ERROR_EXCERPT else first[: ERROR_EXCERPT - 1] + "…"
        tip = first if len(first) <= ERROR_TOOLTIP else first[: ERROR_TOOLTIP - 1] + "…"
        return format_html('<span class="pgjobs-error-excerpt" title="{}">{}</span>', tip, shown)

    # -- the job page -------------------------------------------------------------------------------
    def get_fieldsets(self, request: HttpRequest, obj: Job | None = None) -> Any:
        editable = obj is not None and self.has_change_permission(request, obj)
        job_fields: tuple[Any, ...] = (
            "id",
            "task",
            "status_badge",
            "queue",
            "priority",
            "run_at",
            ("attempts", "max_attempts"),
            "idempotency_key",
            # A JSON textarea, or read-only pretty JSON (also for a payload too large to edit here).
            "payload"
            if editable and obj is not None and not too_large_to_show(obj.payload)
            else "payload_pretty",
        )
        sets: list[tuple[str | None, dict[str, Any]]] = [(None, {"fields": job_fields})]
        if obj is not None and obj.status == Status.RUNNING:
            worker: tuple[Any, ...] = ("locked_by", "locked_at", "lease_display", "started_at")
            if obj.cancel_requested_at is not None:  # asked to stop; its worker carries it out
                worker += (("cancel_requested_at", "cancel_requested_by"),)
            sets.append(("Lease / worker", {"fields": worker}))
        if obj is not None and obj.snoozes:
            sets.append(("Snoozes", {"fields": ("snoozes",)}))
        sets.append(
            (
                "Outcome",
                {"fields": ("last_error_pre", "result_pretty", "started_at", "finished_at")}
                if not (obj is not None and obj.status == Status.RUNNING)
                else {"fields": ("last_error_pre", "finished_at")},
            )
        )
        sets.append(("Attempt history", {"fields": ("history_display",)}))
        sets.append(("Timestamps", {"classes": ("collapse",), "fields": ("created_at", "updated_at")}))
        return sets

    def get_readonly_fields(self, request: HttpRequest, obj: Job | None = None) -> tuple[str, ...]:
        if obj is not None and self.has_change_permission(request, obj):
            editable = [f for f in EDITABLE_FIELDS if f != "payload" or not too_large_to_show(obj.payload)]
            return tuple(f for f in self.readonly_fields if f not in editable) + tuple(
                f for f in EDITABLE_FIELDS if f not in editable
            )
        return self.readonly_fields

    @admin.display(description="payload")
    def payload_pretty(self, obj: Job) -> str:
        return pretty_json(obj.payload)

    @admin.display(description="result")
    def result_pretty(self, obj: Job) -> str:
        return pretty_json(obj.result)

    @admin.display(description="last error")
    def last_error_pre(self, obj: Job) -> str:
        return format_html('<pre class="pgjobs-error">{}</pre>', obj.last_error) if obj.last_error else "-"

    @admin.display(description="lease")
    def lease_display(self, obj: Job) -> str:
        if obj.status != Status.RUNNING or obj.lease_expires_at is None:
            return "no lease (not running)"
        now = timezone.now()
        if obj.lease_expires_at > now:
            return format_html(
                "held by <strong>{}</strong>, expires in {} (at {})",
                obj.locked_by,
                timesince(now, obj.lease_expires_at),
                obj.lease_expires_at.isoformat(timespec="seconds"),
            )
        return format_html(
            '<strong style="color:#cf222e">expired {} ago</strong> (worker {} presumed gone; '
            "the sweeper will recover it)",
            timesince(obj.lease_expires_at, now),
            obj.locked_by,
        )

    @admin.display(description="attempts")
    def history_display(self, obj: Job) -> str:
        entries = [e for e in (obj.history or []) if isinstance(e, dict)]
        if not entries:
            return "no attempts yet"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    e.get("attempt", "-"),
                    e.get("outcome", "-"),
                    e.get("worker", "-"),
                    _when(e.get("started_at")),
                    _when(e.get("finished_at")),
                    _history_error(e),
                )
                for e in reversed(entries)
            ),
        )
        return format_html(
            '<table class="pgjobs-history"><thead><tr><th>attempt</th><th>outcome</th><th>worker</th>'
            "<th>started</th><th>finished</th><th>error</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    # -- editing goes through Job.objects.edit --------------------------------------------------------
    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if request.method == "POST" and object_id is not None and self._has(request, "change"):
            # Refuse with a message rather than Django's bare 403 (the page was editable when it was
            # loaded). Only the status is read: Django's own view loads the row once more anyway.
            pk = self._pk_or_none(object_id)
            status = (
                self.get_queryset(request)
                .filter(pk=pk, status__in=READ_ONLY_STATUSES)
                .values_list("status", flat=True)
                .first()
                if pk is not None
                else None
            )
            if status is not None:
                why = (
                    "is running: a worker holds it"
                    if status == Status.RUNNING
                    else "is done: it has run to completion"
                )
                self.message_user(
                    request,
                    f"Job #{unquote(object_id)} {why}, so it cannot be edited. Nothing was changed.",
                    messages.ERROR,
                )
                return HttpResponseRedirect(request.path)
        return super().changeform_view(request, object_id, form_url, extra_context)

    def _pk_or_none(self, object_id: str) -> int | None:
        """The job id in a URL segment, or None when it is not one (``?``, ``abc``: no such job);
        ``filter(pk="abc")`` would raise instead."""
        try:
            return int(Job._meta.pk.to_python(unquote(object_id)))
        except ValidationError:
            return None

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Job | None = None,
    ) -> HttpResponse:
        # The buttons are built from the job Django already loaded for the page (no second query).
        if obj is not None:
            context["pgjobs_buttons"] = self._page_buttons(request, obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def save_model(self, request: HttpRequest, obj: Job, form: JobEditForm, change: bool) -> None:
        request._pgjobs_edit_refused = None  # type: ignore[attr-defined]
        changes = form.edit_arguments()
        if not changes:
            return
        try:
            edited = Job.objects.edit(obj.pk, **changes)
        except InvalidJob as exc:
            request._pgjobs_edit_refused = str(exc)  # type: ignore[attr-defined]
            return
        if edited is None:
            request._pgjobs_edit_refused = (  # type: ignore[attr-defined]
                f"Job #{obj.pk} became running or finished (or was deleted) before the change was saved; "
                "nothing was changed."
            )

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        pass  # a job has no relations; never call form.save_m2m()/save()

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        if getattr(request, "_pgjobs_edit_refused", None):
            return None
        return super().log_change(request, obj, message)

    def response_change(self, request: HttpRequest, obj: Job) -> HttpResponse:
        refused = getattr(request, "_pgjobs_edit_refused", None)
        if refused:
            self.message_user(request, refused, messages.ERROR)
            return HttpResponseRedirect(request.path)
        return super().response_change(request, obj)

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        if not Job.objects.discard([obj.pk]):
            self.message_user(request, f"Job #{obj.pk} is running and was not deleted.", messages.ERROR)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        # Django's own bulk delete calls queryset.delete(), which jobs refuse; discard never
        # deletes a running job.
        Job.objects.discard(queryset.values_list("pk", flat=True))

    # -- the job page's own buttons: the list actions for one job ---------------------------------------
    #: Which operation a job page offers, by the job's state (the manager refuses the rest anyway).
    PAGE_OPERATIONS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("retry_jobs", "Retry"),
        ("run_jobs_now", "Run now"),
        ("cancel_jobs", "Cancel"),
    )

    def _page_buttons(self, request: HttpRequest, obj: Job) -> list[tuple[str, str]]:
        if not self.has_operate_permission(request):
            return []
        eligible = {
            "retry_jobs": obj.status in (Status.DEAD, Status.CANCELLED),
            "run_jobs_now": obj.status == Status.SCHEDULED,
            "cancel_jobs": obj.status in (Status.SCHEDULED, Status.READY)
            or (obj.status == Status.RUNNING and obj.cancel_requested_at is None),
        }
        name = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_operate"
        return [
            (reverse(name, args=[obj.pk, op]), label) for op, label in self.PAGE_OPERATIONS if eligible[op]
        ]

    def operate_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        """POST-only (CSRF-checked by ``admin_view``) and permission-checked like the list action
        (view and operate); the same manager call, messages and LogEntry. Lands on the Jobs page of
        the job, which still exists whatever state it is now in (a retried dead letter is no longer a
        dead letter).

        The job is looked up among all jobs, not this admin's queryset: a second click on a dead
        letter's Retry finds it ready, and the manager's refusal ("was not dead and was left
        unchanged") says so, where a 404 would suggest it was gone."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if operation not in dict(self.PAGE_OPERATIONS):
            raise Http404(f"unknown operation {operation!r}")
        if not (self.has_view_permission(request) and self.has_operate_permission(request)):
            raise PermissionDenied
        pk = self._pk_or_none(object_id)
        job = Job.objects.filter(pk=pk) if pk is not None else Job.objects.none()
        if not job.exists():  # an existence check, not the whole row
            raise Http404(f"job {unquote(object_id)} does not exist (discarded or pruned?)")
        actions.perform(self, request, job, actions.OPERATIONS[operation])
        return HttpResponseRedirect(
            reverse(f"{self.admin_site.name}:{Job._meta.app_label}_job_change", args=[pk])
        )

    def _operate_urls(self) -> list[URLPattern]:
        return [
            path(
                "<path:object_id>/operate/<str:operation>/",
                self.admin_site.admin_view(self.operate_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_operate",
            )
        ]

    # -- overview and workers pages -------------------------------------------------------------------
    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view  # login, staff, CSRF (csrf_protect), never cached
        extra = [
            path("overview/", wrap(lambda request: overview_view(self, request)), name=f"{prefix}_overview"),
            path(
                "overview/queues/<str:operation>/",
                wrap(lambda request, operation: queue_control_view(self, request, operation)),
                name=f"{prefix}_queue",
            ),
            path("workers/", wrap(lambda request: workers_view(self, request)), name=f"{prefix}_workers"),
            path("periodic/", wrap(lambda request: periodic_view(self, request)), name=f"{prefix}_periodic"),
        ]
        return extra + self._operate_urls() + super().get_urls()

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        site = self.admin_site.name
        extra = {
            "overview_url": reverse(f"{site}:django_pgjobs_job_overview"),
            "workers_url": reverse(f"{site}:django_pgjobs_job_workers"),
        }
        return super().changelist_view(request, {**extra, **(extra_context or {})})


def _short_time(value: dt.datetime | None) -> str:
    """``2026-12-01`` over ``13:25:07`` (local time) in a list: 75 px where Django's "Dec. 1, 2026,
    1:25 p.m." took 160 (or three lines); the full timestamp with its zone is the tooltip."""
    if value is None:
        return "-"
    local = timezone.localtime(value) if timezone.is_aware(value) else value
    return format_html(
        '<time datetime="{}" title="{}">{}<br>{}</time>',
        value.isoformat(),
        local.isoformat(sep=" ", timespec="seconds"),
        local.strftime("%Y-%m-%d"),
        local.strftime("%H:%M:%S"),
    )


def _when(value: Any) -> str:
    """A history timestamp (ISO text in jsonb) as local ``YYYY-MM-DD HH:MM:SS``."""
    if not value:
        return "-"
    parsed = parse_datetime(str(value))
    if parsed is None:
        return str(value)
    if timezone.is_aware(parsed):
        parsed = timezone.localtime(parsed)
    return parsed.strftime("%Y-%m-%d %H:%M:%S")


def _history_error(entry: dict[str, Any]) -> str:
    error = " ".join(str(entry[k]) for k in ("error_class", "message") if entry.get(k))
    if not error and not entry.get("traceback"):
        return "-"
    if entry.get("traceback"):
        return format_html(
            '<details><summary>{}</summary><pre class="pgjobs-traceback">{}</pre></details>',
            error or "traceback",
            entry["traceback"],
        )
    return error


class DeadJobAdmin(JobAdmin):
    """Dead letters: failed (or cancelled) work, most recent failure first."""

    list_display = (
        "id",
        "task_name",
        "queue",
        "attempts_display",
        "finished_at_short",
        "age",
        "error_excerpt",
    )
    list_filter = (QueueFilter, TaskFilter)
    ordering = ("-finished_at", "-id")
    actions = (actions.retry_jobs, actions.discard_jobs)

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).filter(status=Status.DEAD)

    def get_urls(self) -> list[URLPattern]:
        return self._operate_urls() + admin.ModelAdmin.get_urls(self)


admin.site.register(Job, JobAdmin)
admin.site.register(DeadJob, DeadJobAdmin)
