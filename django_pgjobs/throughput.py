"""Jobs finished per minute (last hour) or per hour (last day): the overview's trends chart.

One statement, kept here so its cost is reviewed in one place. It counts rows of the partial index
``pgjobs_job_finished_idx`` (``(status, finished_at) WHERE status IN ('done', 'dead', 'cancelled')``)
in the window only: an index (only) scan of the window's range for each of the two statuses, so the
per-minute series reads about an hour of finished jobs whatever the table's size, and the per-hour
series a day of them. ``generate_series`` makes the empty buckets (zero-filled), so the chart always
has the same number of bars. ``benchmarks/bench_chart.py`` times it on a million jobs.

What is counted: ``done`` jobs (finished) and ``dead`` jobs (failed for good) by their
``finished_at``. Failed attempts that were retried are not counted: they leave no indexed timestamp
(only an entry in the job's ``history`` jsonb, which would mean reading every row's history), and a
job retried later still shows up here when it ends done or dead. Cancelled jobs are not failures and
are left out.

The statuses are literals in the SQL, not parameters: the planner must see ``status IN ('done',
'dead')`` to prove the partial index's predicate (a generic plan with ``$1`` could not use it).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

from django.db import connections

from .conf import get_settings

BucketSize = Literal["minute", "hour"]

#: Buckets per series, the current (partial) bucket included: an hour of minutes, a day of hours.
BUCKETS: dict[str, int] = {"minute": 60, "hour": 24}

# date_trunc in the session's time zone (Django sets UTC with USE_TZ): hours start on the hour.
# ``upper`` is computed once (a CTE evaluated once) so the series and the range agree on "now".
THROUGHPUT = """
WITH bounds AS MATERIALIZED (
    SELECT date_trunc(%(unit)s::text, now()) AS upper,
           date_trunc(%(unit)s::text, now()) - (%(buckets)s::int - 1) * %(step)s::interval AS lower
),
series AS (
    SELECT generate_series(b.lower, b.upper, %(step)s::interval) AS bucket FROM bounds AS b
),
counts AS (
    SELECT date_trunc(%(unit)s::text, j.finished_at) AS bucket,
           count(*) FILTER (WHERE j.status = 'done') AS done,
           count(*) FILTER (WHERE j.status = 'dead') AS dead
    FROM pgjobs_job AS j
    WHERE j.status IN ('done', 'dead') AND j.finished_at >= (SELECT b.lower FROM bounds AS b)
    GROUP BY 1
)
SELECT s.bucket, coalesce(c.done, 0) AS done, coalesce(c.dead, 0) AS dead
FROM series AS s LEFT JOIN counts AS c ON c.bucket = s.bucket
ORDER BY s.bucket
"""


@dataclass(frozen=True)
class Bucket:
    """One bar of the chart: jobs whose ``finished_at`` falls in ``[start, start + size)``."""

    start: dt.datetime
    done: int
    dead: int

    @property
    def total(self) -> int:
        return self.done + self.dead


def throughput(bucket: BucketSize, using: str | None = None) -> list[Bucket]:
    """Done and dead jobs per ``bucket`` ("minute": the last 60 minutes, "hour": the last 24
    hours), oldest first, zero-filled; the last bucket is the current, unfinished one."""
    if bucket not in BUCKETS:
        raise ValueError(f"bucket must be one of {sorted(BUCKETS)}, not {bucket!r}")
    params = {"unit": bucket, "buckets": BUCKETS[bucket], "step": f"1 {bucket}"}
    with connections[using or get_settings().DATABASE].cursor() as cursor:
        cursor.execute(THROUGHPUT, params)
        return [Bucket(start, int(done), int(dead)) for start, done, dead in cursor.fetchall()]
