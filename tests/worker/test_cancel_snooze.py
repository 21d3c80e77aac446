"""Cancelling running jobs and snoozing, with real worker processes."""

from __future__ import annotations

import datetime as dt
import json
import signal
import time
from pathlib import Path

import pytest

from django_pgjobs.models import Job
from tests.processes import executions, hold_claimed_ahead, query, release_long_lease, wait_for, worker_env
from tests.testapp import jobs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("clean_executions")]

#: Short lease and heartbeat, so the "learned at the next heartbeat" paths are quick too.
FAST = {"PGJOBS_TEST_LEASE": "3", "PGJOBS_TEST_HEARTBEAT": "1", "PGJOBS_TEST_SWEEP_INTERVAL": "0.5"}


def started(kind: str, job_id: int) -> bool:
    return any(j == job_id for _, j, _, _ in executions(kind))


def final(job_id: int, timeout: float = 30) -> Job:
    wait_for(
        lambda: Job.objects.get(pk=job_id).status in ("done", "dead", "cancelled"), timeout, "a final state"
    )
    return Job.objects.get(pk=job_id)


@pytest.mark.parametrize("listen", [True, False], ids=["notified", "next-heartbeat"])
def test_cancelling_a_cooperative_running_job_ends_it_within_3_seconds(workers, listen):
    job = jobs.cooperative.enqueue()
    args = ("--concurrency", "2", "--poll-interval", "0.2") + (() if listen else ("--no-listen",))
    worker = workers(*args, env=worker_env(**FAST))
    wait_for(lambda: started("cooperative-start", job.id), 30, "the job to start")
    if listen:
        worker.wait_for_log("listening for notifications", timeout=30)
    asked = time.monotonic()
    assert Job.objects.cancel([job.id], by="alice") == [job.id]
    stored = final(job.id, timeout=10)
    took = time.monotonic() - asked
    assert took < 3, f"cancel took {took:.2f}s"
    assert stored.status == "cancelled" and stored.attempts == 1
    assert stored.last_error.startswith("cancelled by alice")
    assert stored.history[-1]["outcome"] == "cancelled"
    assert stored.history[-1]["error_class"] == "django_pgjobs.exceptions.JobCancelled"
    # Never retried: the worker goes on with other work, and the job stays cancelled.
    other = jobs.echo.enqueue("after")
    assert final(other.id).status == "done"
    assert Job.objects.get(pk=job.id).status == "cancelled"
    print(f"cooperative cancel ({'listen' if listen else 'heartbeat'}): {took * 1000:.0f} ms")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()


def test_an_async_handlers_task_is_cancelled(workers):
    job = jobs.async_cooperative.enqueue()
    workers("--poll-interval", "0.2", env=worker_env(**FAST))
    wait_for(lambda: started("async-start", job.id), 30, "the async job to start")
    Job.objects.cancel([job.id], by="bob")
    stored = final(job.id, timeout=10)
    assert stored.status == "cancelled" and stored.last_error.startswith("cancelled by bob")
    assert "JobCancelled" in stored.history[-1]["error_class"]


def test_a_claimed_ahead_job_asked_to_stop_ends_cancelled_without_running(workers):
    """A job claimed ahead, waiting behind a running one, is asked to stop: once the executor is
    free it must end cancelled without its handler being called."""
    worker = workers("-c", "1", "--poll-interval", "0.2", env=worker_env(**FAST))
    blocker, (waiting, *_) = hold_claimed_ahead(worker, followers=1)
    assert Job.objects.cancel([waiting.id], by="erin") == [waiting.id]
    worker.wait_for_log(f"job {waiting.id} tests.echo was asked to stop by erin", timeout=10)
    release_long_lease(blocker.id)
    stored = final(waiting.id)
    assert stored.status == "cancelled" and stored.result is None
    assert executions("echo") == []  # the handler never ran
    assert stored.last_error.startswith("cancelled by erin")
    assert stored.history[-1]["outcome"] == "cancelled"
    assert stored.history[-1]["error_class"] == "django_pgjobs.exceptions.JobCancelled"
    assert f"job {waiting.id} tests.echo was asked to stop by erin before it started" in worker.output()
    assert final(blocker.id).status == "done"
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()


