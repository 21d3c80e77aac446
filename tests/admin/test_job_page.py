"""The job page: pretty JSON, attempt history with tracebacks, lease info; editing via the manager."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.utils import timezone

from django_pgjobs.models import Job
from tests.factories import DeadJobFactory, JobFactory

from .conftest import DEAD_URL, JOBS_URL, messages_of

pytestmark = pytest.mark.django_db


def edit_data(job: Job, **changes: Any) -> dict[str, Any]:
    run_at = timezone.localtime(job.run_at)
    data = {
        "queue": job.queue,
        "priority": job.priority,
        "run_at_0": run_at.strftime("%Y-%m-%d"),
        "run_at_1": run_at.strftime("%H:%M:%S"),
        "max_attempts": job.max_attempts,
        "payload": '{"args": [], "kwargs": {}}',
        "_save": "Save",
    }
    data.update(changes)
    return data


def test_job_page_shows_pretty_json_history_and_traceback(operator, client_for):
    dead = DeadJobFactory(payload={"args": [1], "kwargs": {"invoice_id": 1842}}, result=None)
    html = client_for(operator).get(f"{DEAD_URL}{dead.pk}/change/").content.decode()
    assert "&quot;invoice_id&quot;: 1842" in html  # indented JSON in the textarea
    assert "pgjobs-history" in html
    assert "Traceback...\nRuntimeError: boom" in html
    assert "RuntimeError boom" in html


def test_done_job_shows_result_and_running_job_shows_lease_read_only(operator, client_for):
    done = JobFactory(done=True, result={"sent": True, "to": ["a@example.com"]})
    client = client_for(operator)
    html = client.get(f"{JOBS_URL}{done.pk}/change/").content.decode()
    assert '<pre class="pgjobs-json">{\n  &quot;sent&quot;: true' in html

    running = JobFactory(running=True, payload={"args": [], "kwargs": {"x": 1}})
    page = client.get(f"{JOBS_URL}{running.pk}/change/")
    html = page.content.decode()
    assert page.context["has_change_permission"] is False
    assert "<textarea" not in html
    assert "Lease / worker" in html and "worker-test" in html and "expires in" in html
    assert "read-only" in html
    assert '<pre class="pgjobs-json">{\n  &quot;args&quot;: []' in html


def test_edit_goes_through_the_manager_and_is_logged(operator, client_for):
    job = JobFactory(delayed=True)
    client = client_for(operator)
    new_run_at = timezone.now().replace(microsecond=0) + dt.timedelta(days=1)
    local = timezone.localtime(new_run_at)
    response = client.post(
        f"{JOBS_URL}{job.pk}/change/",
        edit_data(
            job,
            queue="urgent",
            priority=-5,
            max_attempts=9,
            payload='{"args": [2], "kwargs": {"k": "v"}}',
            run_at_0=local.strftime("%Y-%m-%d"),
            run_at_1=local.strftime("%H:%M:%S"),
        ),
        follow=True,
    )
    assert any("was changed successfully" in m for m in messages_of(response))
    job.refresh_from_db()
    assert (job.queue, job.priority, job.max_attempts) == ("urgent", -5, 9)
    assert job.payload == {"args": [2], "kwargs": {"k": "v"}}
    assert job.run_at == new_run_at
    entry = LogEntry.objects.get()
    assert entry.user == operator and entry.object_id == str(job.pk)
    assert entry.get_change_message() == "Changed Queue, Priority, Run at, Max attempts and Payload."


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"payload": "{not json"}, "Enter a valid JSON."),
        ({"payload": "[1, 2]"}, "The payload must be a JSON object"),
        ({"payload": '{"args": {"a": 1}}'}, "must be a list"),
        ({"priority": "40000"}, "less than or equal to 32767"),
        ({"max_attempts": "0"}, "greater than or equal to 1"),
        ({"queue": "  "}, "This field is required."),
    ],
)
def test_edit_validation(operator, client_for, changes, error):
    job = JobFactory()
    response = client_for(operator).post(f"{JOBS_URL}{job.pk}/change/", edit_data(job, **changes))
    assert response.status_code == 200  # the form again, with the error
    assert error in response.content.decode()
    fresh = Job.objects.get(pk=job.pk)
    assert (fresh.queue, fresh.priority, fresh.max_attempts, fresh.payload) == (
        job.queue,
        job.priority,
        job.max_attempts,
        job.payload,
    )
    assert not LogEntry.objects.exists()


def test_edit_of_a_running_job_is_refused_with_a_message(operator, client_for):
    running = JobFactory(running=True)
    response = client_for(operator).post(
        f"{JOBS_URL}{running.pk}/change/", edit_data(running, queue="elsewhere"), follow=True
    )
    assert any("is running" in m and "Nothing was changed" in m for m in messages_of(response))
    assert Job.objects.get(pk=running.pk).queue == "default"
    assert not LogEntry.objects.exists()


def test_edit_refused_when_the_job_starts_running_between_form_and_save(operator, client_for, monkeypatch):
    """The race: the form was valid, then a worker claimed the job before Job.objects.edit ran."""
    # Due before the test transaction began (the claim compares run_at with now()).
    job = JobFactory(run_at=timezone.now() - dt.timedelta(minutes=1))
    real_edit = Job.objects.edit

    def claim_then_edit(job_id: int, **kwargs: Any) -> Job | None:
        # A real worker claim through the manager (the only job in the table), not a mock.
        assert [j.pk for j in Job.objects.claim(None, "w-race")] == [job_id]
        return real_edit(job_id, **kwargs)

    monkeypatch.setattr(Job.objects, "edit", claim_then_edit)
    response = client_for(operator).post(
        f"{JOBS_URL}{job.pk}/change/", edit_data(job, queue="elsewhere"), follow=True
    )
    assert any("became running" in m for m in messages_of(response))
    assert not any("changed successfully" in m for m in messages_of(response))
    assert Job.objects.get(pk=job.pk).queue == "default"
    assert not LogEntry.objects.exists()


def test_delete_button_discards_through_the_manager_and_running_jobs_cannot_be_deleted(operator, client_for):
    dead = DeadJobFactory()
    running = JobFactory(running=True)
    client = client_for(operator)
    client.post(f"{JOBS_URL}{dead.pk}/delete/", {"post": "yes"})
    assert not Job.objects.filter(pk=dead.pk).exists()
    assert client.post(f"{JOBS_URL}{running.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Job.objects.filter(pk=running.pk).exists()


def _buttons(html: str) -> list[str]:
    return re.findall(r'action="([^"]+/operate/[^"]+)".*?>([^<]+)</button>', html)


def test_job_page_buttons_match_the_job_state(operator, viewer, client_for):
    dead, delayed, due, done = (
        DeadJobFactory(),
        JobFactory(delayed=True),
        JobFactory(),
        JobFactory(done=True),
    )
    client = client_for(operator)
    assert _buttons(client.get(f"{DEAD_URL}{dead.pk}/change/").content.decode()) == [
        (f"{DEAD_URL}{dead.pk}/operate/retry_jobs/", "Retry")
    ]
    assert [
        label for _, label in _buttons(client.get(f"{JOBS_URL}{delayed.pk}/change/").content.decode())
    ] == [
        "Run now",
        "Cancel",
    ]
    assert [label for _, label in _buttons(client.get(f"{JOBS_URL}{due.pk}/change/").content.decode())] == [
        "Cancel"
    ]
    assert _buttons(client.get(f"{JOBS_URL}{done.pk}/change/").content.decode()) == []
    # A viewer sees the job but no button.
    assert _buttons(client_for(viewer).get(f"{DEAD_URL}{dead.pk}/change/").content.decode()) == []


def test_retry_button_on_a_dead_letter_goes_through_the_manager(operator, client_for):
    dead = DeadJobFactory()
    response = client_for(operator, csrf=False).post(f"{DEAD_URL}{dead.pk}/operate/retry_jobs/", follow=True)
    assert response.redirect_chain[0][0] == f"{JOBS_URL}{dead.pk}/change/"
    assert "Retried 1 job." in messages_of(response)
    dead.refresh_from_db()
    assert (dead.status, dead.attempts) == ("ready", 0)
    assert dead.history[-1]["outcome"] == "retried"  # the manager's own history entry
    entry = LogEntry.objects.get()
    assert entry.user == operator and "Retried" in entry.get_change_message()


def test_job_page_buttons_need_post_csrf_and_permission(operator, viewer, client_for):
    dead = DeadJobFactory()
    url = f"{DEAD_URL}{dead.pk}/operate/retry_jobs/"
    assert client_for(operator).get(url).status_code == 405
    assert client_for(viewer).post(url).status_code == 403
    assert client_for(operator, csrf=True).post(url).status_code == 403  # no CSRF token
    assert client_for(operator).post(f"{DEAD_URL}{dead.pk}/operate/discard_jobs/").status_code == 404
    assert client_for(operator).post(f"{DEAD_URL}999999999/operate/retry_jobs/").status_code == 404
    assert Job.objects.get(pk=dead.pk).status == "dead"
    assert not LogEntry.objects.exists()


def test_cancel_button_refuses_a_job_that_started_running(operator, client_for):
    job = JobFactory()
    page = client_for(operator).get(f"{JOBS_URL}{job.pk}/change/").content.decode()
    assert [label for _, label in _buttons(page)] == ["Cancel"]
    Job.objects.filter(pk=job.pk).update(
        status="running", attempts=1, locked_by="w", lease_expires_at=timezone.now() + dt.timedelta(minutes=1)
    )
    response = client_for(operator).post(f"{JOBS_URL}{job.pk}/operate/cancel_jobs/", follow=True)
    assert any("running job was skipped" in m for m in messages_of(response))
    assert Job.objects.get(pk=job.pk).status == "running"
