"""The database goes away and comes back: outcomes are written once it is back (as long as the
leases can still be valid), claim replies lost on the way are not charged, and a locked row does
not hold up the leases of the rest. Workers reach the database through tests/proxy.py."""

from __future__ import annotations

import datetime as dt
import signal
from collections import Counter

import pytest

from django_pgjobs.models import Job
from tests.failure.helpers import FAST
from tests.processes import executions, query, wait_for
from tests.proxy import database_proxy, proxied_env
from tests.testapp import jobs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_outcomes_survive_a_30_second_outage_without_any_job_running_twice(
    workers, clean_executions, report, tmp_path
):
    """0.1 gave an outcome up after 5 tries (about 3 s) and the job ran again, logged as a false
    "rejected by fencing". With a 60 s lease, a 30 s outage must cost no re-run at all."""
    ends = tmp_path / "ends"
    with database_proxy() as proxy:
        batch = [jobs.sleep_then_mark.enqueue(2.0, str(ends)) for _ in range(4)]
        worker = workers("-c", "4", "--poll-interval", "0.2", env=proxied_env(proxy, PGJOBS_TEST_LEASE="60"))
        wait_for(lambda: len(executions("sleep-start")) == 4, 60, "the four jobs to start")
        proxy.down()  # they finish while the database is away: their outcomes cannot be written
        wait_for(lambda: ends.exists() and len(ends.read_text().split()) == 4, 30, "the handlers to return")
        worker.wait_for_log("retrying while their leases can still be valid", timeout=30)
        gone = dt.datetime.now(dt.UTC)
        wait_for(lambda: (dt.datetime.now(dt.UTC) - gone).total_seconds() >= 30, 40, "30 s of outage")
        assert Job.objects.filter(pk__in=[j.id for j in batch], status="running").count() == 4
        proxy.up()
        wait_for(
            lambda: Job.objects.filter(pk__in=[j.id for j in batch], status="done").count() == 4,
            60,
            "the outcomes to be written",
        )
        output = worker.output()
        assert worker.proc.poll() is None, output  # it rode the outage out
    assert len(executions("sleep-start")) == 4  # nothing ran twice
    for job in batch:
        assert [h["outcome"] for h in Job.objects.get(pk=job.id).history] == ["done"]
    assert "rejected by fencing" not in output and "lease lapsed" not in output
    report(f"30 s outage: {proxy.refused} connection attempts refused while down; 4/4 outcomes written after")


def test_a_claim_whose_reply_is_lost_costs_no_attempt(workers, clean_executions):
    """The claim commits, its reply never arrives. 0.1 left the job running until its lease
    lapsed, and a max_attempts=1 job went dead without ever running."""
    with database_proxy() as proxy:
        job = jobs.echo.using(max_attempts=1).enqueue("once")
        proxy.cut_after_claim()
        worker = workers("--poll-interval", "0.2", env=proxied_env(proxy, **FAST))
        wait_for(lambda: Job.objects.get(pk=job.id).status == "done", 30, "the job to run after all")
        assert proxy.cuts == 1
        worker.wait_for_log("a claim failed in flight after it had claimed job(s)", timeout=10)
    stored = Job.objects.get(pk=job.id)
    assert [h["outcome"] for h in stored.history] == ["released", "done"]
    assert stored.history[0]["message"] == "released after a claim whose reply was lost"
    assert (stored.attempts, stored.max_attempts) == (2, 2)  # the lost claim's attempt was given back
    assert len(executions("echo")) == 1


