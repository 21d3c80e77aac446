"""The fence never repeats: late writes from an earlier claim of a job are refused, whatever its
worker id and attempt number; and a duplicate enqueue never holds up a worker's heartbeat.

Real worker processes with a 2 s lease (tests/failure/helpers.FAST)."""

from __future__ import annotations

import datetime as dt
import json
import signal

import pytest
from django.db import connection, transaction

from django_pgjobs.models import Job
from tests.failure.helpers import fast_env
from tests.processes import executions, hold_claimed_ahead, query, release_long_lease, wait_for
from tests.testapp import jobs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _row(job_id: int) -> tuple:
    status, attempts, token, result = query(
        "SELECT status, attempts, claim_token, result FROM pgjobs_job WHERE id = %s", [job_id]
    )[0]
    return status, attempts, token, None if result is None else json.loads(result)


def test_a_retried_job_is_not_finished_by_the_late_run_it_replaced(workers, clean_executions):
    """Attempt 1 overruns its timeout and is abandoned; its lease lapses and the sweep makes it dead
    (max_attempts=1); an operator retries it and the same worker runs attempt 2. When attempt 1's
    handler finally returns, its completion must change nothing: attempt 2 is still running."""
    job = jobs.overrun_once.enqueue()
    worker = workers("--worker-id", "w-1", env=fast_env())
    wait_for(lambda: executions("overrun-once-start"), 60, "attempt 1 to start")
    wait_for(lambda: _row(job.id)[0] == "dead", 30, "the abandoned attempt's lease to be swept")
    assert Job.objects.retry([job.id], by="operator") == [job.id]
    # The same worker claims it again (attempt 2); attempt 1's handler then returns.
    worker.wait_for_log("late completion rejected by fencing", timeout=30)
    assert [e[2] for e in executions("overrun-once-end")] == ["1"]  # attempt 1 is the one that ended
    status, attempts, token, result = _row(job.id)
    assert (status, attempts, result) == ("running", 2, None)  # untouched: attempt 2 still holds it
    assert token == query("SELECT claim_token FROM pgjobs_job WHERE id = %s", [job.id])[0][0]

    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO test_executions (kind, value) VALUES ('go', '2')")
    wait_for(lambda: _row(job.id)[0] == "done", 40, "attempt 2 to finish")
    assert _row(job.id)[3]["attempt"] == 2  # the outcome is the run that held the job


def test_two_processes_with_one_worker_id_cannot_finish_each_others_claims(workers, clean_executions):
    """``--worker-id pod-0`` twice (a restarted container, a copy-pasted unit). The first is frozen
    with the job; the second sweeps it (dead: max_attempts=1), it is retried and the second runs it.
    The first, thawed, finishes its stale run: refused, the second's run is the outcome."""
    job = jobs.two_runs.enqueue(first=4.0, then=8.0)
    first = workers("--worker-id", "pod-0", env=fast_env())
    wait_for(lambda: executions("two-runs-start"), 60, "the first process to start the job")
    first.signal(signal.SIGSTOP)
    try:
        second = workers("--worker-id", "pod-0", env=fast_env())
        wait_for(lambda: _row(job.id)[0] == "dead", 30, "the frozen process's lease to be swept")
        assert Job.objects.retry([job.id]) == [job.id]
        wait_for(lambda: len(executions("two-runs-start")) == 2, 30, "the second process to run it")
        status, attempts, token, _ = _row(job.id)
        assert (status, attempts) == ("running", 2)
        # One --worker-id, two incarnations: the claim names the second.
        (holder,) = query("SELECT locked_by FROM pgjobs_job WHERE id = %s", [job.id])[0]
        assert holder.startswith("pod-0#") and holder in second.output()
    finally:
        first.signal(signal.SIGCONT)
    first.wait_for_log("late completion rejected by fencing", timeout=30)
    assert _row(job.id) == ("running", 2, token, None)
    wait_for(lambda: _row(job.id)[0] == "done", 40, "the second run to finish")
    assert _row(job.id)[3] == {"attempt": 2, "pid": second.pid}
    assert second.proc.poll() is None and "late completion" not in second.output()


def test_a_duplicate_enqueue_held_in_an_open_transaction_does_not_stop_heartbeats(workers, clean_executions):
    """A view re-enqueues the key of a running job inside atomic() and then takes long. The
    duplicate must not row-lock the job: the worker keeps extending that job's lease and every
    other one's, and nothing runs twice."""
    keyed = jobs.sleep.using(idempotency_key="report:7").enqueue(6.0)
    other = jobs.sleep.enqueue(6.0)
    workers("-c", "2", env=fast_env())
    wait_for(lambda: len(executions("sleep-start")) == 2, 60, "both jobs to start")

    def lease(job_id: int):
        return query("SELECT lease_expires_at FROM pgjobs_job WHERE id = %s", [job_id])[0][0]

    with transaction.atomic():
        again = jobs.sleep.using(idempotency_key="report:7").enqueue(6.0)
        assert (again.id, again.created) == (keyed.id, False)
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement_timestamp()")
            (held_since,) = cursor.fetchone()
        # Held open for more than a whole lease (2 s) past this point: both leases must have been
        # extended beyond it, i.e. heartbeats kept succeeding while this transaction was open.
        beyond = held_since + dt.timedelta(seconds=3.5)
        wait_for(lambda: lease(keyed.id) > beyond and lease(other.id) > beyond, 20, "leases past 3.5 s")
    wait_for(lambda: Job.objects.filter(status="done").count() == 2, 30, "both jobs to finish")
    assert len(executions("sleep-start")) == 2  # nothing ran twice
    for job in (keyed, other):
        assert [h["outcome"] for h in Job.objects.get(pk=job.id).history] == ["done"]


def test_claimed_ahead_jobs_lost_while_frozen_are_forgotten_not_run(workers, clean_executions):
    """A worker frozen (SIGSTOP) past its lease holds jobs claimed ahead of its one executor; the
    sweeper gives them to another worker, which runs them. Thawed, the first learns at its next
    heartbeat that it lost them: it must drop them, not start them once its executor is free."""
    first = workers("-c", "1", env=fast_env())
    blocker, held = hold_claimed_ahead(first)  # the blocker has a lease of 30 s: it stays first's
    first.signal(signal.SIGSTOP)
    try:
        second = workers("-c", "2", env=fast_env())
        wait_for(
            lambda: Job.objects.filter(pk__in=[j.id for j in held], status="done").count() == len(held),
            60,
            "the second worker to run the claimed-ahead jobs",
        )
    finally:
        first.signal(signal.SIGCONT)
    first.wait_for_log("lost the lease of", timeout=30)
    release_long_lease(blocker.id)
    wait_for(lambda: Job.objects.get(pk=blocker.id).status == "done", 30, "the blocker to finish")
    first.signal(signal.SIGTERM)
    assert first.wait(30) == 0, first.output()
    ran = [(job_id, pid) for _, job_id, _, pid in executions("echo")]
    assert [job_id for job_id, pid in ran if pid == first.pid] == [], first.output()
    held_ids = [j.id for j in held]
    assert sorted(job_id for job_id, pid in ran if job_id in held_ids and pid == second.pid) == held_ids
    assert len([job_id for job_id, _ in ran if job_id in held_ids]) == len(held_ids)  # each ran once
    assert "forgotten here, never run by this process" in first.output()
    assert "late completion rejected by fencing" not in first.output()
