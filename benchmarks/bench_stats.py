"""How long ``queue_stats()`` and ``manage.py jobstats --json`` take on a table of 1,000,000 jobs.

Run from the repository root::

    .venv/bin/python benchmarks/bench_stats.py               # 1,000,000 jobs, 15 runs each
    .venv/bin/python benchmarks/bench_stats.py --jobs 100000 --runs 5
    .venv/bin/python benchmarks/bench_stats.py --reuse       # keep the table from the last run

The table is what a busy deployment keeps: mostly ``done`` jobs spread over the last day (the
retention window holds days of them), some ``dead`` and ``cancelled``, and a live backlog of
``ready``, ``scheduled`` and ``running`` jobs over six queues. A finished job's id grows with its time, as in
a real table (rows are appended as jobs are enqueued and finish soon after), so the last hour's
jobs sit in the newest pages; the backlog's rows are scattered over the whole table (the worse
case for reading them). It is written with one
``INSERT ... SELECT generate_series`` (the store's one-writer rule is about application code; a
benchmark fixture is data), then ``VACUUM ANALYZE``d as autovacuum would leave it.

The baseline is the obvious statement a dashboard would run, measured in the same run, alternated
with ours: ``SELECT queue, status, count(*) FROM pgjobs_job GROUP BY queue, status``. Every figure
is the median of ``--runs`` runs (the machine is shared and noisy), with the ratio ours / baseline.

The script drops and recreates its own scratch database (``--db-name``, default
``pgjobs_bench_stats``) on the server of ``--database-url`` (default ``$DATABASE_URL``, else
``postgres://postgres@127.0.0.1:5432/postgres``) and migrates ``django_pgjobs`` into it.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_queue import ROOT, connect, recreate_database, server_url, worker_env

#: Share of the jobs in each state (the rest are done), and the queues they are spread over.
SHARES = {"dead": 0.015, "cancelled": 0.002, "ready": 0.01, "scheduled": 0.008, "running": 0.0005}
QUEUES = ["default", "mail", "reports", "webhooks", "billing", "search"]

#: One statement writes every row: state by the row's number, queue by another, times spread over
#: the day before now (done/dead/cancelled by finished_at), the next hour (scheduled) or the last
#: ten minutes (ready, running).
BUILD = """
INSERT INTO pgjobs_job (task, queue, payload, status, priority, attempts, max_attempts, run_at,
                        claim_token, locked_at, locked_by, lease_expires_at, result, last_error,
                        history, started_at, finished_at, created_at, updated_at)
SELECT 'bench.noop', q.queue, '{"args": [], "kwargs": {}}'::jsonb, s.status, 0,
       CASE s.status WHEN 'dead' THEN 5 WHEN 'done' THEN 1 WHEN 'running' THEN 1 ELSE 0 END, 5,
       t.run_at,
       CASE WHEN s.status = 'running' THEN 1000000000 + rnd.g END,
       CASE WHEN s.status = 'running' THEN t.run_at END,
       CASE WHEN s.status = 'running' THEN 'bench-worker#1' END,
       CASE WHEN s.status = 'running' THEN now() + interval '60 seconds' END,
       CASE WHEN s.status = 'done' THEN '{"ok": true}'::jsonb END,
       CASE WHEN s.status = 'dead' THEN 'RuntimeError: boom' END,
       '[]'::jsonb,
       CASE WHEN s.status IN ('done', 'dead', 'running') THEN t.run_at END,
       CASE WHEN s.status IN ('done', 'dead', 'cancelled') THEN t.run_at + interval '50 milliseconds' END,
       t.run_at, t.run_at
FROM (SELECT g, random() AS r FROM generate_series(1, %(n)s) AS g) AS rnd
CROSS JOIN LATERAL (
    SELECT CASE
        WHEN rnd.r < %(dead)s THEN 'dead'
        WHEN rnd.r < %(cancelled)s THEN 'cancelled'
        WHEN rnd.r < %(ready)s THEN 'ready'
        WHEN rnd.r < %(scheduled)s THEN 'scheduled'
        WHEN rnd.r < %(running)s THEN 'running'
        ELSE 'done' END AS status
) AS s
CROSS JOIN LATERAL (
    SELECT (%(queues)s::text[])[1 + (rnd.g %% %(nqueues)s)] AS queue
) AS q
CROSS JOIN LATERAL (
    SELECT CASE
        WHEN s.status = 'scheduled' THEN now() + random() * interval '1 hour'
        WHEN s.status IN ('ready', 'running') THEN now() - random() * interval '10 minutes'
        ELSE now() - (1 - rnd.g::float8 / %(n)s) * interval '24 hours'
                   - random() * interval '2 minutes' END AS run_at
) AS t
"""

WORKERS = """
INSERT INTO pgjobs_worker (name, worker_id, host, pid, queues, queue_limits, concurrency, version,
                           started_at, heartbeat_at, expires_at, in_flight)
