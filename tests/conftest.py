from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import connection


@pytest.fixture
def jobs_table_is_empty() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pgjobs_job")
        assert cursor.fetchone()[0] == 0


@pytest.fixture
def workers():
    """Start real ``runjobs`` processes; every one still alive at the end is SIGKILLed."""
    from tests.processes import WorkerProcess

    started: list[WorkerProcess] = []

    def start(*args: str, **kwargs) -> WorkerProcess:
        proc = WorkerProcess(*args, **kwargs)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.proc.poll() is None:
            print(f"--- worker {proc.pid} log ---\n{proc.output()}")
        proc.stop()


@pytest.fixture
def clean_executions():
    from tests.testapp.jobs import EXECUTIONS_TABLE

    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS test_executions")
        cursor.execute(EXECUTIONS_TABLE)
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS test_executions")


# -- foundation suite helpers ---------------------------------------------------------------------


@pytest.fixture
def pg_connect():
    """Open direct psycopg connections (autocommit) to the test database; all closed at the end.

    These are real, separate sessions: they see only committed rows, so tests using them need
    ``@pytest.mark.django_db(transaction=True)``.
    """
    import psycopg

    opened: list = []

    def connect(**kwargs):
        s = connection.settings_dict
        conn = psycopg.connect(
            dbname=s["NAME"],
            user=s["USER"] or None,
            password=s["PASSWORD"] or None,
            host=s["HOST"] or None,
            port=s["PORT"] or None,
            autocommit=True,
            **kwargs,
        )
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        conn.close()


@pytest.fixture
def report(capsys: pytest.CaptureFixture[str]) -> Callable[[str], None]:
    """Print a measured figure past pytest's output capture, so every run's log (CI's too) shows it."""

    def say(line: str) -> None:
        with capsys.disabled():
            print(line)

    return say
