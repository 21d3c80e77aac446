"""The Workers page: live workers with their running jobs, gone ones marked; escaping; permissions.

Registry rows are made with the ORM (the table is the fleet's, not protected like jobs); liveness is
``expires_at`` against the database clock, so rows a minute either side of now are unambiguous.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from django_pgjobs.models import WorkerProcess
from tests.factories import JobFactory

from .conftest import JOBS_URL, make_user

pytestmark = pytest.mark.django_db

WORKERS_URL = f"{JOBS_URL}workers/"


def worker(name: str, *, live: bool = True, **fields: Any) -> WorkerProcess:
    now = timezone.now()
    values: dict[str, Any] = {
        "worker_id": name.split("#")[0],
        "host": "web-1",
        "pid": 4242,
        "queues": [],
        "queue_limits": {},
        "concurrency": 8,
        "version": "0.2.0",
        "started_at": now - dt.timedelta(hours=2),
        "heartbeat_at": now - dt.timedelta(seconds=2 if live else 600),
        "expires_at": now + dt.timedelta(seconds=60) if live else now - dt.timedelta(minutes=9),
        "in_flight": 0,
    }
    values.update(fields)
    return WorkerProcess.objects.create(name=name, **values)


def test_lists_live_workers_with_their_running_jobs_and_gone_ones(viewer, client_for):
    mail = worker("mail-1#a1", queues=["mail", "billing"], queue_limits={"mail": 4}, in_flight=2, pid=101)
    worker("any-1#b2", host="web-2", pid=202)
    gone = worker("old-1#c3", live=False, pid=303)
    jobs = [JobFactory(running=True, locked_by=mail.name, task="mail.send", queue="mail") for _ in range(2)]
    stuck = JobFactory(expired=True, locked_by=gone.name, task="billing.sync")
    JobFactory(running=True, locked_by="not-registered#x")  # a worker the registry does not know

    response = client_for(viewer).get(WORKERS_URL)

    assert response.status_code == 200
    live = {r.worker.name: r for r in response.context["live"]}
    assert list(live) == ["any-1#b2", "mail-1#a1"]  # by worker id
    assert [j.pk for j in live["mail-1#a1"].running] == [j.pk for j in jobs]
    assert live["mail-1#a1"].queues_display == ["mail (max 4)", "billing"]
    assert live["any-1#b2"].queues_display == ["all queues"]
    assert [(r.worker.name, r.live, [j.pk for j in r.running]) for r in response.context["gone"]] == [
        (gone.name, False, [stuck.pk])
    ]
    html = response.content.decode()
    for job in jobs:
        assert f'href="{JOBS_URL}{job.pk}/change/">#{job.pk}</a> mail.send' in html
    assert 'class="pgjobs-gone" data-worker="old-1#c3"' in html and "pgjobs-gone-badge" in html
    assert "mail (max 4)" in html and "web-2" in html and "0.2.0" in html
    assert "2 live worker processes, 2 jobs in flight of 16 slots" in html


def test_no_workers(viewer, client_for):
    html = client_for(viewer).get(WORKERS_URL).content.decode()
    assert "No live workers: nothing is claiming jobs." in html


def test_everything_a_worker_says_is_escaped(viewer, client_for):
    evil = "<script>alert(1)</script>"
    w = worker(f"{evil}#1", host=evil, version=evil, queues=[evil], queue_limits={evil: 2})
    JobFactory(running=True, locked_by=w.name, task="x." + evil.replace("/", ""), queue="q")
    html = client_for(viewer).get(WORKERS_URL).content.decode()
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; (max 2)" in html


def test_needs_view_permission_on_jobs(viewer, client_for, django_assert_max_num_queries):
    worker("w#1")
    nobody = make_user("nobody")
    assert client_for(nobody).get(WORKERS_URL).status_code == 403
    client = client_for(viewer)
    with django_assert_max_num_queries(8):  # session, user, permissions + live, gone, running jobs
        assert client.get(WORKERS_URL).status_code == 200
    client.logout()
    assert client.get(WORKERS_URL).status_code == 302  # to the login page


def test_linked_from_the_overview_the_lists_and_the_app_index(viewer, client_for):
    worker("w#1")
    client = client_for(viewer)
    overview = client.get(f"{JOBS_URL}overview/").content.decode()
    assert f'href="{WORKERS_URL}"' in overview and "Workers (1 live)" in overview
    assert f'href="{WORKERS_URL}"' in client.get(JOBS_URL).content.decode()
    app_index = client.get("/admin/django_pgjobs/").content.decode()
    assert f'href="{WORKERS_URL}"' in app_index and f'href="{JOBS_URL}overview/"' in app_index
    nobody = make_user("nobody2")  # staff without grants: no app page at all
    assert client_for(nobody).get("/admin/django_pgjobs/").status_code in (403, 404)
