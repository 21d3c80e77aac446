"""The overview page: counts per queue and status, oldest ready age, the last hour's outcomes."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from tests.factories import DeadJobFactory, JobFactory

from .conftest import DEAD_URL, JOBS_URL

pytestmark = pytest.mark.django_db


def test_overview_counts_oldest_ready_and_last_hour(viewer, client_for, django_assert_max_num_queries):
    now = timezone.now()
    JobFactory(queue="mail", run_at=now - dt.timedelta(minutes=42))
    JobFactory(queue="mail", run_at=now - dt.timedelta(minutes=1))
    JobFactory(queue="mail", delayed=True)  # not due: not "waiting"
    JobFactory(queue="mail", running=True)
    JobFactory(queue="mail", done=True)
    JobFactory(queue="mail", done=True, finished_at=now - dt.timedelta(hours=3))
    DeadJobFactory(queue="payments")
    DeadJobFactory(queue="payments", finished_at=now - dt.timedelta(days=1))
    client = client_for(viewer)
    with django_assert_max_num_queries(8):  # session/user + 3 overview queries
        response = client.get(f"{JOBS_URL}overview/")
    assert response.status_code == 200
    rows = {r.queue: r for r in response.context["rows"]}
    assert rows["mail"].counts == {"ready": 3, "running": 1, "done": 2, "dead": 0}
    assert rows["payments"].counts == {"ready": 0, "running": 0, "done": 0, "dead": 2}
    assert dt.timedelta(minutes=41) < rows["mail"].oldest_ready_age < dt.timedelta(minutes=44)
    assert rows["payments"].oldest_ready_age is None
    assert (rows["mail"].finished_last_hour, rows["mail"].failed_last_hour) == (1, 0)
    assert (rows["payments"].finished_last_hour, rows["payments"].failed_last_hour) == (0, 1)
    html = response.content.decode()
    assert "42\xa0minutes" in html


def test_overview_is_linked_from_both_lists_and_needs_view_permission(viewer, client_for):
    client = client_for(viewer)
    for url in (JOBS_URL, DEAD_URL):
        assert f'href="{JOBS_URL}overview/"' in client.get(url).content.decode()
    client.logout()
    assert client.get(f"{JOBS_URL}overview/").status_code == 302  # to the login page
