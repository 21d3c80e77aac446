"""Pause / Resume from the overview: POST with CSRF, ``operate_job``, an admin LogEntry per change."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import ADDITION, DELETION, LogEntry

from django_pgjobs.models import QueuePause
from tests.factories import JobFactory

from .conftest import JOBS_URL, messages_of

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_wakeups")]

OVERVIEW = f"{JOBS_URL}overview/"
PAUSE = f"{OVERVIEW}queues/pause/"
RESUME = f"{OVERVIEW}queues/resume/"


def test_pause_then_resume_with_log_entries_and_idempotent_second_clicks(operator, client_for):
    JobFactory(queue="mail")
    client = client_for(operator)

    response = client.post(PAUSE, {"queue": "mail"}, follow=True)
    assert response.redirect_chain == [(OVERVIEW, 302)]
    assert messages_of(response) == [
        "Paused queue mail: workers claim none of its jobs until it is resumed (running jobs finish)."
    ]
    pause = QueuePause.objects.get()
    assert (pause.queue, pause.paused_by) == ("mail", "ops")
    row = {r.queue: r for r in response.context["rows"]}["mail"]
    assert row.paused is not None
    html = response.content.decode()
    assert '<tr data-queue="mail" class="pgjobs-paused">' in html and "pgjobs-paused-badge" in html
    assert 'class="button pgjobs-resume">Resume</button>' in html

    again = client.post(PAUSE, {"queue": "mail"}, follow=True)
    assert messages_of(again) == ["Queue mail was already paused; nothing was changed."]

    resumed = client.post(RESUME, {"queue": "mail"}, follow=True)
    assert messages_of(resumed) == ["Resumed queue mail: workers claim its jobs again."]
    assert not QueuePause.objects.exists()
    assert 'class="button pgjobs-pause">Pause</button>' in resumed.content.decode()
    assert messages_of(client.post(RESUME, {"queue": "mail"}, follow=True)) == [
        "Queue mail was not paused; nothing was changed."
    ]

    entries = list(LogEntry.objects.order_by("pk"))
    assert [(e.user.username, e.object_repr, e.action_flag, e.change_message) for e in entries] == [
        ("ops", "mail", ADDITION, "Paused queue mail"),
        ("ops", "mail", DELETION, "Resumed queue mail"),
    ]
    assert entries[0].content_type.model_class() is QueuePause


def test_without_operate_the_buttons_are_not_shown_and_the_post_is_refused(viewer, client_for):
    JobFactory(queue="mail")
    client = client_for(viewer)
    html = client.get(OVERVIEW).content.decode()
    assert 'pgjobs-pause"' not in html and PAUSE not in html and RESUME not in html
    assert client.post(PAUSE, {"queue": "mail"}).status_code == 403
    QueuePause.objects.create(queue="mail", paused_at="2026-12-01T12:00:00Z", paused_by="someone")
    assert client.post(RESUME, {"queue": "mail"}).status_code == 403
    assert list(QueuePause.objects.values_list("queue", flat=True)) == ["mail"]
    assert "pgjobs-paused-badge" in client.get(OVERVIEW).content.decode()  # still marked
    assert not LogEntry.objects.exists()


def test_post_only_with_csrf(operator, client_for):
    JobFactory(queue="mail")
    client = client_for(operator, csrf=True)
    assert client.get(PAUSE).status_code == 405
    assert client.post(PAUSE, {"queue": "mail"}).status_code == 403  # no token
    assert not QueuePause.objects.exists()
    page = client.get(OVERVIEW)
    token = (
        page.cookies["csrftoken"].value if "csrftoken" in page.cookies else client.cookies["csrftoken"].value
    )
    assert 'name="csrfmiddlewaretoken"' in page.content.decode()
    response = client.post(PAUSE, {"queue": "mail", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert QueuePause.objects.filter(queue="mail").exists()
    assert client_for(operator).post(f"{OVERVIEW}queues/explode/", {"queue": "mail"}).status_code == 404


def test_a_paused_queue_without_jobs_stays_on_the_overview_so_it_can_be_resumed(operator, client_for):
    client = client_for(operator)
    client.post(PAUSE, {"queue": "quiet"})
    html = client.get(OVERVIEW).content.decode()
    assert '<tr data-queue="quiet" class="pgjobs-paused">' in html


def test_bad_queue_names_change_nothing_and_names_are_escaped(operator, client_for):
    client = client_for(operator)
    response = client.post(PAUSE, {"queue": ""}, follow=True)
    assert messages_of(response)[0].startswith("Nothing was changed: queue name")
    assert not QueuePause.objects.exists() and not LogEntry.objects.exists()
    evil = "<b>x</b>"
    response = client.post(PAUSE, {"queue": evil}, follow=True)
    html = response.content.decode()
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert QueuePause.objects.get().queue == evil
