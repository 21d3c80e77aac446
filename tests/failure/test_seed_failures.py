"""The seed's five failure tests, with real ``runjobs`` processes and a real PostgreSQL.

Executions are counted through the side-effect table the handlers write (``test_executions``),
never through the worker's own bookkeeping.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import signal
import subprocess
import sys
from collections import Counter

import pytest

from django_pgjobs.models import Job
from django_pgjobs.retry import ExponentialBackoff
from tests.failure.helpers import START_LOCK, fast_env
from tests.processes import ROOT, executions, query, wait_for
from tests.testapp import jobs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("clean_executions")]


def status_of(job_id: int) -> str:
    return Job.objects.get(pk=job_id).status


# -- 1 --------------------------------------------------------------------------------------------
def test_1_ten_workers_one_job_runs_exactly_once(workers):
    env = fast_env()
    procs = [workers("--poll-interval", "0.2", env=env) for _ in range(10)]
    for p in procs:  # all ten idle and listening: the enqueue wakes every one of them at once
        p.wait_for_log("listening for notifications", timeout=120)
    job = jobs.echo.enqueue("only once")
    wait_for(lambda: status_of(job.id) == "done", 30, "the job to finish")
    # Then a burst that all ten race for.
    burst = [jobs.echo.enqueue(i).id for i in range(200)]
    wait_for(
        lambda: Job.objects.filter(pk__in=burst, status="done").count() == 200, 60, "the burst to finish"
    )
    job.refresh_from_db()
    assert job.attempts == 1 and [h["outcome"] for h in job.history] == ["done"]
    runs = Counter(job_id for _, job_id, _, _ in executions("echo"))
    assert runs[job.id] == 1
    assert all(runs[i] == 1 for i in burst), {i: runs[i] for i in burst if runs[i] != 1}
    assert set(Job.objects.filter(pk__in=burst).values_list("attempts", flat=True)) == {1}
    pids = {pid for _, _, _, pid in executions("echo")}
    print(f"ten workers: 1 + 200 jobs, each ran once, spread over {len(pids)} worker processes")
    assert all(p.proc.poll() is None for p in procs)


# -- 2 --------------------------------------------------------------------------------------------
def test_2_sigkill_after_claim_job_is_recovered_and_completed_elsewhere(workers):
    env = fast_env()
    job = jobs.slow_first.enqueue(first=120)
    victim = workers("--worker-id", "victim", env=env)
    wait_for(lambda: executions("slow-start"), 60, "the victim to start the job")
    victim.kill()  # SIGKILL: no release, no ack, nothing
    assert status_of(job.id) == "running"
    rescuer = workers("--worker-id", "rescuer", env=env)
    wait_for(lambda: status_of(job.id) == "done", 60, "another worker to finish the job")
    job.refresh_from_db()
    assert job.attempts == 2
    # A worker name is its --worker-id and, after "#", its process incarnation.
    assert [(h["outcome"], h["worker"].split("#")[0], h["attempt"]) for h in job.history] == [
        ("lease expired", "victim", 1),
        ("done", "rescuer", 2),
    ]
    assert job.result == {"attempt": 2, "pid": rescuer.pid}
    assert [v for _, _, v, _ in executions("slow-start")] == ["1", "2"]
    assert [v for _, _, v, _ in executions("slow-end")] == ["2"]
    assert "swept expired leases: 1 back to ready" in rescuer.output()


# -- 3 --------------------------------------------------------------------------------------------
def test_3_same_idempotency_key_enqueued_concurrently_from_processes_is_one_row(pg_connect):
    processes, keys = 6, 25
    gate = pg_connect()
    gate.execute("SELECT pg_advisory_lock(%s)", [START_LOCK])  # the start line
    env = fast_env()
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.failure.helpers", "race", str(keys)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    try:
        # Every child connected and queued on the lock: release them all at once.
        wait_for(
            lambda: (
                gate.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s "
                    "AND NOT granted",
                    [START_LOCK],
                ).fetchone()[0]
                == processes
            ),
            120,
            "every enqueuer at the start line",
        )
        gate.execute("SELECT pg_advisory_unlock(%s)", [START_LOCK])
        answers = []
        for child in children:
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
            answers.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    for i in range(keys):
        key = f"race:{i}"
        assert query("SELECT count(*) FROM pgjobs_job WHERE idempotency_key = %s", [key])[0][0] == 1
        ids = {a[key][0] for a in answers}
        creators = sum(1 for a in answers if a[key][1])
        assert len(ids) == 1, (key, ids)  # every caller got the same row back
        assert creators == 1, (key, creators)  # exactly one learned it created it
    assert Job.objects.count() == keys


# -- 4 --------------------------------------------------------------------------------------------
def test_4_always_failing_job_backs_off_exponentially_then_goes_dead(workers):
    policy = ExponentialBackoff(base=2.0, cap=3600.0, jitter=0.2)  # tests.backoff_fails's policy
    job = jobs.backoff_fails.enqueue()
    workers("--poll-interval", "0.1", env=fast_env())
    delays: list[float] = []
    first_run_at = None
    for attempt in range(1, 5):
        row = wait_for(
            lambda attempt=attempt: Job.objects.filter(
                pk=job.id, status="scheduled", attempts=attempt
            ).first(),
            60,
            f"failure {attempt} to be recorded",
        )
        # run_at and updated_at are written by one statement with one now(): their gap is exactly
        # the delay the worker stored.
        delay = (row.run_at - row.updated_at).total_seconds()
        low, high = policy.bounds(attempt)
        assert low <= delay <= high, (attempt, delay, (low, high))
        delays.append(delay)
        if attempt == 1:
            first_run_at = row.run_at  # let the first retry wait for its run_at, for real
        else:
            assert Job.objects.run_now([job.id]) == [job.id]  # skip the longer waits
    wait_for(lambda: status_of(job.id) == "dead", 60, "the job to go dead")
    job.refresh_from_db()
    assert delays == sorted(delays) and all(b / a > 1.3 for a, b in itertools.pairwise(delays))
    second_start = dt.datetime.fromisoformat(job.history[1]["started_at"])
    assert second_start >= first_run_at, "the retry ran before its stored run_at"
    assert job.attempts == 5 == job.max_attempts
    assert job.last_error == "ConnectionError: downstream is down"
    assert [h["attempt"] for h in job.history] == [1, 2, 3, 4, 5]
    assert all(h["outcome"] == "failed" and h["error_class"] == "ConnectionError" for h in job.history)
    assert all("downstream is down" in h["traceback"] for h in job.history)
    print("stored retry delays (s):", [round(d, 2) for d in delays])


# -- 5 --------------------------------------------------------------------------------------------
def test_5a_slow_job_past_the_lease_is_kept_by_a_live_worker(workers):
    env = fast_env()  # lease 2 s; the job runs 5 s
    job = jobs.slow_first.enqueue(first=5.0)
    runner = workers("--worker-id", "runner", env=env)
    wait_for(lambda: executions("slow-start"), 60, "the job to start")
    other = workers("--worker-id", "other", env=env)  # sweeps every 0.5 s while the job runs
    other.wait_for_log("listening for notifications", timeout=60)
    wait_for(lambda: status_of(job.id) == "done", 60, "the slow job to finish")
    job.refresh_from_db()
    assert job.attempts == 1
    assert [(h["outcome"], h["worker"].split("#")[0]) for h in job.history] == [("done", "runner")]
    assert (job.finished_at - job.started_at).total_seconds() >= 5.0 > 2.0  # outlived its lease
    assert len(executions("slow-start")) == 1 and len(executions("slow-end")) == 1
    assert "swept expired leases" not in other.output() + runner.output()
    assert "rejected by fencing" not in runner.output()


def test_5b_frozen_worker_loses_the_job_and_its_late_completion_is_fenced(workers):
    env = fast_env()
    job = jobs.slow_first.enqueue(first=6.0)
    frozen = workers("--worker-id", "frozen", env=env)
    wait_for(lambda: executions("slow-start"), 60, "the job to start")
    os.kill(frozen.pid, signal.SIGSTOP)  # alive but silent: no heartbeat, no ack
    try:
        rescuer = workers("--worker-id", "rescuer", env=env)
        wait_for(lambda: status_of(job.id) == "done", 60, "the rescuer to finish the job")
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    job.refresh_from_db()
    final = (job.status, job.attempts, job.result, job.finished_at, job.history)
    assert job.result == {"attempt": 2, "pid": rescuer.pid}
    assert [(h["outcome"], h["worker"].split("#")[0], h["attempt"]) for h in job.history] == [
        ("lease expired", "frozen", 1),
        ("done", "rescuer", 2),
    ]
    # The frozen worker wakes up, finishes its (stale) run and tries to complete it: refused.
    frozen.wait_for_log("late completion rejected by fencing", timeout=60)
    assert f"job {job.id} tests.slow_first queue=default attempt=1" in frozen.output()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.result, job.finished_at, job.history) == final
    assert [v for _, _, v, _ in executions("slow-end")] == ["2", "1"]  # the late run did finish
    assert frozen.proc.poll() is None  # and the worker carries on
