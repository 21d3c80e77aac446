"""Workers, enqueue and the sweep through a real PgBouncer in transaction pooling mode.

With the README's settings for PgBouncer (``--no-listen`` or ``LISTEN = False``,
``DISABLE_SERVER_SIDE_CURSORS = True``, psycopg's ``prepare_threshold = None``) every job runs
exactly once, and a job whose worker was SIGKILLed is recovered by ``sweepjobs`` through the
pooler (its advisory lock is transaction-level, so it holds within one pooled transaction).
The pool has fewer server sessions than there are worker processes, so sessions really are
shared between workers.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator

import pytest
from django.db import connection

from django_pgjobs.models import Job
from tests.failure.helpers import FAST
from tests.helpers import prerequisite_missing
from tests.other_server import Address, enqueue, manage
from tests.pgbouncer import PgBouncer, find_pgbouncer
from tests.processes import executions, query, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("clean_executions")]

POOL_SIZE = 2
WORKERS = 3  # more worker processes than server sessions


@pytest.fixture
def pgbouncer() -> Iterator[PgBouncer]:
    executable = find_pgbouncer()
    if executable is None:
        prerequisite_missing("PgBouncer not found (apt-get install pgbouncer, or PGJOBS_PGBOUNCER=/path)")
    connection.ensure_connection()  # the embedded engine fills in its socket directory
    s = connection.settings_dict
    target = Address(
        host=s["HOST"] or "localhost",
        port=int(s["PORT"] or 5432),
        dbname=s["NAME"],
        user=s["USER"] or "postgres",
        password=s["PASSWORD"] or "",
    )
    bouncer = PgBouncer(executable, target, POOL_SIZE)
    try:
        yield bouncer
    finally:
        bouncer.stop()


def test_each_job_runs_once_and_the_sweep_recovers_through_pgbouncer(workers, pgbouncer):
    env = pgbouncer.address.env(PGJOBS_TEST_PGBOUNCER="1", **FAST)
    procs = [
        workers("--no-listen", "--concurrency", "3", "--poll-interval", "0.1", env=env),
        workers("--no-listen", "--concurrency", "3", "--poll-interval", "0.1", env=env),
        workers("--concurrency", "3", "--poll-interval", "0.1", env={**env, "PGJOBS_TEST_LISTEN": "0"}),
    ]
    assert len(procs) == WORKERS
    for p in procs:
        p.wait_for_log("listen=off", timeout=60)

    ids = enqueue(env, "tests.pooled", [], bulk=250, single=50)  # enqueue_many and enqueue
    done = lambda: Job.objects.filter(pk__in=ids, status="done").count()  # noqa: E731
    wait_for(lambda: done() == len(ids), 120, f"all {len(ids)} jobs done through PgBouncer")
    runs = Counter(job_id for _, job_id, _, _ in executions("pooled"))
    assert runs == Counter(ids), "a job ran more than once, or never"
    assert set(Job.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == {1}
    # Every statement went through the pool: at most POOL_SIZE server sessions ran the handlers,
    # while more client connections than that were open on it.
    backends = {value for _, _, value, _ in executions("pooled")}
    assert 1 <= len(backends) <= POOL_SIZE, backends
    clients = pgbouncer.sessions("CLIENTS")
    assert len(clients) > POOL_SIZE >= len(pgbouncer.sessions("SERVERS")), clients
    for p in procs:
        p.signal(signal.SIGTERM)
    for p in procs:
        assert p.wait(60) == 0, p.output()[-5000:]
        assert "database error" not in p.output(), p.output()[-5000:]

    # The sweep through PgBouncer: a worker SIGKILLed mid-job; sweepjobs takes the job back.
    (slow,) = enqueue(env, "tests.slow_first", [120], bulk=0, single=1)
    victim = workers("--no-listen", "--worker-id", "victim", "--poll-interval", "0.1", env=env)
    wait_for(lambda: executions("slow-start"), 60, "the victim to start the job")
    victim.kill()
    expired = "SELECT count(*) FROM pgjobs_job WHERE status = 'running' AND lease_expires_at < now()"
    wait_for(lambda: query(expired)[0][0] == 1, 30, "the victim's lease to lapse")
    assert "expired leases: 1 back to ready, 0 dead" in manage(env, "sweepjobs")
    rescuer = workers("--no-listen", "--burst", "--worker-id", "rescuer", env=env)
    assert rescuer.wait(60) == 0, rescuer.output()
    job = Job.objects.get(pk=slow)
    assert (job.status, job.attempts) == ("done", 2)
    # A worker name is its --worker-id and, after "#", its process incarnation.
    assert [(h["outcome"], h["worker"].split("#")[0], h["attempt"]) for h in job.history] == [
        ("lease expired", "victim", 1),
        ("done", "rescuer", 2),
    ]
    assert "ERROR" not in pgbouncer.log(), pgbouncer.log()[-5000:]


def test_with_only_the_defaults_a_worker_notices_listen_is_deaf_and_nothing_is_prepared(workers, pgbouncer):
    """A project that only pointed DATABASES at PgBouncer, nothing else: the worker's LISTEN probe
    never comes back, so it says so and polls; and no statement is prepared (a prepared statement
    does not survive the pooled transaction), since the port reached is not the server's."""
    env = pgbouncer.address.env(PGJOBS_TEST_PGBOUNCER="bare", **FAST)
    worker = workers("--concurrency", "2", "--poll-interval", "0.1", env=env)
    worker.wait_for_log("receives no notifications on this connection", timeout=60)
    ids = enqueue(env, "tests.pooled", [], bulk=100, single=20)
    wait_for(
        lambda: Job.objects.filter(pk__in=ids, status="done").count() == len(ids),
        120,
        "every job done through PgBouncer by polling",
    )
    assert Counter(job_id for _, job_id, _, _ in executions("pooled")) == Counter(ids)
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0, worker.output()[-5000:]
    assert "prepared statement" not in worker.output() and "database error" not in worker.output()
    assert "ERROR" not in pgbouncer.log(), pgbouncer.log()[-5000:]
