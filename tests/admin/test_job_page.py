"""The job page: pretty JSON, attempt history with tracebacks, lease info; editing via the manager."""

from __future__ import annotations

import datetime as dt
import json
import re
from html.parser import HTMLParser
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_pgjobs.admin.forms import MAX_JSON_DEPTH
from django_pgjobs.models import Job
from tests.factories import DeadJobFactory, JobFactory, force_update

from .conftest import DEAD_URL, JOBS_URL, make_user, messages_of

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


class _ChangeForm(HTMLParser):
    """What a browser posts from the job page's form: every named input (hidden ones included) and
    textarea, but no submit button."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.data: dict[str, str] = {}
        self._in_form = False
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form" and (a.get("id") or "").endswith("job_form"):
            self._in_form = True
        elif self._in_form and tag == "input" and a.get("name") and a.get("type") != "submit":
            self.data[a["name"] or ""] = a.get("value") or ""
        elif self._in_form and tag == "textarea":
            self._textarea = a["name"] or ""
            self.data[self._textarea] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea":
            self._textarea = None
        elif tag == "form":
            self._in_form = False

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self.data[self._textarea] += data


def form_data(page: Any, **changes: Any) -> dict[str, Any]:
    """The job page's form as loaded, with ``changes`` typed in, ready to be saved."""
    parser = _ChangeForm()
    parser.feed(page.content.decode())
    assert "queue" in parser.data, "no edit form on the page"
    return {**parser.data, **changes, "_save": "Save"}


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


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris"])
def test_edit_of_run_at_with_use_tz_false_is_wall_time_in_the_current_timezone(operator, client_for, zone):
    # With USE_TZ = False the form gave a naive run_at, and Job.objects.edit refused it with a
    # message for code ("pass an aware datetime"): operators could never change run_at.
    job = JobFactory(delayed=True)
    client = client_for(operator)
    with override_settings(USE_TZ=False, TIME_ZONE=zone):
        page = client.get(f"{JOBS_URL}{job.pk}/change/")
        data = form_data(page, run_at_0="2030-06-01", run_at_1="12:00:00", priority="3")
        response = client.post(f"{JOBS_URL}{job.pk}/change/", data, follow=True)
        messages = messages_of(response)
    assert any("was changed successfully" in m for m in messages), messages
    assert not any("aware" in m for m in messages)
    job.refresh_from_db()
    assert job.run_at == dt.datetime(2030, 6, 1, 12, tzinfo=ZoneInfo(zone))
    assert job.priority == 3
    assert LogEntry.objects.get().get_change_message() == "Changed Priority and Run at."


def test_edit_of_run_at_with_use_tz_false_refuses_a_time_the_clocks_skip(operator, client_for):
    job = JobFactory(delayed=True)
    client = client_for(operator)
    with override_settings(USE_TZ=False, TIME_ZONE="Europe/Paris"):
        page = client.get(f"{JOBS_URL}{job.pk}/change/")
        data = form_data(page, run_at_0="2030-03-31", run_at_1="02:30:00")  # 02:00 -> 03:00 CEST
        response = client.post(f"{JOBS_URL}{job.pk}/change/", data)
    assert response.status_code == 200  # the form again, with the error
    assert "it may be ambiguous or it may not exist" in response.content.decode()
    assert Job.objects.get(pk=job.pk).run_at == job.run_at
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
        assert [j.id for j in Job.objects.claim(None, "w-race")] == [job_id]
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
    assert (dead.status, dead.attempts, dead.max_attempts) == ("ready", 5, 10)
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


def test_cancel_button_asks_a_job_that_started_running_to_stop(operator, client_for):
    job = JobFactory()
    page = client_for(operator).get(f"{JOBS_URL}{job.pk}/change/").content.decode()
    assert [label for _, label in _buttons(page)] == ["Cancel"]
    force_update(
        job.pk,
        status="running",
        attempts=1,
        locked_by="w",
        lease_expires_at=timezone.now() + dt.timedelta(minutes=1),
    )
    response = client_for(operator).post(f"{JOBS_URL}{job.pk}/operate/cancel_jobs/", follow=True)
    assert any("running job was asked to stop" in m for m in messages_of(response))
    stored = Job.objects.get(pk=job.pk)
    assert stored.status == "running" and stored.cancel_requested_by == "ops"
    # The page says so, and offers Cancel no more.
    page = client_for(operator).get(f"{JOBS_URL}{job.pk}/change/").content.decode()
    assert _buttons(page) == []
    assert "cancel requested by" in page.lower()


