"""Markup of our own pages that must match the running Django: breadcrumbs, list cells, per-queue
workers on the overview. Runs on Django 5.2 (venv) and 6.1 (tox), asserting each version's form."""

from __future__ import annotations

import datetime as dt
import re

import django
import pytest
from django.utils import timezone

from django_pgjobs.models import WorkerProcess
from tests.factories import DeadJobFactory, JobFactory

from .conftest import DEAD_URL, JOBS_URL, action

pytestmark = pytest.mark.django_db


def breadcrumbs(html: str) -> str:
    found = re.search(r'<nav aria-label="Breadcrumbs">(.*?)</nav>', html, re.S)
    assert found, "no breadcrumbs nav"
    return found.group(1)


def assert_breadcrumbs(html: str, *labels: str) -> None:
    """Django >= 6.1: ``<ol class="breadcrumbs">`` with one ``<li>`` per crumb, the page's own
    ``aria-current="page"``; 5.2: ``<div class="breadcrumbs">`` with ``&rsaquo;`` between them."""
    nav = breadcrumbs(html)
    items = re.findall(r"<li[^>]*>(.*?)</li>", nav, re.S)
    texts = [re.sub(r"<[^>]+>", "", item).strip() for item in items]
    if django.VERSION >= (6, 1):
        assert '<ol class="breadcrumbs">' in nav and '<div class="breadcrumbs">' not in nav
        assert texts == list(labels)
        assert f'<li aria-current="page">{labels[-1]}</li>' in nav
    else:
        assert '<div class="breadcrumbs">' in nav and "<li" not in nav
        text = re.sub(r"<[^>]+>", "", nav)
        assert [t.strip() for t in text.split("&rsaquo;")] == list(labels)


def test_breadcrumbs_of_every_custom_page(operator, client_for):
    dead = DeadJobFactory()
    client = client_for(operator)
    assert_breadcrumbs(
        client.get(f"{JOBS_URL}overview/").content.decode(), "Home", "Background jobs", "Jobs", "Overview"
    )
    assert_breadcrumbs(
        client.get(f"{JOBS_URL}workers/").content.decode(),
        "Home",
        "Background jobs",
        "Jobs",
        "Overview",
        "Workers",
    )
    confirm = action(client, DEAD_URL, "discard_jobs", [dead.pk])  # discard always confirms first
    assert confirm.templates[0].name == "admin/django_pgjobs/action_confirmation.html"
    assert_breadcrumbs(
        confirm.content.decode(), "Home", "Background jobs", "Dead letters", "Discard (delete) selected jobs"
    )
    # The stock pages, for comparison: the same element on each version.
    nav = breadcrumbs(client.get(JOBS_URL).content.decode())
    assert ("<ol" in nav) == (django.VERSION >= (6, 1))


def test_list_error_cell_is_one_line_with_the_whole_line_as_tooltip(viewer, client_for):
    long = "ConnectionError: " + "x" * 200 + ' <script>"quoted"</script>'
    DeadJobFactory(last_error=long + "\nTraceback line 2")
    html = client_for(viewer).get(DEAD_URL).content.decode()
    cell = re.search(r'<td class="field-error_excerpt">(.*?)</td>', html, re.S)
    assert cell, html
    span = cell.group(1)
    assert span.startswith('<span class="pgjobs-error-excerpt" title="ConnectionError: xxx')
    assert "&lt;script&gt;&quot;quoted&quot;&lt;/script&gt;" in span  # in the title, escaped
    assert "<script>" not in span and "Traceback line 2" not in span
    shown = re.sub(r"<[^>]+>", "", span)
    assert len(shown) == 80 and shown.endswith("…")


def test_overview_shows_live_workers_and_slots_per_queue(viewer, client_for):
    now = timezone.now()

    def registered(name: str, queues: list[str], limits: dict[str, int], concurrency: int, live: bool = True):
        WorkerProcess.objects.create(
            name=name,
            worker_id=name,
            host="h",
            pid=1,
            queues=queues,
            queue_limits=limits,
            concurrency=concurrency,
            version="0",
            started_at=now,
            heartbeat_at=now,
            expires_at=now + dt.timedelta(minutes=1 if live else -1),
        )

    registered("all", [], {}, 4)
    registered("mail", ["mail", "reports"], {"mail": 2}, 8)
    registered("gone", ["mail"], {}, 50, live=False)
    JobFactory(queue="mail")
    JobFactory(queue="billing")
    response = client_for(viewer).get(f"{JOBS_URL}overview/")
    rows = {r.queue: r for r in response.context["rows"]}
    assert list(rows) == ["billing", "mail", "reports"]  # reports: named by a worker, no jobs yet
    assert {q: ([w.name for w in r.workers.workers], r.workers.slots) for q, r in rows.items()} == {
        "billing": (["all"], 4),
        "mail": (["all", "mail"], 6),
        "reports": (["all", "mail"], 12),
    }
    html = response.content.decode()
    assert '<td class="workers" title="all, mail">2 (6 slots)</td>' in html
    assert "Workers (2 live)" in html


def test_overview_draws_both_trends_charts_from_the_finished_jobs(viewer, client_for):
    now = timezone.now()
    JobFactory(done=True, finished_at=now - dt.timedelta(minutes=3))
    DeadJobFactory(finished_at=now - dt.timedelta(hours=5))
    html = client_for(viewer).get(f"{JOBS_URL}overview/").content.decode()
    for chart_id, bars, title in (
        ("pgjobs-chart-minute", 60, "Jobs finished in the last hour, per minute"),
        ("pgjobs-chart-hour", 24, "Jobs finished in the last 24 hours, per hour"),
    ):
        svg = re.search(rf'<svg class="pgjobs-chart" id="{chart_id}".*?</svg>', html, re.S)
        assert svg, chart_id
        assert svg.group(0).count('<g class="pgjobs-bar"') == bars
        assert f'<title id="{chart_id}-title">{title}</title>' in svg.group(0)
    assert "1 done and 1 dead in the last 24 hours, per hour" in html
    assert "1 done and 0 dead in the last hour, per minute" in html
