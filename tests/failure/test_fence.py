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
from tests.processes import executions, query, wait_for
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
