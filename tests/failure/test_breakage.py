"""More ways things break: poison jobs, timeouts, cut connections (the restart: test_restart.py)."""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from django_pgjobs.models import Job
from tests.failure.helpers import fast_env
from tests.processes import APPLICATION_NAME, executions, hold_claimed_ahead, query, wait_for, worker_env
from tests.testapp import jobs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("clean_executions")]


def status_of(job_id: int) -> str:
    return Job.objects.get(pk=job_id).status


def counts(ids: list[int]) -> dict[str, int]:
    return dict(Counter(Job.objects.filter(pk__in=ids).values_list("status", flat=True)))


@pytest.mark.parametrize(
    ("handler", "kind", "max_attempts"),
    [(jobs.kills_worker, "kill", 2), (jobs.exits_process, "exit", 3)],
    ids=["sigkill-self", "os-exit"],
)
def test_poison_job_that_kills_its_worker_ends_dead(workers, handler, kind, max_attempts):
    job = handler.enqueue()
    supervisor = workers("--processes", "2", "--poll-interval", "0.2", env=fast_env())
    wait_for(lambda: status_of(job.id) == "dead", 90, "the poison job to go dead")
    job.refresh_from_db()
    assert job.attempts == max_attempts
    assert [h["outcome"] for h in job.history] == ["lease expired"] * max_attempts
    assert job.last_error.startswith("lease expired (worker ")
    runs = executions(kind)
    assert [int(v) for _, _, v, _ in runs] == list(range(1, max_attempts + 1))
    assert len({pid for *_, pid in runs}) == max_attempts  # a fresh process each time
    # It does not loop: the workers are still serving, and nothing else happens to the poison job.
    after = jobs.echo.enqueue("after the poison")
    wait_for(lambda: status_of(after.id) == "done", 60, "a normal job after the poison job")
    assert len(executions(kind)) == max_attempts
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0, supervisor.output()


def test_a_job_past_its_timeout_loses_its_lease_and_its_result_is_fenced(workers):
    """A live worker keeps a job only until the handler's ``timeout``: then it stops heartbeating,
    the lease lapses, the job is taken back and rerun, and the overrunning run's result is refused."""
    job = jobs.overruns.enqueue(first=60.0, until_rerun=True)  # timeout 1 s, lease 2 s
    worker = workers("--concurrency", "2", "--worker-id", "slowpoke", env=fast_env())
    wait_for(lambda: status_of(job.id) == "done", 60, "the rerun to finish")
    worker.wait_for_log("overran its timeout of 1s", timeout=30)
    worker.wait_for_log("late completion rejected by fencing", timeout=30)
    job.refresh_from_db()
    assert job.result == 2 and job.attempts == 2
    assert [h["outcome"] for h in job.history] == ["lease expired", "done"]
    assert [v for _, _, v, _ in executions("overrun-end")] == ["2", "1"]


def test_an_overrunning_handler_gives_its_slot_to_a_new_thread(workers):
    """One slot, one handler stuck for 30 s past its 1 s timeout: the worker keeps serving (other
    jobs, and the rerun of the very same job) while the stuck run sleeps, and stops promptly."""
    job = jobs.overruns.enqueue(first=30.0)  # timeout 1 s, lease 2 s; attempt 2 is quick
    worker = workers("--concurrency", "1", env=fast_env())
    worker.wait_for_log("its slot goes to a new thread", timeout=30)
    other = jobs.echo.enqueue("while the first run is stuck")
    wait_for(lambda: status_of(other.id) == "done", 30, "another job on the freed slot")
    wait_for(lambda: status_of(job.id) == "done", 30, "the rerun of the stuck job")
    job.refresh_from_db()
    assert job.result == 2 and job.attempts == 2
    assert [h["outcome"] for h in job.history] == ["lease expired", "done"]
    # Attempt 1 is still asleep: only the rerun has ended.
    assert [v for _, _, v, _ in executions("overrun-end")] == ["2"]
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.output()  # the stuck thread does not hold the exit
    assert not Job.objects.filter(status="running").exists()


def test_more_stuck_handlers_than_slots_make_the_worker_exit_for_a_restart(workers):
    job = jobs.hangs.enqueue()
    worker = workers("--concurrency", "1", env=fast_env())
    # Attempt 1 sticks (its slot goes to a new thread), the sweeper takes it back, attempt 2 sticks
    # too: two stuck threads for one slot, so the process asks to be replaced.
    assert worker.wait(60) == 3, worker.output()
    assert "stopping so a fresh process takes over (exit code 3)" in worker.output()
    assert [v for _, _, v, _ in executions("hang-start")] == ["1", "2"]

    # Not stuck for ever: attempt 2's lease (no longer heartbeated) lapses and a sweep takes it back.
    def swept() -> bool:
        Job.objects.sweep()
        return status_of(job.id) != "running"

    wait_for(swept, 10, "the stuck attempt's lease to lapse and be swept")
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("ready", 2)
    assert [h["outcome"] for h in job.history] == ["lease expired", "lease expired"]


