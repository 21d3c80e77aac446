"""Small helpers shared by the test modules: database clock and rows, missing prerequisites."""

from __future__ import annotations

import datetime as dt
import os
from typing import NoReturn

import pytest
from django.db import connection
from django.utils import timezone


#: A time safely before the test transaction's ``now()`` (factory rows default to Python's now,
#: which is *after* the transaction started, so such rows are not yet due inside a django_db test).
def past(seconds: float = 3600) -> dt.datetime:
    return timezone.now() - dt.timedelta(seconds=seconds)


def row_text(job_id: int) -> str | None:
    """The whole stored row as PostgreSQL prints it: equal text means byte-for-byte unchanged."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT j::text FROM pgjobs_job AS j WHERE id = %s", [job_id])
        row = cursor.fetchone()
    return None if row is None else row[0]


def db_now():
    """The database's ``now()``: inside a ``django_db`` test, the whole test is one transaction, so
    every statement's ``now()`` equals this value."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def clock_now():
    """The database's ``clock_timestamp()``: the real time, later than every statement so far
    (enqueue times come from ``statement_timestamp()``, between ``db_now()`` and this)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def job_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pgjobs_job")
        return cursor.fetchone()[0]


def prerequisite_missing(message: str) -> NoReturn:
    """A test whose prerequisite this machine lacks (a browser, PgBouncer, root...).

    With ``PGJOBS_REQUIRE_ALL`` set (``.ci/run`` sets it: its machine provides every prerequisite)
    a missing one fails the run instead of hiding behind a skip. Anywhere else, the test is skipped
    with the reason and how to provide it, rather than failing the whole suite. Deliberately not
    the generic ``CI`` variable: hosted CI services set it on runners (non-root, no browser...)
    where these tests must skip."""
    if os.environ.get("PGJOBS_REQUIRE_ALL"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)
