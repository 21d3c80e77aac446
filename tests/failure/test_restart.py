"""A PostgreSQL restart under running workers, on a throwaway server the test starts itself.

A test may stop or restart only a server it created: never the one ``DATABASE_URL`` names (a
developer's own, or one shared with others), and not the suite's test server either. So this
test starts an embedded cluster of its own (``server.throwaway_server``, whatever
``DATABASE_URL`` says), migrates a database on it and points real workers at it. The workers see
a plain PostgreSQL address, as in production: they cannot start the server again themselves.
"""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from django_pgjobs.embedded import server
from tests.failure.helpers import FAST
from tests.other_server import Address, enqueue, manage, status_counts
from tests.processes import wait_for
from tests.testapp.jobs import EXECUTIONS_TABLE

pytestmark = pytest.mark.slow

JOBS = 400


def test_postgres_restart_while_workers_run(workers):
    with server.throwaway_server() as config:
        first = server.ensure_server(config)
        address = Address(host=str(first.socket_dir), port=first.port, dbname="pgjobs_restart")
        with address.connect(dbname="postgres") as admin:
            admin.execute("CREATE DATABASE pgjobs_restart")
        address.query(EXECUTIONS_TABLE)
        env = address.env(**FAST)
        manage(env, "migrate", "-v", "0")
        ids = enqueue(env, "tests.resilient", [0.02], bulk=JOBS - 20, single=20)
        procs = [workers("--concurrency", "2", "--poll-interval", "0.2", env=env) for _ in range(2)]

        wait_for(lambda: status_counts(address, ids).get("done", 0) >= 50, 60, "work in flight")
        assert server.stop_server(config.data_dir, mode="fast", timeout=60)
        assert server.running_server(config.data_dir) is None
        second = server.ensure_server(config)
        assert second.pid != first.pid, "the server was not restarted"

        wait_for(lambda: status_counts(address, ids) == {"done": JOBS}, 180, "every job done afterwards")
        assert all(p.proc.poll() is None for p in procs), "a worker died"
        assert any("database error" in p.output() or "failed" in p.output() for p in procs), "unnoticed"
        ran = Counter(job_id for (job_id,) in address.query("SELECT job_id FROM test_executions"))
        assert set(ran) == set(ids)  # none lost; extra runs are allowed (a run cut by the restart)
        for p in procs:
            p.signal(signal.SIGTERM)
        for p in procs:
            assert p.wait(60) == 0, p.output()[-5000:]
        print(f"postgres restarted under 2 workers: {JOBS} jobs done, {sum(ran.values()) - JOBS} extra runs")
    assert not config.data_dir.parent.exists(), "the throwaway server's directory is removed"
