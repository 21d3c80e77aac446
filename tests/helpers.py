"""Small database helpers shared by the foundation test modules."""

from __future__ import annotations

import datetime as dt

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


def job_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pgjobs_job")
        return cursor.fetchone()[0]
