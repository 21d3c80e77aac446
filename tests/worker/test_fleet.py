"""The workers registry and paused queues, with real worker processes."""

from __future__ import annotations

import signal
import time

import pytest

from django_pgjobs import fleet, queue_control
from django_pgjobs.models import Job, WorkerProcess
from tests.processes import executions, query, wait_for, worker_env
from tests.testapp import jobs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("clean_executions")]

FAST = {"PGJOBS_TEST_LEASE": "3", "PGJOBS_TEST_HEARTBEAT": "0.5", "PGJOBS_TEST_SWEEP_INTERVAL": "0.5"}


def live(worker_id: str) -> list[WorkerProcess]:
    return list(fleet.live_workers().filter(worker_id=worker_id))


def test_registry_rows_appear_with_the_worker_and_leave_on_a_clean_exit(workers):
    worker = workers(
        "--worker-id",
        "reg-clean",
        "-q",
        "mail:2",
        "-q",
        "default",
        "--concurrency",
        "3",
        env=worker_env(**FAST),
    )
    (row,) = wait_for(lambda: live("reg-clean"), 30, "the worker's registry row")
    assert row.name.startswith("reg-clean#") and row.pid == worker.pid
    assert (row.queues, row.queue_limits, row.concurrency) == (["mail", "default"], {"mail": 2}, 3)
    assert row.version and row.host and row.in_flight == 0
    job = jobs.cooperative.using(queue="mail").enqueue()
    wait_for(lambda: any(j == job.id for _, j, _, _ in executions("cooperative-start")), 30)
    wait_for(lambda: WorkerProcess.objects.get(pk=row.name).in_flight == 1, 10, "in_flight from the beat")
    assert Job.objects.get(pk=job.id).locked_by == row.name  # how the admin finds its running jobs
    Job.objects.cancel([job.id])
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
    assert not WorkerProcess.objects.filter(pk=row.name).exists()


def test_a_sigkilled_worker_drops_out_after_a_few_beats_and_the_sweep_prunes_it(workers):
    victim = workers("--worker-id", "reg-killed", env=worker_env(**FAST))
    (row,) = wait_for(lambda: live("reg-killed"), 30, "the worker's registry row")
    first_beat = row.heartbeat_at
    wait_for(lambda: WorkerProcess.objects.get(pk=row.name).heartbeat_at > first_beat, 10, "a second beat")
    victim.kill()
    killed = time.monotonic()
    wait_for(lambda: not live("reg-killed"), 10, "the dead worker to stop being live")
    dropped = time.monotonic() - killed
    assert dropped < 5, f"took {dropped:.1f}s (live for {fleet.LIVE_BEATS} beats of 0.5 s)"
    assert WorkerProcess.objects.filter(pk=row.name).exists()  # kept a while, marked gone
    query(
        "UPDATE pgjobs_worker SET expires_at = now() - interval '2 hours' WHERE name = %s RETURNING name",
        [row.name],
    )
    from django.core.management import call_command

    call_command("sweepjobs")
    assert not WorkerProcess.objects.filter(pk=row.name).exists()


def test_pause_stops_claims_within_2_seconds_and_resume_restarts_them(workers):
    worker = workers("--worker-id", "pauser", "--poll-interval", "5", env=worker_env(**FAST))
    wait_for(lambda: live("pauser"), 30, "the worker")
    worker.wait_for_log("listening for notifications", timeout=30)
    before = jobs.echo.enqueue("before pause")
    wait_for(lambda: Job.objects.get(pk=before.id).status == "done", 30)
    assert queue_control.pause("default", by="ops")
    assert not queue_control.pause("default")  # already paused: nothing changes
    paused_at = time.monotonic()
    worker.wait_for_log("paused queues: default", timeout=5)
    assert time.monotonic() - paused_at < 2
    held = jobs.echo.enqueue("while paused")
    other = jobs.echo.using(queue="other").enqueue("other queue")
    wait_for(lambda: Job.objects.get(pk=other.id).status == "done", 10, "other queues keep flowing")
    assert Job.objects.get(pk=held.id).status == "ready"
    assert queue_control.resume("default")
    resumed_at = time.monotonic()
    wait_for(lambda: Job.objects.get(pk=held.id).status == "done", 10, "the resumed queue's job")
    took = time.monotonic() - resumed_at
    assert took < 2, f"resume took {took:.2f}s"
    print(f"resume to done: {took * 1000:.0f} ms")


def test_a_worker_of_named_queues_obeys_a_pause_and_running_jobs_finish(workers, tmp_path):
    go = tmp_path / "go"
    running = jobs.ignores_cancel.using(queue="mail").enqueue(str(go))
    # Two slots: with one busy the worker still claims (and so re-reads the paused queues).
    worker = workers("-q", "mail", "-c", "2", "--poll-interval", "0.2", env=worker_env(**FAST))
    wait_for(lambda: any(j == running.id for _, j, _, _ in executions("ignores-start")), 30)
    queue_control.pause("mail")
    # "Within about a second": a claim a few milliseconds after the pause may still have been on its
    # way (the notification is sent after commit, by another thread). Wait until the worker says it
    # saw the pause; from then on nothing of the queue is claimed.
    worker.wait_for_log("paused queues: mail", timeout=5)
    waiting = jobs.echo.using(queue="mail").enqueue("waits")
    go.write_text("finish")
    wait_for(lambda: Job.objects.get(pk=running.id).status == "done", 20, "the running job to finish")
    # Two refreshes of the paused queues later the waiting job has still not been claimed.
    deadline = time.monotonic() + 2 * queue_control.REFRESH_SECONDS + 0.5
    while time.monotonic() < deadline:
        assert Job.objects.get(pk=waiting.id).status == "ready"
        time.sleep(0.1)
    queue_control.resume("mail")
    wait_for(lambda: Job.objects.get(pk=waiting.id).status == "done", 10)
