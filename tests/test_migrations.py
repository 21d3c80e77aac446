"""Migrations move a populated table forward and back, jobs in every state keeping their meaning."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

APP = "django_pgjobs"

#: A 0001 table with jobs in every state it knew: (key, status, priority, run_at offset, attempts,
#: max_attempts, running?). The key names each row across the migrations.
ROWS_0001 = [
    ("ready-now", "ready", 0, "-1 hour", 0, 5),
    ("ready-urgent", "ready", -10, "-1 minute", 0, 5),  # lower ran first in 0001
    ("ready-later", "ready", 3, "+1 day", 0, 5),  # "delayed": ready, due later
    ("running", "running", 0, "-1 hour", 1, 5),
    ("done", "done", 0, "-2 hours", 1, 5),
    ("dead", "dead", 7, "-3 hours", 5, 5),
]


def _migrate(target: str) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([(APP, target)])


def _rows() -> dict[str, tuple]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT idempotency_key, status, priority, attempts, max_attempts, run_at > now() "
            "FROM pgjobs_job ORDER BY id"
        )
        return {r[0]: r[1:] for r in cursor.fetchall()}


def _latest() -> str:
    executor = MigrationExecutor(connection)
    return max(name for app, name in executor.loader.graph.leaf_nodes() if app == APP)


def test_a_populated_0001_table_migrates_forward_and_back():
    latest = _latest()
    try:
        _migrate("0001_initial")
        with connection.cursor() as cursor:
            for key, status, priority, offset, attempts, max_attempts in ROWS_0001:
                running = status == "running"
                cursor.execute(
                    f"""
                    INSERT INTO pgjobs_job (task, queue, payload, status, priority, attempts,
                        max_attempts, run_at, idempotency_key, locked_by, locked_at, lease_expires_at,
                        finished_at)
                    VALUES ('tests.noop', 'default', '{{}}', %s, %s, %s, %s, now() + interval %s, %s,
                            {"'w'" if running else "NULL"}, {"now()" if running else "NULL"},
                            {"now() + interval '1 minute'" if running else "NULL"},
                            {"now()" if status in ("done", "dead") else "NULL"})
                    """,
                    [status, priority, attempts, max_attempts, offset, key],
                )
        before = _rows()

        _migrate("0002_store_v2")
        forward = _rows()
        # A ready job due later is scheduled now; priorities change sign so the same job runs first.
        assert forward["ready-later"][:2] == ("scheduled", -3)
        assert forward["ready-urgent"][:2] == ("ready", 10)
        assert forward["ready-now"][:2] == ("ready", 0)
        assert forward["dead"][:2] == ("dead", -7)
        assert {k: v[0] for k, v in forward.items()} == {
            "ready-now": "ready",
            "ready-urgent": "ready",
            "ready-later": "scheduled",
            "running": "running",
            "done": "done",
            "dead": "dead",
        }
        with connection.cursor() as cursor:
            # The running job (its old worker is stopped for the upgrade) got a token, so the
            # constraint holds and the sweeper can recover it like any other.
            cursor.execute("SELECT claim_token IS NOT NULL FROM pgjobs_job WHERE status = 'running'")
            assert cursor.fetchone() == (True,)
            cursor.execute(
                "INSERT INTO pgjobs_job (task, payload, status, finished_at, idempotency_key) "
                "VALUES ('tests.noop', '{}', 'cancelled', now(), 'cancelled')"
            )

        _migrate("0001_initial")
        back = _rows()
        cancelled = back.pop("cancelled")
        assert cancelled[0] == "dead"  # 0001 had no cancelled state: the nearest is a dead letter
        assert back == before
    finally:
        _migrate(latest)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pgjobs_job WHERE status = 'scheduled'")
        assert cursor.fetchone() == (1,)