def test_a_handler_that_ignores_the_request_runs_to_its_end_and_ends_cancelled(workers, tmp_path):
    go = tmp_path / "go"
    job = jobs.ignores_cancel.enqueue(str(go))
    workers("--poll-interval", "0.2", env=worker_env(**FAST))
    wait_for(lambda: started("ignores-start", job.id), 30, "the job to start")
    Job.objects.cancel([job.id], by="carol")
    # The worker learned of it (the handler can see it), but the handler does not look.
    wait_for(lambda: query("SELECT cancel_requested_by FROM pgjobs_job WHERE id = %s", [job.id])[0][0], 10)
    go.write_text("now")
    stored = final(job.id, timeout=20)
    assert stored.status == "cancelled"
    assert stored.result.startswith("saw cancel request:")
    assert stored.last_error == "cancelled by carol (after finishing)"
    assert stored.history[-1]["outcome"] == "cancelled after finishing"


def test_cancelling_a_job_whose_worker_was_sigkilled_goes_through_the_sweep(workers):
    job = jobs.cooperative.enqueue()
    victim = workers("--no-listen", "--poll-interval", "0.2", env=worker_env(**FAST))
    wait_for(lambda: started("cooperative-start", job.id), 30, "the job to start")
    victim.kill()
    Job.objects.cancel([job.id], by="dave")
    assert Job.objects.get(pk=job.id).status == "running"  # nobody can stop it now: the sweep will
    out = wait_for(
        lambda: (lambda o: o if "cancelled (asked to stop)" in o else None)(_sweepjobs()),
        30,
        "the sweep to cancel the job",
    )
    assert "expired leases: 0 back to ready, 0 dead, 1 cancelled (asked to stop)" in out
    stored = Job.objects.get(pk=job.id)
    assert stored.status == "cancelled" and stored.locked_by is None
    assert stored.last_error.startswith("cancelled by dave: lease expired")
    # It does not go back to ready: a fresh worker finds nothing to run.
    rescuer = workers("--burst", env=worker_env(**FAST))
    assert rescuer.wait(30) == 0
    assert Job.objects.get(pk=job.id).status == "cancelled"
    assert len(executions("cooperative-start")) == 1


def _sweepjobs() -> str:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("sweepjobs", stdout=out)
    return out.getvalue()


def test_snooze_with_max_attempts_1_ends_done_not_dead(workers):
    job = jobs.snoozes.enqueue(times=2)
    worker = workers("--burst", env=worker_env(**FAST))
    assert worker.wait(60) == 0, worker.output()
    stored = Job.objects.get(pk=job.id)
    assert stored.status == "done" and stored.result == 3
    assert stored.snoozes == 2 and stored.max_attempts == 3
    assert [h["outcome"] for h in stored.history] == ["snoozed", "snoozed", "done"]
    assert stored.history[0]["message"] == "snoozed for 0s"
    assert [int(v) for _, _, v, _ in executions("snoozes")] == [1, 2, 3]


def test_snoozing_past_the_limit_goes_dead_with_the_reason(workers, settings):
    job = jobs.snoozes.enqueue(times=1000)
    env = worker_env(**FAST, PGJOBS_TEST_MAX_SNOOZES="3")
    worker = workers("--burst", env=env)
    assert worker.wait(60) == 0, worker.output()
    stored = Job.objects.get(pk=job.id)
    assert stored.status == "dead" and stored.snoozes == 4
    assert "snoozed more than 3 times" in stored.last_error
    assert [h["outcome"] for h in stored.history] == ["snoozed"] * 3 + ["dead"]


