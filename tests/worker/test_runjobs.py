"""runjobs as a real process: outcomes, retries, concurrency, wake-ups, shutdown."""

from __future__ import annotations

import signal
import time

import pytest
from django.db import transaction
from django.utils.dateparse import parse_datetime

from django_pgjobs.models import Job
from tests.processes import children_of as _children
from tests.processes import executions, query, wait_for, worker_env
from tests.testapp import jobs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("clean_executions")]


def status_of(job_id: int) -> str:
    return Job.objects.get(pk=job_id).status


def test_success_stores_result_and_history(workers):
    job = jobs.echo.using(idempotency_key="echo:1").enqueue({"n": [1, 2.5, "é"]})
    worker = workers("--burst", "-v", "2")  # per-job lines are one -v away
    assert worker.wait() == 0, worker.output()
    job.refresh_from_db()
    assert job.status == "done"
    assert job.result == {"echo": {"n": [1, 2.5, "é"]}, "attempt": 1, "key": "echo:1"}
    assert job.attempts == 1 and job.finished_at and job.locked_by is None
    assert [h["outcome"] for h in job.history] == ["done"]
    assert f"job {job.id} tests.echo queue=default attempt=1/5 done after " in worker.output()


def test_failure_then_retry_then_success(workers):
    job = jobs.flaky.enqueue(succeed_on=3)
    worker = workers("--burst")
    assert worker.wait() == 0, worker.output()
    job.refresh_from_db()
    assert job.status == "done" and job.result == 3 and job.attempts == 3
    assert [h["outcome"] for h in job.history] == ["failed", "failed", "done"]
    assert job.history[0]["error_class"] == "RuntimeError"
    assert "attempt 1 fails on purpose" in job.history[0]["traceback"]
    assert [int(v) for _, _, v, _ in executions("flaky")] == [1, 2, 3]


def test_exhaustion_ends_dead_with_error_and_history(workers):
    job = jobs.always_fails.enqueue()
    worker = workers("--burst")
    assert worker.wait() == 0, worker.output()
    job.refresh_from_db()
    assert job.status == "dead" and job.attempts == 3 == job.max_attempts
    assert job.last_error == "ValueError: this handler always fails"
    assert len(job.history) == 3 and all(h["outcome"] == "failed" for h in job.history)
    assert "dead" in worker.output()


def test_unknown_task_fails_clearly_and_follows_retry_policy(workers):
    job, _ = Job.objects.enqueue("deployed.elsewhere", {"args": [], "kwargs": {}}, max_attempts=2)
    worker = workers("--burst", "-v", "2")
    assert worker.wait() == 0, worker.output()
    job.refresh_from_db()
    # First attempt failed and was scheduled for a retry (a rolling deploy may bring the handler).
    assert job.status == "scheduled" and job.attempts == 1 and job.run_at > job.created_at
    assert "no handler registered for task 'deployed.elsewhere'" in job.last_error
    assert "no handler registered for task 'deployed.elsewhere'" in worker.output()


@pytest.mark.parametrize("kind", ["system_exit", "keyboard_interrupt"])
def test_base_exceptions_in_a_handler_are_failures_not_crashes(workers, kind):
    job = jobs.exits.enqueue(kind)
    follow_up = jobs.echo.enqueue("after")
    worker = workers("--burst")
    assert worker.wait() == 0, worker.output()
    job.refresh_from_db()
    assert job.status == "dead" and job.attempts == 2
    assert job.last_error.startswith("SystemExit" if kind == "system_exit" else "KeyboardInterrupt")
    assert status_of(follow_up.id) == "done"


def test_non_json_result_is_a_recorded_failure(workers):
    job = jobs.bad_result.using(max_attempts=1).enqueue()
    worker = workers("--burst")
    assert worker.wait() == 0, worker.output()
    job.refresh_from_db()
    assert job.status == "dead"
    assert "return value" in job.last_error and "not JSON-serialisable" in job.last_error


def test_concurrency_runs_jobs_at_the_same_time(workers):
    # Each job waits (up to 30 s) until all four have started: they meet only if they run at once.
    ids = [jobs.rendezvous.enqueue("four", 4).id for _ in range(4)]
    started = time.monotonic()
    worker = workers("--burst", "--concurrency", "4")
    assert worker.wait(90) == 0, worker.output()
    elapsed = time.monotonic() - started
    assert Job.objects.filter(pk__in=ids, status="done").count() == 4
    assert set(Job.objects.filter(pk__in=ids).values_list("result", flat=True)) == {True}, "did not meet"
    # Every start happened before any end.
    rows = query(
        "SELECT max(at) FILTER (WHERE kind = 'rendezvous-start'), "
        "min(at) FILTER (WHERE kind = 'rendezvous-end') FROM test_executions"
    )
    last_start, first_end = rows[0]
    assert last_start < first_end, (last_start, first_end)
    print(f"4 jobs meeting with --concurrency 4: {elapsed:.2f}s wall (process start included)")


