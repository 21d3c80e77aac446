"""The overview page: counts per queue and status, oldest ready age, the last hour's outcomes."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from tests.factories import DeadJobFactory, JobFactory

from .conftest import DEAD_URL, JOBS_URL, messages_of

pytestmark = pytest.mark.django_db


def test_overview_counts_oldest_ready_and_last_hour(viewer, client_for, django_assert_max_num_queries):
    now = timezone.now()
    JobFactory(queue="mail", run_at=now - dt.timedelta(minutes=42))
    JobFactory(queue="mail", run_at=now - dt.timedelta(minutes=1))
    JobFactory(queue="mail", delayed=True)  # scheduled: not due, so not in "oldest ready"
    JobFactory(queue="mail", running=True)
    JobFactory(queue="mail", done=True)
    JobFactory(queue="mail", done=True, finished_at=now - dt.timedelta(hours=3))
    DeadJobFactory(queue="payments")
    DeadJobFactory(queue="payments", finished_at=now - dt.timedelta(days=1))
    client = client_for(viewer)
    # session, user, permissions + 3 overview queries, paused queues, live workers, 2 chart series
    with django_assert_max_num_queries(11):
        response = client.get(f"{JOBS_URL}overview/")
    assert response.status_code == 200
    rows = {r.queue: r for r in response.context["rows"]}
    assert rows["mail"].counts == {
        "scheduled": 1,
        "ready": 2,
        "running": 1,
        "done": 2,
        "dead": 0,
        "cancelled": 0,
    }
    assert rows["payments"].counts == {
        "scheduled": 0,
        "ready": 0,
        "running": 0,
        "done": 0,
        "dead": 2,
        "cancelled": 0,
    }
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


def expired(queue: str) -> object:
    """A running job whose worker stopped renewing its lease five minutes ago."""
    return JobFactory(queue=queue, expired=True, lease_expires_at=timezone.now() - dt.timedelta(minutes=5))


def test_overview_counts_running_jobs_whose_lease_expired(viewer, client_for, django_assert_max_num_queries):
    expired("mail")
    expired("mail")
    expired("payments")
    JobFactory(queue="mail", running=True)  # lease still held
    JobFactory(queue="other")
    client = client_for(viewer)
    with django_assert_max_num_queries(11):  # no extra query: counted in the GROUP BY
        response = client.get(f"{JOBS_URL}overview/")
    rows = {r.queue: r for r in response.context["rows"]}
    assert {q: r.lease_expired for q, r in rows.items()} == {"mail": 2, "other": 0, "payments": 1}
    assert rows["mail"].counts["running"] == 3
    assert response.context["totals"]["lease_expired"] == 3
    html = response.content.decode()
    assert "3 running jobs</a> have an expired lease" in html
    assert f'href="{JOBS_URL}?queue=mail&amp;lease=expired">2</a>' in html


def test_overview_says_nothing_about_leases_when_none_expired(viewer, client_for):
    JobFactory(running=True)
    response = client_for(viewer).get(f"{JOBS_URL}overview/")
    assert response.context["totals"]["lease_expired"] == 0
    assert "expired lease" not in response.content.decode()


def test_jobs_list_filters_running_jobs_whose_lease_expired(operator, client_for):
    stuck = [expired("mail"), expired("payments")]
    JobFactory(running=True)
    JobFactory()
    DeadJobFactory()
    client = client_for(operator)
    response = client.get(JOBS_URL, {"lease": "expired"})
    assert response.status_code == 200 and not messages_of(response)
    assert sorted(j.pk for j in response.context["cl"].result_list) == sorted(j.pk for j in stuck)
    assert "Lease expired" in response.content.decode()
    assert len(client.get(JOBS_URL, {"lease": "expired", "queue": "mail"}).context["cl"].result_list) == 1


@pytest.mark.django_db(transaction=True, databases=["default", "jobs"])
def test_pages_read_jobs_from_the_configured_database_only(viewer, client_for):
    """With PGJOBS["DATABASE"] = "jobs", the lists, their filter sidebars and the overview must not
    query "default" for jobs (where the table may not exist, or hold other rows)."""
    from django.db import connections
    from django.test import override_settings
    from django.test.utils import CaptureQueriesContext

    JobFactory(queue="mail")
    DeadJobFactory(queue="payments")
    client = client_for(viewer)
    with (
        override_settings(PGJOBS={"DATABASE": "jobs"}),
        CaptureQueriesContext(connections["default"]) as on_default,
        CaptureQueriesContext(connections["jobs"]) as on_jobs,
    ):
        for url in (JOBS_URL, f"{JOBS_URL}?queue=mail", DEAD_URL, f"{JOBS_URL}overview/"):
            assert client.get(url).status_code == 200, url
    assert [q["sql"] for q in on_default.captured_queries if "pgjobs_job" in q["sql"]] == []
    assert sum("pgjobs_job" in q["sql"] for q in on_jobs.captured_queries) >= 8
