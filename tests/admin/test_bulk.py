"""Bulk actions on "all N matching the filter": bounded batches, timed, one log entry; fast counts."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from django_pgjobs.admin.bulk import FastCountPaginator
from django_pgjobs.conf import get_settings
from django_pgjobs.models import Job, Status
from tests.factories import JobFactory

from .conftest import DEAD_URL, JOBS_URL, action, messages_of

pytestmark = pytest.mark.django_db


def insert_dead_jobs(n: int, queue: str = "bulk") -> None:
    """Test data only: n dead rows as the manager leaves them, in one INSERT (factories are too slow)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO pgjobs_job (task, queue, payload, status, attempts, max_attempts, run_at,
                                    last_error, finished_at, history)
            SELECT 'tests.always_fails', %s, '{"args": [], "kwargs": {}}', 'dead', 3, 3, now(),
                   'ValueError: this handler always fails', now() - (g || ' seconds')::interval,
                   jsonb_build_array(jsonb_build_object('attempt', 3, 'outcome', 'failed',
                                     'error_class', 'ValueError', 'traceback', 'Traceback ...'))
            FROM generate_series(1, %s) AS g
            """,
            [queue, n],
        )
        cursor.execute("ANALYZE pgjobs_job")


@pytest.fixture
def batch_spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the size of each manager call (the real method still runs against the database)."""
    sizes: list[int] = []
    real = Job.objects.retry

    def retry(ids: Any, **kwargs: Any) -> list[int]:
        ids = list(ids)
        sizes.append(len(ids))
        return real(ids, **kwargs)

    monkeypatch.setattr(Job.objects, "retry", retry)
    return sizes


def bulk_retry_all_dead(client: Any, n: int) -> float:
    first = Job.objects.filter(status=Status.DEAD).order_by("-pk").values_list("pk", flat=True)[0]
    page = action(client, DEAD_URL, "retry_jobs", [first], select_across=True, query="?queue=bulk")
    assert f'id="pgjobs-confirm-count">{n}<' in page.content.decode()
    started = time.perf_counter()
    response = action(
        client, DEAD_URL, "retry_jobs", [first], select_across=True, confirm=True, query="?queue=bulk"
    )
    elapsed = time.perf_counter() - started
    assert f"Retried {n} jobs." in messages_of(response)
    return elapsed


def test_bulk_retry_of_20000_dead_jobs_in_bounded_batches(operator, client_for, batch_spy, report):
    n = 20_000
    insert_dead_jobs(n)
    JobFactory(running=True, queue="bulk")  # not dead: never in the dead-letter selection anyway
    elapsed = bulk_retry_all_dead(client_for(operator), n)
    report(f"\nbulk retry of {n} dead jobs via the admin (select across + confirm): {elapsed:.2f} s")
    size = get_settings().BATCH_SIZE
    assert sum(batch_spy) == n
    assert max(batch_spy) <= size and len(batch_spy) == n // size
    assert Job.objects.filter(status=Status.DEAD).count() == 0
    assert (
        Job.objects.filter(status=Status.READY, max_attempts=F("attempts") + 3).count() == n
    )  # the handler's budget
    entry = LogEntry.objects.get()
    assert (
        entry.change_message.startswith(f"Retried {n} jobs: #") and "and 19950 more" in entry.change_message
    )
    assert entry.object_repr == f"{n} jobs"


@pytest.mark.slow
def test_bulk_retry_of_100000_dead_jobs(operator, client_for, batch_spy, report):
    n = 100_000
    insert_dead_jobs(n)
    elapsed = bulk_retry_all_dead(client_for(operator), n)
    report(f"\nbulk retry of {n} dead jobs via the admin (select across + confirm): {elapsed:.2f} s")
    assert max(batch_spy) <= get_settings().BATCH_SIZE
    assert Job.objects.filter(status=Status.READY).count() == n


def test_select_across_skips_running_jobs_and_counts_them(operator, client_for):
    ready = JobFactory.create_batch(3, queue="q")
    running = JobFactory.create_batch(2, running=True, queue="q")
    client = client_for(operator)
    page = action(client, JOBS_URL, "cancel_jobs", [ready[0].pk], select_across=True, query="?queue=q")
    assert "2 of them are running and will be asked to stop" in page.content.decode()
    response = action(
        client, JOBS_URL, "cancel_jobs", [ready[0].pk], select_across=True, confirm=True, query="?queue=q"
    )
    msgs = messages_of(response)
    assert "Cancelled 3 jobs." in msgs
    assert "2 running jobs were asked to stop (their workers end them as cancelled)." in msgs
    assert all(Job.objects.get(pk=j.pk).status == Status.RUNNING for j in running)
    assert all(Job.objects.get(pk=j.pk).cancel_requested_at for j in running)
    page = action(client, JOBS_URL, "retry_jobs", [ready[0].pk], select_across=True, query="?queue=q")
    assert "2 of them are running and will be skipped" in page.content.decode()


def test_changelist_never_runs_a_full_count(operator, client_for, monkeypatch):
    monkeypatch.setattr(FastCountPaginator, "exact_limit", 50)
    insert_dead_jobs(300, queue="many")
    client = client_for(operator)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(JOBS_URL)
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counts and all("LIMIT 51" in sql for sql in counts), counts
    assert response.context["cl"].full_result_count is None  # show_full_result_count = False
    assert response.context["cl"].result_count >= 51  # planner estimate beyond the exact limit
    with CaptureQueriesContext(connection) as queries:
        response = client.get(JOBS_URL + "?status__exact=dead&queue=many")
    assert all("LIMIT 51" in q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper())
    assert len(response.context["cl"].result_list) == 100


def test_small_lists_count_exactly(operator, client_for):
    JobFactory.create_batch(7)
    response = client_for(operator).get(JOBS_URL)
    assert response.context["cl"].result_count == 7
