"""Admin actions: retry, cancel, run now, discard.

Every action hands ids to a ``JobManager`` method (the one owner of state changes) in batches of
``PGJOBS["BATCH_SIZE"]``. Running jobs are never changed under their worker: the manager's SQL
refuses them (Cancel only *asks* them to stop, which their worker carries out), and the operator is
told how many were skipped or asked. "All N jobs matching the current filter" (select across)
and discard always go through a confirmation page first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, DELETION
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from ..models import Job, Status
from .bulk import BulkOutcome, log_bulk_action, run_in_batches
from .pages import crumbs, page_context

if TYPE_CHECKING:
    from . import JobAdmin

#: Jobs listed by name on a confirmation page.
CONFIRM_SAMPLE = 20


@dataclass(frozen=True)
class Operation:
    name: str
    verb: str  # past tense, for messages and the log: "Retried"
    description: str  # the action dropdown text
    #: What a selected job that the manager left alone was: "1 job was <skipped> and was left
    #: unchanged". Said whole (not "not <state>"), since for discard it is a race, not a state.
    skipped: str
    log_flag: int
    always_confirm: bool
    call: Callable[[HttpRequest, list[int]], list[int]]
    #: For an operation that acts on running jobs too (Cancel): what it did to them, and what a
    #: running job it left alone was. None: running jobs are always skipped.
    running_verb: str | None = None
    running_skipped: str = "skipped: a worker holds them, so they were left alone"


def _actor(request: HttpRequest) -> str:
    return request.user.get_username()


OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        Operation(
            "retry_jobs",
            "Retried",
            "Retry selected dead or cancelled jobs (run now, fresh attempts)",
            "not dead or cancelled",
            CHANGE,
            False,
            lambda request, ids: Job.objects.retry(ids, by=_actor(request)),
        ),
        Operation(
            "cancel_jobs",
            "Cancelled",
            "Cancel selected jobs (waiting: at once; running: asked to stop)",
            "finished already",
            CHANGE,
            False,
            lambda request, ids: Job.objects.cancel(ids, by=_actor(request)),
            running_verb="asked to stop (their workers end them as cancelled)",
            running_skipped="already asked to stop, and left unchanged",
        ),
        Operation(
            "run_jobs_now",
            "Ran now",
            "Run selected scheduled jobs now",
            "not scheduled (due later)",
            CHANGE,
            False,
            lambda request, ids: Job.objects.run_now(ids),
        ),
        Operation(
            "discard_jobs",
            "Discarded",
            "Discard (delete) selected jobs",
            # Discard takes any job that is not running: one it missed was claimed by a worker, or
            # deleted by someone else, after the selection was read.
            "running or already gone by then",
            DELETION,
            True,
            lambda request, ids: Job.objects.discard(ids),
        ),
    )
}


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def report(modeladmin: JobAdmin, request: HttpRequest, op: Operation, outcome: BulkOutcome) -> None:
    """Tell the operator what happened, including what was refused and why."""
    n = len(outcome.changed) - outcome.running_changed
    if n:
        modeladmin.message_user(request, f"{op.verb} {_plural(n, 'job', 'jobs')}.", messages.SUCCESS)
    if outcome.running_changed:
        modeladmin.message_user(
            request,
            f"{_plural(outcome.running_changed, 'running job was', 'running jobs were')} {op.running_verb}.",
            messages.SUCCESS,
        )
    if outcome.running:
        modeladmin.message_user(
            request,
            f"{_plural(outcome.running, 'running job was', 'running jobs were')} {op.running_skipped}.",
            messages.WARNING,
        )
    if outcome.other:
        modeladmin.message_user(
            request,
            f"{_plural(outcome.other, 'job was', 'jobs were')} {op.skipped} and "
            f"{'was' if outcome.other == 1 else 'were'} left unchanged.",
            messages.WARNING,
        )
    if not (n or outcome.running or outcome.running_changed or outcome.other):
        modeladmin.message_user(request, "No jobs matched; nothing was changed.", messages.INFO)


def perform(modeladmin: JobAdmin, request: HttpRequest, queryset: QuerySet, op: Operation) -> BulkOutcome:
    """Run ``op`` over ``queryset`` in bounded batches, report it and write one LogEntry."""
    started = time.monotonic()
    outcome = run_in_batches(queryset, lambda ids: op.call(request, ids))
    elapsed = time.monotonic() - started
    log_bulk_action(request.user.pk, modeladmin.model, op.log_flag, op.verb, outcome.changed)
    report(modeladmin, request, op, outcome)
    if elapsed > 1:
        modeladmin.message_user(
            request, f"({outcome.total} jobs processed in {elapsed:.1f} s.)", messages.INFO
        )
    return outcome


def confirmation(
    modeladmin: JobAdmin, request: HttpRequest, queryset: QuerySet, op: Operation, select_across: bool
) -> TemplateResponse:
    """The "Are you sure?" page: the exact N, a sample, and a form that re-posts the same action."""
    count = queryset.count()
    running = queryset.filter(status=Status.RUNNING).count()
    sample = list(queryset.order_by("-pk").only("pk", "task", "queue", "status")[:CONFIRM_SAMPLE])
    context = page_context(
        modeladmin,
        request,
        "Are you sure?",
        crumbs(modeladmin, None, (op.description, None)),
        operation=op,
        count=count,
        running=running,
        sample=sample,
        more=max(count - len(sample), 0),
        select_across=select_across,
        selected=request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        action_checkbox_name=helpers.ACTION_CHECKBOX_NAME,
    )
    return TemplateResponse(request, "admin/django_pgjobs/action_confirmation.html", context)


def _make_action(
    op: Operation, permission: str
) -> Callable[[JobAdmin, HttpRequest, QuerySet], HttpResponse | None]:
    def action(modeladmin: JobAdmin, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        select_across = request.POST.get("select_across") == "1"
        confirmed = request.POST.get("post") == "yes"
        if (op.always_confirm or select_across) and not confirmed:
            return confirmation(modeladmin, request, queryset, op, select_across)
        perform(modeladmin, request, queryset, op)
        return None

    action.__name__ = op.name
    return admin.action(description=op.description, permissions=[permission])(action)


retry_jobs = _make_action(OPERATIONS["retry_jobs"], "operate")
cancel_jobs = _make_action(OPERATIONS["cancel_jobs"], "operate")
run_jobs_now = _make_action(OPERATIONS["run_jobs_now"], "operate")
discard_jobs = _make_action(OPERATIONS["discard_jobs"], "delete")