def test_a_snooze_later_waits_as_scheduled(workers):
    job = jobs.snoozes.enqueue(times=1, seconds=3600)
    worker = workers("--burst", env=worker_env(**FAST))
    assert worker.wait(60) == 0, worker.output()
    stored = Job.objects.get(pk=job.id)
    assert stored.status == "scheduled" and stored.attempts == 1 and stored.max_attempts == 2
    assert 3500 < (stored.run_at - stored.updated_at).total_seconds() <= 3600


def test_snooze_accepts_exactly_what_the_store_accepts_and_names_the_bound():
    from django_pgjobs import Snooze
    from django_pgjobs.store import MAX_DELAY_SECONDS, Store

    assert Snooze(MAX_DELAY_SECONDS).seconds == MAX_DELAY_SECONDS
    assert Snooze(dt.timedelta(seconds=MAX_DELAY_SECONDS)).seconds == MAX_DELAY_SECONDS
    # The store takes the longest snooze (a token nobody holds: the fence refuses, nothing raises).
    assert Job.objects.store.snooze([(0, 0, Snooze(MAX_DELAY_SECONDS).seconds)]) == {}
    assert isinstance(Job.objects.store, Store)
    for bad in (MAX_DELAY_SECONDS + 1, 3.18e9, float("inf"), float("nan"), -1, True, "60"):
        with pytest.raises(ValueError, match=r"from 0 to 3155760000 \(100 years"):
            Snooze(bad)  # type: ignore[arg-type]


def test_a_snooze_beyond_the_longest_delay_is_a_retryable_failure_with_the_reason(workers):
    """Snooze(3.18e9) used to pass Snooze's own check (3.2e9) and be refused by the store: the
    outcome was replaced by an internal failure that never retried (the job went dead)."""
    job = jobs.snoozes.using(max_attempts=3).enqueue(times=1, seconds=3.18e9)
    ok = jobs.echo.enqueue("beside it")
    worker = workers("--burst", "-c", "2", env=worker_env(**FAST))
    assert worker.wait(60) == 0, worker.output()
    stored = Job.objects.get(pk=job.id)
    assert (stored.status, stored.attempts, stored.snoozes) == ("scheduled", 1, 0)
    assert [h["outcome"] for h in stored.history] == ["failed"]
    assert stored.history[0]["error_class"] == "ValueError"
    assert "Snooze(seconds): a number of seconds from 0 to 3155760000 (100 years" in stored.last_error
    assert Job.objects.get(pk=ok.id).status == "done"
    assert "internal failure" not in worker.output() and "rejected by fencing" not in worker.output()


def test_worker_signals_are_sent_in_the_executor_and_a_raising_receiver_changes_nothing(workers, tmp_path):
    log = tmp_path / "signals.jsonl"
    ok = jobs.echo.enqueue("x")
    bad = jobs.always_fails.enqueue()
    worker = workers("--burst", env=worker_env(**FAST, PGJOBS_TEST_SIGNALS=str(log)))
    assert worker.wait(60) == 0, worker.output()
    assert Job.objects.get(pk=ok.id).status == "done" and Job.objects.get(pk=bad.id).status == "dead"
    events = [json.loads(line) for line in Path(log).read_text().splitlines()]
    mine = [e for e in events if e["job_id"] == ok.id]
    assert [e["event"] for e in mine] == ["started", "finished"]
    assert mine[0]["sender"] == "tests.echo" and mine[1]["outcome"] == "done" and mine[1]["duration"] >= 0
    assert all(e["thread"].startswith("pgjobs-job-") for e in events)
    failing = [e for e in events if e["job_id"] == bad.id]
    assert [e["event"] for e in failing] == ["started", "failed", "finished"] * 3
    assert [e["will_retry"] for e in failing if e["event"] == "failed"] == [True, True, False]
    assert {e["error"] for e in failing if e["event"] == "failed"} == {"ValueError"}
    assert "a receiver of a worker signal" in worker.output()