VALUES ('bench-worker#1', 'bench-worker', 'bench', 1, '[]', '{}', 8, 'bench', now(), now(),
        now() + interval '1 day', 8),
       ('bench-mail#1', 'bench-mail', 'bench', 2, '["mail", "webhooks"]', '{}', 4, 'bench', now(),
        now(), now() + interval '1 day', 2)
"""

BASELINE = "SELECT queue, status, count(*) FROM pgjobs_job GROUP BY queue, status"


def build(db_url: str, n: int) -> None:
    thresholds: dict[str, Any] = {}
    edge = 0.0
    for state, share in SHARES.items():
        edge += share
        thresholds[state] = edge
    with connect(db_url) as conn:
        started = time.perf_counter()
        conn.execute("TRUNCATE pgjobs_job, pgjobs_worker, pgjobs_queue_pause")
        conn.execute(BUILD, {"n": n, "queues": QUEUES, "nqueues": len(QUEUES), **thresholds})
        conn.execute(WORKERS)
        conn.execute("INSERT INTO pgjobs_queue_pause VALUES ('reports', now(), 'bench')")
        log(f"inserted {n:,} jobs in {time.perf_counter() - started:.1f}s")
        started = time.perf_counter()
        conn.execute("VACUUM ANALYZE pgjobs_job")
        log(f"VACUUM ANALYZE in {time.perf_counter() - started:.1f}s")


def log(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


def alternate(ours: Callable[[], object], base: Callable[[], object], runs: int) -> tuple[float, float]:
    """Medians of ours and the baseline, run in turn (each goes first every other round), so both see
    the same cache state and the same neighbours' noise."""
    mine: list[float] = []
    theirs: list[float] = []
    for i in range(runs):
        pair = [(ours, mine), (base, theirs)]
        for fn, times in pair if i % 2 == 0 else reversed(pair):
            started = time.perf_counter()
            fn()
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(mine), statistics.median(theirs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", "-n", type=int, default=1_000_000, help="Jobs in the table (1000000).")
    parser.add_argument("--runs", type=int, default=15, help="Runs per figure; the median is printed (15).")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres",
        help="Server to use (its database is only used to create the scratch one).",
    )
    parser.add_argument("--db-name", default="pgjobs_bench_stats", help="Scratch database (dropped first).")
    parser.add_argument(
        "--reuse", action="store_true", help="Keep the scratch database and its table from a previous run."
    )
    args = parser.parse_args(argv)

    db_url = server_url(args.database_url, args.db_name)
    if not args.reuse:
        recreate_database(args.database_url, args.db_name)
    os.environ.update(worker_env(db_url))
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    if not args.reuse:
        call_command("migrate", "django_pgjobs", verbosity=0)
        build(db_url, args.jobs)
    from django_pgjobs.stats import queue_stats

    def baseline() -> list[tuple]:
        with connection.cursor() as cursor:
            cursor.execute(BASELINE)
            return cursor.fetchall()

    def jobstats_json() -> dict:
        out = io.StringIO()
        call_command("jobstats", "--json", stdout=out)
        return json.loads(out.getvalue())

    queue_stats()  # warm: the first run reads the table into the cache, as every later scrape finds it
    baseline()
    measured: list[tuple[str, Callable[[], object]]] = [
        ("queue_stats()", queue_stats),
        ("queue_stats(exact=True)", lambda: queue_stats(exact=True)),
        ("manage.py jobstats --json (in process)", jobstats_json),
    ]
    try:
        from django_pgjobs.metrics import exposition

        measured.append(("/pgjobs/metrics body (metrics.exposition())", exposition))
    except ImportError:
        log("prometheus_client is not installed: no metrics row")
    rows = []
    for label, fn in measured:
        ours, base = alternate(fn, baseline, args.runs)
        rows.append((label, ours, base))

    with psycopg.connect(db_url) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        total = conn.execute("SELECT count(*) FROM pgjobs_job").fetchone()[0]
        size = conn.execute("SELECT pg_size_pretty(pg_table_size('pgjobs_job'))").fetchone()[0]
    print(
        f"\njobstats benchmark: {total:,} jobs ({size}), median of {args.runs} runs, "
        f"PostgreSQL {version}, {os.cpu_count()} CPUs"
    )
    width = max(len(r[0]) for r in rows)
    print(f"{'measurement':<{width}}  {'ours':>10}  {'baseline: GROUP BY queue, status':>34}  ours/base")
    print(f"{'-' * width}  {'-' * 10}  {'-' * 34}  ---------")
    for label, mine, theirs in rows:
        print(f"{label:<{width}}  {mine:>7.2f} ms  {theirs:>31.2f} ms  {mine / theirs:>8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
