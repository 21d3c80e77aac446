"""throughput(): done and dead jobs per bucket, zero-filled, oldest first, from the finished index.

The test's transaction fixes ``now()`` (it is the transaction's start), so rows placed relative to
the database's own ``date_trunc(..., now())`` land in known buckets whatever the wall clock does.
"""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from django.db import connection

from django_pgjobs.throughput import BUCKETS, throughput
from tests.factories import DeadJobFactory, JobFactory

pytestmark = pytest.mark.django_db


def db_trunc(unit: str) -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT date_trunc(%s::text, now())", [unit])
        return cursor.fetchone()[0]


def done(at: dt.datetime, **kw: object) -> None:
    JobFactory(done=True, finished_at=at, **kw)


def test_per_minute_buckets_count_done_and_dead_by_finished_at():
    top = db_trunc("minute")
    done(top + dt.timedelta(seconds=1))  # the current, unfinished minute: the last bucket
    done(top + dt.timedelta(seconds=2))
    DeadJobFactory(finished_at=top + dt.timedelta(seconds=3))
    done(top - dt.timedelta(minutes=5) + dt.timedelta(seconds=59))  # five buckets back
    DeadJobFactory(finished_at=top - dt.timedelta(minutes=59))  # the oldest bucket, its first instant
    done(top - dt.timedelta(minutes=59, microseconds=1))  # just before the window: not counted
    JobFactory(cancelled=True, finished_at=top)  # cancelled is no outcome of work: not counted
    JobFactory(running=True)
    JobFactory()

    series = throughput("minute")

    assert len(series) == BUCKETS["minute"] == 60
    assert [b.start for b in series] == [top - dt.timedelta(minutes=59 - i) for i in range(60)]
    counts = {i: (b.done, b.dead) for i, b in enumerate(series) if b.total}
    assert counts == {0: (0, 1), 54: (1, 0), 59: (2, 1)}
    assert series[-1].total == 3


def test_per_hour_buckets_cover_the_last_day():
    top = db_trunc("hour")
    done(top + dt.timedelta(minutes=1))
    done(top - dt.timedelta(hours=23))
    DeadJobFactory(finished_at=top - dt.timedelta(hours=23) + dt.timedelta(minutes=59))
    done(top - dt.timedelta(hours=23, seconds=1))  # 24 hours and more ago: outside

    series = throughput("hour")

    assert len(series) == 24
    assert series[0].start == top - dt.timedelta(hours=23) and series[-1].start == top
    assert (series[0].done, series[0].dead) == (1, 1)
    assert (series[-1].done, series[-1].dead) == (1, 0)
    assert sum(b.total for b in series) == 3


def test_no_finished_jobs_gives_zero_filled_buckets():
    JobFactory()
    for size, n in BUCKETS.items():
        series = throughput(size)  # type: ignore[arg-type]
        assert len(series) == n and all(b.total == 0 for b in series)
        assert all(later.start > earlier.start for earlier, later in itertools.pairwise(series))
        assert all(b.start.tzinfo is not None for b in series)


def test_unknown_bucket_is_refused():
    with pytest.raises(ValueError):
        throughput("day")  # type: ignore[arg-type]


def test_the_statement_can_use_the_finished_index():
    """The literals ``status IN ('done', 'dead')`` let the planner prove the partial index's
    predicate; with sequential scans off (a small test table) the plan must name the index."""
    from django_pgjobs.throughput import THROUGHPUT

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + THROUGHPUT, {"unit": "minute", "buckets": 60, "step": "1 minute"})
        plan = "\n".join(r[0] for r in cursor.fetchall())
    assert "pgjobs_job_finished_idx" in plan, plan
