"""Periodic jobs with a fleet of real worker processes: one job per scheduled time, no leader."""

from __future__ import annotations

import datetime as dt
import signal
import time
from collections import Counter

import pytest

from django_pgjobs.models import Job
from tests.processes import executions, query, wait_for, worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("clean_executions")]


def ticks() -> list[Job]:
    return list(Job.objects.filter(task="tests.tick").order_by("run_at"))


def test_three_workers_for_10_seconds_with_every_2_run_one_job_per_tick(workers):
    env = worker_env(PGJOBS_TEST_PERIODIC="every=2,skip", PGJOBS_TEST_LEASE="6")
    fleet = [workers("--worker-id", f"tick-{n}", "--poll-interval", "0.5", env=env) for n in range(3)]
    for worker in fleet:
        worker.wait_for_log("started", timeout=30)
    (started_at,) = query("SELECT statement_timestamp()")[0]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the fleet runs for 10 s; the test only watches
        time.sleep(0.2)
    (stopped_at,) = query("SELECT statement_timestamp()")[0]
    # Ticks are enqueued in order, so once one due after the window exists every tick of the window
    # is in the table; let those run before stopping (on a busy machine the window's last tick can
    # still be ready when the window ends: it failed so beside a second suite).
    wait_for(
        lambda: (
            any(j.run_at > stopped_at for j in ticks())
            and all(j.status == "done" for j in ticks() if j.run_at <= stopped_at)
        ),
        30,
        "every tick of the window to run",
    )
    for worker in fleet:
        worker.signal(signal.SIGTERM)
    for worker in fleet:
        assert worker.wait(30) == 0, worker.output()
    window = [j for j in ticks() if started_at <= j.run_at <= stopped_at]
    assert 4 <= len(window) <= 6, [j.run_at for j in window]
    # Never two jobs for one scheduled time, each on an even second, each run once.
    assert len({j.run_at for j in ticks()}) == len(ticks())
    assert all(j.run_at.timestamp() % 2 == 0 for j in ticks())
    runs = Counter(job_id for _, job_id, _, _ in executions("tick"))
    assert all(n == 1 for n in runs.values()), runs
    assert {j.status for j in window} == {"done"}
    # No leader: the inserts were raced by every worker; the logs say who won which tick.
    winners = [w for w in fleet if "periodic job tests.tick: enqueued the tick" in w.output()]
    print(f"{len(window)} ticks in 10 s; {len(winners)} of 3 workers won at least one")


def test_after_a_stopped_fleet_only_the_latest_missed_tick_runs_once(workers):
    env = worker_env(PGJOBS_TEST_PERIODIC="every=3600")  # hourly: the latest tick is in the past
    first = workers("--poll-interval", "0.5", env=env)
    wait_for(lambda: len(ticks()) == 1, 30, "the latest missed tick")
    (job,) = ticks()
    now = query("SELECT statement_timestamp()")[0][0]
    assert job.run_at <= now and now - job.run_at < dt.timedelta(hours=1)
    assert job.run_at.timestamp() % 3600 == 0
    first.signal(signal.SIGTERM)
    assert first.wait(30) == 0
    # Restarting the fleet does not enqueue that tick again, nor a backfill of earlier ones.
    second = [workers("--poll-interval", "0.5", env=env) for _ in range(2)]
    for worker in second:
        worker.wait_for_log("started", timeout=30)
    wait_for(lambda: Job.objects.get(pk=job.id).status == "done", 30)
    assert len(ticks()) == 1


def test_skip_enqueues_no_missed_tick_and_no_periodic_opts_out(workers):
    workers("--poll-interval", "0.5", env=worker_env(PGJOBS_TEST_PERIODIC="every=3600,skip"))
    opted_out = workers(
        "--no-periodic", "--poll-interval", "0.5", env=worker_env(PGJOBS_TEST_PERIODIC="every=2")
    )
    opted_out.wait_for_log("started", timeout=30)
    # Three seconds of the 2-second schedule: the opted-out worker would have enqueued a tick.
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        assert ticks() == []
        time.sleep(0.2)


def test_a_bad_periodic_entry_stops_the_worker_with_the_check_message(workers):
    worker = workers(env=worker_env(PGJOBS_TEST_PERIODIC="every=0.1"))
    assert worker.wait(30) != 0
    assert "django_pgjobs.E021" in worker.output() and "every must be at least 1 second" in worker.output()
