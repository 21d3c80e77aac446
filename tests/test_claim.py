"""Claim: what becomes running, in which order, with which lease; and real concurrent claimers."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.test import override_settings

from django_pgjobs import store as sql
from django_pgjobs.models import Job
from tests.factories import JobFactory
from tests.helpers import db_now, past

pytestmark = pytest.mark.django_db


def test_claim_marks_the_job_running_with_a_lease_and_a_fresh_token():
    job = JobFactory(run_at=past(), finished_at=past(), payload={"args": [1], "kwargs": {"k": "v"}})
    (claimed,) = Job.objects.claim(["default"], "w1", lease=45)

    now = db_now()
    stored = Job.objects.get(pk=job.pk)
    assert claimed.id == job.pk
    assert (stored.status, stored.attempts, stored.locked_by) == ("running", 1, "w1")
    assert stored.locked_at == now and stored.started_at == now
    assert stored.lease_expires_at == now + dt.timedelta(seconds=45)
    assert stored.finished_at is None
    assert stored.claim_token == claimed.token is not None
    # What the claim hands back is what a worker needs to run and fence the job.
    assert (claimed.attempt, claimed.max_attempts, claimed.task, claimed.args, claimed.kwargs) == (
        1,
        5,
        job.task,
        [1],
        {"k": "v"},
    )


def test_every_claim_of_a_job_gets_a_token_never_seen_before():
    job = JobFactory(run_at=past())
    tokens = []
    for _ in range(3):
        (claimed,) = Job.objects.claim(None, "w1")
        tokens.append(claimed.token)
        Job.objects.release([(claimed.id, claimed.token)])
    assert len(set(tokens)) == 3
    assert Job.objects.get(pk=job.pk).attempts == 3  # attempt numbers do not repeat either


@override_settings(PGJOBS={"LEASE_SECONDS": 12.5})
def test_claim_uses_the_configured_lease_by_default():
    JobFactory(run_at=past())
    (claimed,) = Job.objects.claim(None, "w1")
    assert Job.objects.get(pk=claimed.id).lease_expires_at == db_now() + dt.timedelta(seconds=12.5)


def test_claim_skips_jobs_that_are_not_due_or_not_ready():
    JobFactory(delayed=True)
    JobFactory(running=True, run_at=past())
    JobFactory(done=True, run_at=past())
    JobFactory(dead=True, run_at=past())
    JobFactory(expired=True, run_at=past())
    assert Job.objects.claim(None, "w1", limit=10) == []
    assert Job.objects.claim(["default"], "w1", limit=10) == []


def test_claim_counts_attempts_across_claims():
    job = JobFactory(run_at=past(), attempts=2)
    (claimed,) = Job.objects.claim(None, "w1")
    assert claimed.id == job.pk and claimed.attempt == 3


def test_claim_filters_by_queue():
    mail = JobFactory(queue="mail", run_at=past())
    JobFactory(queue="sms", run_at=past())
    assert [j.id for j in Job.objects.claim(["mail"], "w1", limit=5)] == [mail.pk]
    assert Job.objects.claim(["mail"], "w1", limit=5) == []
    assert Job.objects.claim(["nothing-here"], "w1", limit=5) == []
    assert len(Job.objects.claim(None, "w1", limit=5)) == 1  # the sms job


def test_claim_order_is_higher_priority_then_run_at_then_id():
    a = JobFactory(priority=0, run_at=past(100))
    b = JobFactory(priority=1, run_at=past(10))
    c = JobFactory(priority=0, run_at=past(200))
    d = JobFactory(priority=0, run_at=c.run_at)  # same run_at as c: id breaks the tie
    e = JobFactory(priority=-5, run_at=past(1000))
    for queues in (None, ["default"], ["default", "other"]):
        claimed = Job.objects.claim(queues, "w1", limit=10)
        assert [j.id for j in claimed] == [b.pk, c.pk, d.pk, a.pk, e.pk], queues
        Job.objects.release([(j.id, j.token) for j in claimed])


def test_claim_takes_at_most_limit_rows():
    jobs = [JobFactory(run_at=past(100 - i)) for i in range(5)]
    claimed = Job.objects.claim(["default"], "w1", limit=2)
    assert [j.id for j in claimed] == [jobs[0].pk, jobs[1].pk]
    assert Job.objects.filter(status="running").count() == 2
    assert Job.objects.filter(status="ready").count() == 3


def test_claim_over_several_queues_takes_at_most_limit_in_all_by_priority_across_queues():
    a = [JobFactory(queue="a", priority=0, run_at=past(100 + i)) for i in range(3)]
    b = [JobFactory(queue="b", priority=5, run_at=past(i)) for i in range(3)]
    # Queue "a" is listed first and its jobs are older, but "b"'s run first: higher priority.
    claimed = Job.objects.claim(["a", "b"], "w1", limit=4)
    assert [j.id for j in claimed] == [b[2].pk, b[1].pk, b[0].pk, a[2].pk]
    assert Job.objects.filter(status="running").count() == 4


def test_claim_quotas_cap_each_queue():
    for i in range(4):
        JobFactory(queue="mail", priority=9, run_at=past(i))
        JobFactory(queue="hooks", run_at=past(i))
    claimed = Job.objects.claim(["mail", "hooks"], "w1", limit=6, quotas={"mail": 1, "hooks": 8})
    assert sorted(j.queue for j in claimed) == ["hooks"] * 4 + ["mail"]
    assert Job.objects.claim(["mail"], "w1", limit=6, quotas={"mail": 0}) == []
    assert len(Job.objects.claim(["mail"], "w1", limit=6, quotas={"mail": 2})) == 2


@pytest.mark.parametrize("limit", [0, -1])
def test_claim_with_no_capacity_claims_nothing(limit):
    JobFactory(run_at=past())
    assert Job.objects.claim(None, "w1", limit=limit) == []
    assert Job.objects.filter(status="ready").count() == 1


# -- concurrency: real separate sessions ---------------------------------------------------------
def _race(pg_connect, n: int, statement: str, params_for) -> list[list[tuple]]:
    """Run ``statement`` from ``n`` separate connections released together by a barrier."""
    conns = [pg_connect() for _ in range(n)]
    barrier = threading.Barrier(n, timeout=30)
    results: list = [None] * n

    def claim(i: int) -> None:
        try:
            barrier.wait()
            results[i] = conns[i].execute(statement, params_for(i)).fetchall()
        except BaseException as exc:  # reported by the caller's assertion
            results[i] = exc

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert [r for r in results if isinstance(r, BaseException)] == []
    return results


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("statement", ["CLAIM_QUEUE", "CLAIM_ANY"])
def test_ten_connections_race_for_one_job_and_exactly_one_wins(pg_connect, statement):
    for round_ in range(5):
        job, _ = Job.objects.enqueue("tests.noop", queue="race", delay=0)
        results = _race(
            pg_connect,
            10,
            getattr(sql, statement),
            lambda i: {"queue": "race", "worker": f"w{i}", "limit": 1, "lease": 30.0},
        )
        winners = [i for i, rows in enumerate(results) if rows]
        assert len(winners) == 1, f"round {round_}: {winners}"
        rows = results[winners[0]]
        assert len(rows) == 1 and rows[0][0] == job.pk
        stored = Job.objects.get(pk=job.pk)
        assert (stored.status, stored.attempts, stored.locked_by) == ("running", 1, f"w{winners[0]}")


@pytest.mark.django_db(transaction=True)
def test_concurrent_batch_claims_never_share_a_job(pg_connect):
    ids = {Job.objects.enqueue("tests.noop", queue="batch")[0].pk for _ in range(25)}
    results = _race(
        pg_connect,
        10,
        sql.CLAIM_QUEUE,
        lambda i: {"queue": "batch", "worker": f"w{i}", "limit": 3, "lease": 30.0},
    )
    claimed = [(row[0], i) for i, rows in enumerate(results) for row in rows]
    claimed_ids = [job_id for job_id, _ in claimed]
    assert len(claimed_ids) == len(set(claimed_ids))  # nobody got a job twice
    assert all(len(rows) <= 3 for rows in results)
    assert set(claimed_ids) <= ids
    for job_id, worker in claimed:
        stored = Job.objects.get(pk=job_id)
        assert (stored.status, stored.locked_by, stored.attempts) == ("running", f"w{worker}", 1)
    assert Job.objects.filter(status="running").count() == len(claimed_ids)
    assert Job.objects.filter(status="ready").count() == 25 - len(claimed_ids)
