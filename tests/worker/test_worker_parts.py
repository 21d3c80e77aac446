"""Worker v2 behaviours with real processes: per-queue limits and priority across queues, burst
ends only when nothing is unwritten, leftovers of handlers (threads, transactions) are cleaned up."""

from __future__ import annotations

import itertools

import pytest

from django_pgjobs.models import Job
from tests.processes import executions, query
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)


def _max_overlap(intervals: list[tuple]) -> int:
    events = sorted(
        itertools.chain.from_iterable(((a, 1), (b, -1)) for a, b in intervals), key=lambda e: (e[0], e[1])
    )
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def _runs_by_queue() -> dict[str, list[tuple]]:
    rows = query(
        """SELECT j.queue, s.at, e.at FROM test_executions s
           JOIN test_executions e ON e.job_id = s.job_id AND e.kind = 'sleep-end'
           JOIN pgjobs_job j ON j.id = s.job_id
           WHERE s.kind = 'sleep-start'"""
    )
    found: dict[str, list[tuple]] = {}
    for queue, start, end in rows:
        found.setdefault(queue, []).append((start, end))
    return found


def test_per_queue_limits_are_never_exceeded(workers, clean_executions, report):
    for _ in range(10):
        jobs.sleep.using(queue="mail").enqueue(0.3)
        jobs.sleep.using(queue="hooks").enqueue(0.3)
    worker = workers("-q", "mail:2", "-q", "hooks:3", "-c", "8", "--burst")
    assert worker.wait(120) == 0, worker.output()
    runs = _runs_by_queue()
    assert (len(runs["mail"]), len(runs["hooks"])) == (10, 10)
    peaks = {q: _max_overlap(r) for q, r in runs.items()}
    report(f"per-queue limits mail:2 hooks:3 with -c 8: peak overlap {peaks}")
    assert peaks["mail"] <= 2 and peaks["hooks"] <= 3
    assert peaks["mail"] + peaks["hooks"] >= 4  # the limits, not one slot, were the bound
    assert "queues=mail:2,hooks:3" in worker.output()


def test_several_queues_are_claimed_by_priority_across_them(workers, clean_executions):
    low = [jobs.echo.using(queue="a").enqueue(f"a{i}") for i in range(3)]
    high = [jobs.echo.using(queue="b", priority=5).enqueue(f"b{i}") for i in range(3)]
    worker = workers("-q", "a", "-q", "b", "--burst")
    assert worker.wait() == 0, worker.output()
    order = [job_id for _, job_id, _, _ in executions("echo")]
    assert order[:3] == [j.id for j in high] and sorted(order[3:]) == [j.id for j in low]


def test_burst_exits_only_after_an_immediate_retry_has_run(workers, clean_executions):
    """0.1 could exit while a failure was being written: the claim in between found nothing and
    the job was left ready. Ten times over, every retry must run before the worker exits."""
    for _ in range(10):
        job = jobs.flaky.enqueue(succeed_on=2)
        worker = workers("--burst")
        assert worker.wait() == 0, worker.output()
        assert Job.objects.get(pk=job.id).status == "done"


@pytest.mark.parametrize("kind, name", [("thread", "handler-leftover"), ("pool", "handler-pool")])
def test_a_handlers_leftover_thread_does_not_keep_a_stopped_worker_alive(
    workers, clean_executions, kind, name
):
    jobs.leaves_thread.enqueue(3600.0, kind=kind)
    worker = workers("--burst")
    assert worker.wait(30) == 0, worker.output()
    assert "a handler left 1 thread(s) running" in worker.output() and name in worker.output()


@pytest.mark.parametrize("how", ["autocommit", "atomic"])
def test_a_transaction_a_handler_leaves_open_is_rolled_back_and_the_next_job_runs(
    workers, clean_executions, how
):
    first = jobs.leaves_transaction.enqueue(how)
    second = jobs.echo.enqueue("after")
    worker = workers("--burst", "-c", "1")
    assert worker.wait() == 0, worker.output()
    assert Job.objects.get(pk=first.id).status == "done"
    assert Job.objects.get(pk=second.id).status == "done"
    assert executions("uncommitted") == []  # rolled back, not committed by the next job
    assert f"job {first.id} tests.leaves_transaction left" in worker.output()
