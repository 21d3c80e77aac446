"""Pause and Resume buttons of the overview: POST only, CSRF-checked, ``operate_job`` required.

The change itself is :mod:`django_pgjobs.queue_control`'s (the one writer of ``pgjobs_queue_pause``,
shared with ``manage.py jobqueues``); here are the checks, the operator's message and the admin
LogEntry, as the job actions write them (who, what, when; "Recent actions" lists it). A second click
on a button of a page loaded before someone else's change changes nothing and says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.contrib.admin.models import ADDITION, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import reverse

from .. import queue_control
from ..conf import get_settings
from ..models import QueuePause

if TYPE_CHECKING:
    from . import JobAdmin

OPERATIONS = ("pause", "resume")


def log_queue_change(user_id: Any, queue: str, operation: str) -> LogEntry:
    """A pause adds a ``pgjobs_queue_pause`` row and a resume deletes it: logged as such, with a
    plain-text message ("Paused queue mail") that the admin shows verbatim."""
    verb = "Paused" if operation == "pause" else "Resumed"
    return LogEntry.objects.create(
        user_id=user_id,
        content_type=ContentType.objects.get_for_model(QueuePause),
        object_id=queue,
        object_repr=queue[:200],
        action_flag=ADDITION if operation == "pause" else DELETION,
        change_message=f"{verb} queue {queue}",
    )


def queue_control_view(modeladmin: JobAdmin, request: HttpRequest, operation: str) -> HttpResponse:
    """``operation`` is pause or resume; the queue comes in the POST body (a queue name may hold
    any character but NUL, a URL segment could not carry every one of them)."""
    if operation not in OPERATIONS:
        raise Http404(f"unknown operation {operation!r}")
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not (modeladmin.has_view_permission(request) and modeladmin.has_operate_permission(request)):
        raise PermissionDenied
    queue = request.POST.get("queue", "")
    using = get_settings().DATABASE
    try:
        if operation == "pause":
            changed = queue_control.pause(queue, by=request.user.get_username(), using=using)
        else:
            changed = queue_control.resume(queue, using=using)
    except ValueError as exc:
        modeladmin.message_user(request, f"Nothing was changed: {exc}", messages.ERROR)
    else:
        if changed:
            log_queue_change(request.user.pk, queue, operation)
            if operation == "pause":
                text = (
                    f"Paused queue {queue}: workers claim none of its jobs until it is resumed "
                    "(running jobs finish)."
                )
            else:
                text = f"Resumed queue {queue}: workers claim its jobs again."
            modeladmin.message_user(request, text, messages.SUCCESS)
        else:
            state = "already paused" if operation == "pause" else "not paused"
            modeladmin.message_user(
                request, f"Queue {queue} was {state}; nothing was changed.", messages.INFO
            )
    return HttpResponseRedirect(reverse(f"{modeladmin.admin_site.name}:django_pgjobs_job_overview"))