def test_a_stale_page_writes_back_only_what_the_operator_changed(operator, client_for):
    """Between page load and save, "Run now" moved run_at and someone else edited the payload; saving
    the old page with only the priority changed must keep both (a field differs from the *row*, not
    from what the page showed)."""
    job = JobFactory(delayed=True, payload={"args": [1], "kwargs": {}})
    client = client_for(operator)
    url = f"{JOBS_URL}{job.pk}/change/"
    data = form_data(client.get(url), priority="7")
    assert Job.objects.run_now([job.pk]) == [job.pk]
    assert Job.objects.edit(job.pk, payload={"args": [2], "kwargs": {}}) is not None
    moved = Job.objects.get(pk=job.pk)
    assert moved.run_at < job.run_at

    response = client.post(url, data, follow=True)
    assert any("was changed successfully" in m for m in messages_of(response))
    fresh = Job.objects.get(pk=job.pk)
    assert fresh.priority == 7
    assert fresh.run_at == moved.run_at
    assert fresh.payload == {"args": [2], "kwargs": {}}
    assert LogEntry.objects.get().get_change_message() == "Changed Priority."


def test_the_shown_values_survive_a_form_error(operator, client_for):
    """After a validation error the page still compares with what was first shown: a run_at changed
    on the first try is saved on the second (Django's split date/time hidden initial would not be)."""
    job = JobFactory(delayed=True)
    client = client_for(operator)
    url = f"{JOBS_URL}{job.pk}/change/"
    new_run_at = job.run_at.replace(microsecond=0) + dt.timedelta(days=1)
    local = timezone.localtime(new_run_at)
    first = form_data(
        client.get(url),
        run_at_0=local.strftime("%Y-%m-%d"),
        run_at_1=local.strftime("%H:%M:%S"),
        payload="{not json",
    )
    page = client.post(url, first)
    assert page.status_code == 200 and "Enter a valid JSON." in page.content.decode()
    assert Job.objects.get(pk=job.pk).run_at == job.run_at

    response = client.post(url, form_data(page, payload='{"args": [3], "kwargs": {}}'), follow=True)
    assert any("was changed successfully" in m for m in messages_of(response))
    fresh = Job.objects.get(pk=job.pk)
    assert (fresh.run_at, fresh.payload) == (new_run_at, {"args": [3], "kwargs": {}})
    assert LogEntry.objects.get().get_change_message() == "Changed Run at and Payload."


@pytest.mark.parametrize("depth", [5000, 900])
def test_deeply_nested_payload_is_a_form_error_not_a_server_error(operator, client_for, depth):
    """5,000 levels: json.loads raises RecursionError. 900 parse, but once saved the job page could
    not render them (indented json.dumps inside the template engine's stack)."""
    job = JobFactory()
    deep = '{"args": [' + "[" * depth + "]" * depth + '], "kwargs": {}}'
    client = client_for(operator)
    response = client.post(f"{JOBS_URL}{job.pk}/change/", edit_data(job, payload=deep))
    assert response.status_code == 200
    assert "nested too deeply" in response.content.decode()
    assert Job.objects.get(pk=job.pk).payload == job.payload
    assert client.get(f"{JOBS_URL}{job.pk}/change/").status_code == 200
    assert not LogEntry.objects.exists()


def test_payload_nested_up_to_the_limit_is_saved_and_shown(operator, client_for):
    job = JobFactory()
    depth = MAX_JSON_DEPTH - 2  # the payload object and its "args" list are two levels
    payload = {"args": [json.loads("[" * depth + "]" * depth)], "kwargs": {}}
    client = client_for(operator)
    response = client.post(
        f"{JOBS_URL}{job.pk}/change/", edit_data(job, payload=json.dumps(payload)), follow=True
    )
    assert any("was changed successfully" in m for m in messages_of(response))
    assert Job.objects.get(pk=job.pk).payload == payload
    assert client.get(f"{JOBS_URL}{job.pk}/change/").status_code == 200


def test_done_job_page_is_read_only_and_an_edit_changes_nothing(operator, client_for):
    done = JobFactory(done=True)
    client = client_for(operator)
    url = f"{JOBS_URL}{done.pk}/change/"
    page = client.get(url)
    assert page.context["has_change_permission"] is False
    assert "<textarea" not in page.content.decode()
    assert "done: read-only" in page.content.decode()

    response = client.post(url, edit_data(done, queue="elsewhere", priority=3), follow=True)
    assert any("is done" in m and "Nothing was changed" in m for m in messages_of(response))
    fresh = Job.objects.get(pk=done.pk)
    assert (fresh.queue, fresh.priority, fresh.updated_at) == (done.queue, done.priority, done.updated_at)
    # The manager's statement refuses it too (a page loaded while the job was still ready).
    assert Job.objects.edit(done.pk, priority=3) is None
    assert Job.objects.get(pk=done.pk).priority == done.priority
    assert not LogEntry.objects.exists()