def test_burst_exits_when_nothing_is_ready_but_leaves_delayed_jobs(workers):
    later = jobs.echo.using(delay=3600).enqueue("later")
    worker = workers("--burst")
    assert worker.wait() == 0, worker.output()
    assert "burst: nothing ready" in worker.output()
    assert status_of(later.id) == "scheduled"


def test_max_jobs_stops_after_n(workers):
    ids = [jobs.echo.enqueue(i).id for i in range(5)]
    worker = workers("--max-jobs", "2", "--concurrency", "3")
    assert worker.wait() == 0, worker.output()
    assert Job.objects.filter(pk__in=ids, status="done").count() == 2
    assert Job.objects.filter(pk__in=ids, status="ready").count() == 3


def test_queue_selection(workers):
    mail = jobs.echo.using(queue="mail").enqueue("m")
    other = jobs.echo.using(queue="reports").enqueue("r")
    worker = workers("--burst", "--queue", "mail", "--queue", "webhooks")
    assert worker.wait() == 0, worker.output()
    assert status_of(mail.id) == "done"
    assert status_of(other.id) == "ready"


def test_transactional_enqueue(workers):
    worker = workers("--poll-interval", "0.2", "--worker-id", "tx-worker")
    worker.wait_for_log("listening for notifications")
    with pytest.raises(RuntimeError), transaction.atomic():
        jobs.echo.enqueue("rolled back")
        raise RuntimeError("roll back")
    with transaction.atomic():
        committed = jobs.echo.enqueue("committed")
    wait_for(lambda: status_of(committed.id) == "done", 20, "committed job to run")
    assert Job.objects.count() == 1
    assert [v for _, _, v, _ in executions("echo")] == ["committed"]


def test_listen_wakes_an_idle_worker_within_milliseconds(workers):
    worker = workers("--poll-interval", "600")
    worker.wait_for_log("listening for notifications")
    wait_for(lambda: "started" in worker.output(), 10, "worker start")
    latencies = []
    for i in range(5):
        job = jobs.echo.enqueue(i)
        wait_for(lambda job=job: status_of(job.id) == "done", 30, "notified job to finish")
        job.refresh_from_db()
        latencies.append((job.started_at - job.created_at).total_seconds())
    # With a 10-minute poll interval only the notification can explain these starts. The bound is
    # far below the poll interval, not a tight latency figure: a busy shared machine may pause a
    # process for a second (typical latencies, printed, are milliseconds).
    print("enqueue -> start latencies (s):", [round(x, 4) for x in latencies])
    assert sorted(latencies)[len(latencies) // 2] < 1.0, latencies
    assert max(latencies) < 10.0, latencies


def test_no_listen_polls(workers):
    worker = workers("--no-listen", "--poll-interval", "0.2")
    wait_for(lambda: "listen=off" in worker.output(), 10, "worker start")
    job = jobs.echo.enqueue("polled")
    wait_for(lambda: status_of(job.id) == "done", 10, "polled job to run")
    assert "listening for notifications" not in worker.output()


@pytest.mark.parametrize("how", ["option", "setting"])
def test_a_poll_interval_too_long_for_a_timed_wait_idles_instead_of_crashing(workers, how):
    """``--poll-interval 1e10`` (or ``POLL_INTERVAL_SECONDS = 1e10``, which the settings and system
    checks accept) reached ``Event.wait`` on the first idle turn of the claim loop: OverflowError,
    exit 1. Any finite interval is valid; the wait is capped internally."""
    args, env = (
        (("--poll-interval", "1e10"), {}) if how == "option" else ((), {"PGJOBS_TEST_POLL_INTERVAL": "1e10"})
    )
    worker = workers(*args, env=worker_env(**env))
    worker.wait_for_log("listening for notifications", timeout=30)
    assert "poll=10000000000.00s" in worker.output()
    job = jobs.echo.enqueue("woken by its notification")
    wait_for(lambda: status_of(job.id) == "done", 30, "the job to run")
    assert worker.proc.poll() is None, worker.output()
    worker.signal(signal.SIGTERM)  # the long wait ends at once on a stop
    assert worker.wait(30) == 0, worker.output()
    assert "Traceback" not in worker.output()


@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "0"])
def test_a_poll_interval_that_is_not_a_finite_positive_number_is_refused(workers, value):
    worker = workers(f"--poll-interval={value}")
    assert worker.wait(30) == 1, worker.output()
    out = worker.output()
    assert (
        f"CommandError: --poll-interval must be a finite number of seconds > 0, not {float(value)!r}" in out
    )
    assert "Traceback" not in out and "started" not in out


@pytest.mark.parametrize("value", ["nan", "-1"])
def test_a_shutdown_timeout_that_is_not_a_number_of_seconds_is_refused(workers, value):
    """NaN would pass a ``< 0`` check and then release running jobs at once on SIGTERM."""
    worker = workers(f"--shutdown-timeout={value}")
    assert worker.wait(30) == 1, worker.output()
    out = worker.output()
    assert "CommandError: --shutdown-timeout must be a number of seconds >= 0" in out
    assert f"not {float(value)!r}" in out
    assert "Traceback" not in out and "started" not in out