def test_a_row_lock_on_one_running_job_does_not_stop_the_other_leases(workers, clean_executions, pg_connect):
    """A session holds one running job's row lock for longer than a lease; every other job the
    worker runs must keep its lease, and nothing may run twice."""
    batch = [jobs.sleep.enqueue(6.0) for _ in range(3)]
    locked, others = batch[0], batch[1:]
    from tests.failure.helpers import fast_env

    workers("-c", "3", env=fast_env())
    wait_for(lambda: len(executions("sleep-start")) == 3, 60, "the jobs to start")
    blocker = pg_connect()
    blocker.execute("BEGIN")
    blocker.execute("SELECT 1 FROM pgjobs_job WHERE id = %s FOR UPDATE", [locked.id])
    try:
        (held_since,) = blocker.execute("SELECT now()").fetchone()
        beyond = held_since + dt.timedelta(seconds=3.5)  # well past a 2 s lease

        def leases_past() -> bool:
            rows = query(
                "SELECT lease_expires_at FROM pgjobs_job WHERE id = ANY(%s)", [[j.id for j in others]]
            )
            return all(r[0] is not None and r[0] > beyond for r in rows)

        wait_for(leases_past, 20, "the other jobs' leases to be extended past the lock")
    finally:
        blocker.execute("ROLLBACK")
    wait_for(lambda: Job.objects.filter(status="done").count() == 3, 40, "every job to finish")
    runs = Counter(job_id for _, job_id, _, _ in executions("sleep-start"))
    # The other jobs kept their leases: each ran once.
    assert [runs[j.id] for j in others] == [1, 1]
    # The locked row could not be extended for longer than its lease: the sweep may take it back
    # between the unlock and the next beat (a busy machine made it run twice once), and then its
    # history says so. Otherwise it ran once.
    history = [h["outcome"] for h in Job.objects.get(pk=locked.id).history]
    assert runs[locked.id] == 1 + history.count("lease expired"), (runs, history)


def test_a_batch_whose_failure_statement_fails_retries_only_the_failure(
    workers, clean_executions, pg_connect
):
    """Completions and failures are separate statements. When the failure statement of a batch
    fails (here: its row locked by another session past the lock timeout) after the completion
    statement wrote, only the failure is tried again: resent, the written completion would match
    nothing and be logged as a late completion rejected by fencing."""
    first = jobs.waits_for_go.enqueue()  # holds the acknowledger up so the other two share a batch
    done = jobs.waits_for_go.enqueue()
    failed = jobs.waits_for_go.enqueue(fail=True)
    worker = workers("-c", "3", "--poll-interval", "0.2")  # lease 30 s
    wait_for(lambda: len(executions("waits-start")) == 3, 60, "the three jobs to start")

    def lock(job_id: int):
        session = pg_connect()
        session.execute("BEGIN")
        session.execute("SELECT 1 FROM pgjobs_job WHERE id = %s FOR UPDATE", [job_id])
        return session

    def blocks(session) -> bool:
        pid = session.info.backend_pid
        return bool(
            query("SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [pid])[0][0]
        )

    def go(*job_ids: int) -> None:
        for job_id in job_ids:
            query(
                "INSERT INTO test_executions (kind, job_id, value) VALUES ('go', %s, %s) RETURNING id",
                [job_id, job_id],
            )

    first_lock, failed_lock = lock(first.id), lock(failed.id)
    go(first.id)
    wait_for(lambda: blocks(first_lock), 30, "the acknowledger to wait for the first job's row")
    go(done.id, failed.id)
    wait_for(lambda: len(executions("waits-end")) == 3, 30, "the other two handlers to return")
    first_lock.execute("COMMIT")  # their outcomes are queued: now one batch, completion then failure
    wait_for(lambda: Job.objects.get(pk=done.id).status == "done", 30, "the completion to be written")
    worker.wait_for_log("could not write 1 outcome(s)", timeout=30)  # the failure: lock timeout
    failed_lock.execute("COMMIT")
    wait_for(lambda: Job.objects.get(pk=failed.id).status == "scheduled", 30, "the failure to be written")
    for job in (first, done):
        assert [h["outcome"] for h in Job.objects.get(pk=job.id).history] == ["done"]
    stored = Job.objects.get(pk=failed.id)
    assert stored.attempts == 1 and [h["outcome"] for h in stored.history] == ["failed"]
    assert "fails on purpose" in stored.last_error
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
    assert "rejected by fencing" not in worker.output()
    assert "done=2, retry=1, dead=0, cancelled=0, snoozed=0, rejected=0, lost=0" in worker.output()