def lease_left(job_id: int) -> float:
    row = query("SELECT extract(epoch FROM lease_expires_at - now()) FROM pgjobs_job WHERE id = %s", [job_id])
    return float(row[0][0] or 0)


def test_a_handler_lease_replaces_the_worker_default(workers):
    job = jobs.long_lease.enqueue()  # lease 30 s, under a worker whose default lease is 2 s
    workers(env=fast_env())
    wait_for(lambda: executions("long-lease-start"), 60, "the job to start")
    # The first heartbeat, sent as the job starts, sets the handler's own lease. The job runs until
    # released below, so it is surely still running while we look.
    wait_for(lambda: lease_left(job.id) > 10, 30, "the handler's lease to be applied")
    left = lease_left(job.id)
    assert 10 < left <= 30
    query(
        "INSERT INTO test_executions (kind, value) VALUES ('long-lease-release', %s) RETURNING id", [job.id]
    )
    wait_for(lambda: status_of(job.id) == "done", 60, "the job to finish")
    job.refresh_from_db()
    assert job.attempts == 1 and [h["outcome"] for h in job.history] == ["done"]


def _cut_connections() -> int:
    """pg_terminate_backend on the workers' sessions (claim, job, heartbeat, acknowledger and
    listener connections): only sessions of this run's own test database opened by processes the
    tests started (their application_name), never anybody else's. Returns how many were cut."""
    return query(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name = %s AND pid <> pg_backend_pid()",
        [APPLICATION_NAME],
    )[0][0]


def test_connections_cut_repeatedly_under_running_workers(workers):
    n = 600
    # 0.05 s each, 4 at once: long enough for six rounds of cuts while work is still going on.
    ids = [j.id for j in [jobs.resilient.enqueue(0.05) for _ in range(n)]]
    procs = [workers("--concurrency", "2", "--poll-interval", "0.2", env=fast_env()) for _ in range(2)]
    cut = 0
    for _ in range(6):
        before = Job.objects.filter(pk__in=ids, status="done").count()
        if before >= n - 60:
            break
        # Pace the cuts by progress, not by the clock: each round the workers must have reconnected
        # and finished more jobs before their connections are cut again.
        wait_for(
            lambda before=before: Job.objects.filter(pk__in=ids, status="done").count() >= before + 30,
            60,
            "progress after reconnecting",
        )
        cut += _cut_connections()
    wait_for(lambda: counts(ids) == {"done": n}, 120, f"all {n} jobs done: {counts(ids)}")
    assert cut >= 6
    assert all(p.proc.poll() is None for p in procs), "a worker died"
    assert any("database error" in p.output() or "failed" in p.output() for p in procs)
    ran = Counter(job_id for _, job_id, _, _ in executions("resilient"))
    assert set(ran) == set(ids)  # none lost
    print(f"cut {cut} connections over 6 rounds; {n} jobs done; {sum(ran.values()) - n} extra runs")
    # And they carry on afterwards.
    last = jobs.echo.enqueue("after the cuts")
    wait_for(lambda: status_of(last.id) == "done", 30, "a job after the cuts")


def test_a_crash_of_the_claim_loop_charges_started_jobs_releases_buffered_ones_and_exits_4(workers, tmp_path):
    """The claim loop runs in the main thread, outside the guard of the other internal threads: a
    bug there gave a traceback, exit 1 and every job released without its attempt charged, so a
    job whose handling breaks the claim loop could loop from worker to worker."""
    trigger = tmp_path / "break"
    worker = workers(
        "-c",
        "1",
        "--poll-interval",
        "0.2",
        "--shutdown-timeout",
        "5",
        env=worker_env(PGJOBS_TEST_BREAK_CLAIM_LOOP=str(trigger)),
        module="tests.worker.breaking_claim_loop",
    )
    blocker, held = hold_claimed_ahead(worker)
    trigger.write_text("now")
    assert worker.wait(30) == 4, worker.output()
    out = worker.output()
    assert "internal error in the claim loop; stopping the worker (exit code 4)" in out
    assert "RuntimeError: the claim loop broke (test)" in out
    started = Job.objects.get(pk=blocker.id)  # its handler had started: the attempt is charged
    assert started.status in ("scheduled", "ready") and started.attempts == 1
    assert [h["outcome"] for h in started.history] == ["failed"]
    assert started.history[0]["error_class"] == "django_pgjobs.WorkerError"
    assert "internal error in the worker's claim loop: the claim loop broke (test)" in started.last_error
    for job in held:  # claimed ahead, never started: released, no attempt charged
        stored = Job.objects.get(pk=job.id)
        assert stored.status == "ready" and stored.attempts == 1
        assert stored.max_attempts - stored.attempts == job.max_attempts
        assert [h["outcome"] for h in stored.history] == ["released"]
    assert executions("echo") == []
    assert not Job.objects.filter(status="running").exists()