def test_sigterm_lets_the_running_job_finish_and_exits_zero(workers):
    job = jobs.sleep.enqueue(1.5)
    worker = workers("--shutdown-timeout", "30")
    wait_for(lambda: executions("sleep-start"), 20, "job to start")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
    job.refresh_from_db()
    assert job.status == "done"
    assert Job.objects.filter(status="running").count() == 0


def test_sigterm_releases_a_job_that_outlives_the_shutdown_timeout(workers):
    job = jobs.sleep.enqueue(30)
    worker = workers("--shutdown-timeout", "0.5")
    wait_for(lambda: executions("sleep-start"), 20, "job to start")
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.output()
    job.refresh_from_db()
    # Released without spending the attempt: its number stays used, the budget grows by one.
    assert (job.status, job.attempts, job.max_attempts) == ("ready", 1, 6)
    assert job.history[-1]["outcome"] == "released"
    assert Job.objects.filter(status="running").count() == 0


def test_second_signal_releases_everything_at_once(workers):
    job = jobs.sleep.enqueue(60)
    worker = workers("--shutdown-timeout", "120")
    wait_for(lambda: executions("sleep-start"), 20, "job to start")
    worker.signal(signal.SIGTERM)
    worker.wait_for_log("no new claims")
    worker.signal(signal.SIGINT)
    worker.wait(20)
    job.refresh_from_db()
    assert (job.status, job.attempts, job.max_attempts) == ("ready", 1, 6)
    assert "releasing every job now" in worker.output()


def test_processes_supervisor_restarts_a_killed_child(workers):
    import os

    supervisor = workers("--processes", "2", "--poll-interval", "0.2")
    children = wait_for(
        lambda: _children(supervisor.pid) if len(_children(supervisor.pid)) == 2 else None,
        20,
        "two worker processes",
    )
    os.kill(children[0], signal.SIGKILL)
    replaced = wait_for(
        lambda: (c := _children(supervisor.pid)) and len(c) == 2 and children[0] not in c and c,
        20,
        "a replacement worker process",
    )
    assert children[1] in replaced
    job = jobs.echo.enqueue("after restart")
    wait_for(lambda: status_of(job.id) == "done", 20, "job after restart")
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(40) == 0, supervisor.output()
    assert "restarting" in supervisor.output()
    assert not _children(supervisor.pid)


def test_ctrl_c_on_the_terminal_drains_supervised_children(workers):
    """A terminal's Ctrl-C (or systemd's stop) signals the whole process group. The children must
    get one request to stop (the supervisor's), not two (the second one forces a release)."""
    import os

    job = jobs.sleep.enqueue(1.5)
    supervisor = workers("--processes", "2", "--shutdown-timeout", "30")
    wait_for(lambda: executions("sleep-start"), 20, "job to start")
    os.killpg(supervisor.pid, signal.SIGINT)
    assert supervisor.wait(40) == 0, supervisor.output()
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("done", 1), supervisor.output()
    assert "releasing every job now" not in supervisor.output()


def test_supervisor_replaces_a_child_stopped_with_sigterm(workers):
    """Outside --burst/--max-jobs a child that exits 0 was stopped by someone (to recycle it):
    the slot is filled again."""
    import os

    supervisor = workers("--processes", "2", "--poll-interval", "0.2")
    children = wait_for(lambda: c if len(c := _children(supervisor.pid)) == 2 else None, 20, "two workers")
    os.kill(children[0], signal.SIGTERM)
    wait_for(
        lambda: len(c := _children(supervisor.pid)) == 2 and children[0] not in c,
        30,
        "a replacement for the stopped worker",
    )
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(40) == 0, supervisor.output()


def test_a_backoff_policy_answering_nonsense_falls_back_to_the_default(workers):
    job = jobs.bad_backoff.enqueue()
    worker = workers("--burst")
    assert worker.wait() == 0, worker.output()
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("scheduled", 1)  # recorded and scheduled, not lost
    assert job.last_error.startswith("RuntimeError: downstream says no")
    assert "returned -1" in worker.output() and "using the default" in worker.output()
    # The default policy's first delay, 2 s +- 20 %, measured from the failure's own timestamp.
    failed_at = parse_datetime(job.history[-1]["finished_at"])
    assert failed_at is not None
    assert 1.6 <= (job.run_at - failed_at).total_seconds() <= 2.4


def test_processes_with_burst_exit_when_drained(workers):
    ids = [jobs.echo.enqueue(i).id for i in range(6)]
    supervisor = workers("--processes", "2", "--burst")
    assert supervisor.wait(60) == 0, supervisor.output()
    assert Job.objects.filter(pk__in=ids, status="done").count() == 6
    assert "restarting" not in supervisor.output()
