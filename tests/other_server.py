"""The app against a database other than the suite's own test database.

Two tests need one: the restart test (a throwaway server of its own, the only kind a test may
restart) and the PgBouncer test (a pooler in front of the suite's server). Child processes
(workers, ``manage.py`` commands) reach it through ``tests/settings.py``'s ``PGJOBS_TEST_DB_HOST``
and ``PGJOBS_TEST_DB_PORT``, a plain PostgreSQL entry; the test itself reads and writes over
psycopg, since Django's connection in the test process belongs to the suite's database.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import psycopg

from tests.processes import ROOT, worker_env


@dataclass(frozen=True)
class Address:
    """Where a database is: ``host`` is a unix socket directory or a TCP host."""

    host: str
    port: int
    dbname: str
    user: str = "postgres"
    password: str = ""

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for a child process that uses this database instead of the suite's."""
        env = worker_env(
            PGJOBS_TEST_DB_HOST=self.host,
            PGJOBS_TEST_DB_PORT=str(self.port),
            PGJOBS_TEST_DB_USER=self.user,
            PGJOBS_WORKER_DB_NAME=self.dbname,
            **extra,
        )
        env.pop("DATABASE_URL", None)
        return env

    def connect(self, dbname: str | None = None, **kwargs: Any) -> psycopg.Connection[Any]:
        """A direct autocommit session (``dbname`` to reach another database of the server)."""
        return psycopg.connect(
            host=self.host,
            port=self.port,
            dbname=dbname or self.dbname,
            user=self.user,
            password=self.password or None,
            autocommit=True,
            **kwargs,
        )

    def query(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        """One statement on a fresh session (sessions do not survive a server restart)."""
        with self.connect() as conn:
            cursor = conn.execute(sql, params or [])
            return cursor.fetchall() if cursor.description else []


def manage(env: dict[str, str], *args: str, timeout: float = 180) -> str:
    """``python -m django <args>`` with ``env``; its output (stdout and stderr)."""
    result = subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}"
    return result.stdout


#: Child code: enqueue ``bulk`` jobs with ``enqueue_many`` and ``single`` ones one by one, each of
#: ``task`` with ``args``; prints the ids as JSON.
ENQUEUE = """
import json, sys
from django_pgjobs.managers import NewJob
from django_pgjobs.models import Job
from django_pgjobs.registry import get_handler
task, args, bulk, single = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
new = [NewJob(task, {"args": args, "kwargs": {}}) for _ in range(bulk)]
ids = [e.id for e in Job.objects.enqueue_many(new)]
handler = get_handler(task)
ids += [handler.enqueue(*args).id for _ in range(single)]
print(json.dumps(ids))
"""


def enqueue(env: dict[str, str], task: str, args: list[Any], *, bulk: int, single: int = 0) -> list[int]:
    """Enqueue jobs from a child process with ``env`` (the bulk and the single path); their ids."""
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import django\ndjango.setup()\n{ENQUEUE}",
            task,
            json.dumps(args),
            str(bulk),
            str(single),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, f"enqueue failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    ids = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(ids) == len(set(ids)) == bulk + single
    return ids


def status_counts(address: Address, ids: list[int]) -> dict[str, int]:
    """How many of ``ids`` are in each status."""
    return dict(
        address.query("SELECT status, count(*) FROM pgjobs_job WHERE id = ANY(%s) GROUP BY status", [ids])
    )