def test_dead_job_can_still_be_edited(operator, client_for):
    dead = DeadJobFactory()
    response = client_for(operator).post(
        f"{DEAD_URL}{dead.pk}/change/", edit_data(dead, priority=4), follow=True
    )
    assert any("was changed successfully" in m for m in messages_of(response))
    assert Job.objects.get(pk=dead.pk).priority == 4


def test_job_page_reads_the_job_once(operator, client_for):
    dead = DeadJobFactory()
    client = client_for(operator)
    with CaptureQueriesContext(connection) as queries:
        page = client.get(f"{DEAD_URL}{dead.pk}/change/")
    assert page.status_code == 200 and _buttons(page.content.decode())  # the buttons are there
    job_reads = [q["sql"] for q in queries if q["sql"].startswith("SELECT") and '"pgjobs_job"' in q["sql"]]
    assert len(job_reads) == 1, job_reads


def test_job_page_buttons_need_view_permission_too(client_for):
    operate_only = make_user("operate-only", "operate_job")
    dead = DeadJobFactory()
    response = client_for(operate_only).post(f"{DEAD_URL}{dead.pk}/operate/retry_jobs/")
    assert response.status_code == 403
    assert Job.objects.get(pk=dead.pk).status == "dead"
    assert not LogEntry.objects.exists()


def test_retry_button_clicked_twice_says_the_second_changed_nothing(operator, client_for):
    dead = DeadJobFactory()
    client = client_for(operator)
    url = f"{DEAD_URL}{dead.pk}/operate/retry_jobs/"
    first = client.post(url, follow=True)
    assert "Retried 1 job." in messages_of(first)
    second = client.post(url, follow=True)
    assert second.status_code == 200
    assert second.redirect_chain[0][0] == f"{JOBS_URL}{dead.pk}/change/"
    assert "1 job was not dead or cancelled and was left unchanged." in messages_of(second)
    assert LogEntry.objects.count() == 1
    assert client.post(f"{DEAD_URL}not-a-number/operate/retry_jobs/").status_code == 404


@pytest.mark.parametrize("done", [False, True], ids=["editable", "read-only"])
def test_a_payload_stored_too_deep_by_code_does_not_break_the_job_page(operator, client_for, done):
    """Code can enqueue nesting the page cannot pretty-print (about 870+ levels inside the template
    engine's stack): the page says so instead of failing, and a save leaves the payload alone."""
    job = JobFactory(done=True) if done else JobFactory(delayed=True)
    deep = '{"args": [' + "[" * 880 + "]" * 880 + '], "kwargs": {}}'
    with connection.cursor() as cursor:
        cursor.execute("UPDATE pgjobs_job SET payload = %s::jsonb WHERE id = %s", [deep, job.pk])
    page = client_for(operator).get(f"{JOBS_URL}{job.pk}/change/")
    assert page.status_code == 200
    assert "nested too deeply" in page.content.decode()


def test_a_large_payload_is_shown_truncated_with_its_size_and_not_offered_for_editing(operator, client_for):
    from django_pgjobs.admin import PRETTY_LIMIT

    big = {"args": ["x" * (PRETTY_LIMIT * 3)], "kwargs": {}}
    job = JobFactory(payload=big, result={"rows": list(range(40_000))})
    page = client_for(operator).get(f"{JOBS_URL}{job.pk}/change/").content.decode()
    size = len(json.dumps(big, separators=(",", ":")))
    assert f"{size:,} bytes of JSON; the first {PRETTY_LIMIT:,} characters:" in page
    assert len(page) < 4 * PRETTY_LIMIT  # the page carries a summary, not the megabytes
    assert 'name="payload"' not in page  # too large to edit in a textarea; the rest stays editable
    assert 'name="queue"' in page
    # Saving the other fields leaves the payload alone.
    data = edit_data(job, queue="elsewhere")
    del data["payload"]
    client_for(operator).post(f"{JOBS_URL}{job.pk}/change/", data)
    stored = Job.objects.get(pk=job.pk)
    assert (stored.queue, stored.payload) == ("elsewhere", big)
