"""The admin's Periodic jobs page: schedules, next and last runs, escaping, permissions."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_pgjobs.models import Job
from django_pgjobs.periodic import Schedule, Ticker

pytestmark = pytest.mark.django_db

URL = "/admin/django_pgjobs/job/periodic/"


def test_lists_each_schedule_with_next_and_last_run_linking_the_job(operator, client_for):
    entry = {"task": "tests.tick", "every": 3600, "name": "<b>hourly</b>"}
    with override_settings(PGJOBS={"PERIODIC": [entry]}):
        Ticker([Schedule.build("tests.tick", every=3600, name="<b>hourly</b>")]).tick(Job.objects.store)
        (job,) = Job.objects.filter(task="tests.tick")
        page = client_for(operator).get(URL)
    assert page.status_code == 200
    html = page.content.decode()
    assert "&lt;b&gt;hourly&lt;/b&gt;" in html and "<b>hourly</b>" not in html
    assert "every 1h" in html and "tests.tick" in html
    assert f"/admin/django_pgjobs/job/{job.pk}/change/" in html
    assert "ready" in html


def test_without_schedules_it_says_how_to_add_one(operator, client_for):
    html = client_for(operator).get(URL).content.decode()
    assert "No periodic jobs" in html


def test_a_bad_entry_is_shown_not_a_500(operator, client_for):
    with override_settings(PGJOBS={"PERIODIC": [{"task": "tests.nope", "every": 60}]}):
        html = client_for(operator).get(URL).content.decode()
    assert "no handler registered as &#x27;tests.nope&#x27;" in html


def test_needs_view_permission(client_for):
    from tests.admin.conftest import make_user

    nobody = make_user("nobody")
    assert client_for(nobody).get(URL).status_code == 403
