"""How long the overview's trends series take on a table of a million jobs.

Run from the repository root::

    .venv/bin/python benchmarks/bench_chart.py              # 1,000,000 jobs (about a minute to build)
    .venv/bin/python benchmarks/bench_chart.py --jobs 100000 --runs 5

Builds the jobs in a scratch database (``--db-name``, default ``pgjobs_bench_chart``, dropped and
created on the server of ``--database-url``, default ``$DATABASE_URL``), as a busy day leaves them:
most are done with ``finished_at`` spread over the last 24 hours, some dead over the same day, some
done days ago (not yet pruned), a few ready, scheduled and cancelled. Then ``ANALYZE`` and it times
:func:`django_pgjobs.throughput.throughput` for "minute" and "hour" (median of ``--runs``), each
beside the naive query measured in the same run, alternating with it: a ``date_trunc`` GROUP BY
over the whole table (every done or dead job ever, no window). It measures twice: right after the
load and ``ANALYZE`` (the visibility map is empty, so an index-only scan still visits the heap),
and after ``VACUUM`` (what autovacuum, at 1 % of changed rows on this table, keeps it near).
The database is dropped at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_queue import connect, median_ms, recreate_database, server_url  # noqa: E402

#: The naive series, as one would first write it: every finished job ever, grouped, no window.
NAIVE = """
SELECT date_trunc(%(unit)s::text, finished_at) AS bucket,
       count(*) FILTER (WHERE status = 'done') AS done,
       count(*) FILTER (WHERE status = 'dead') AS dead
FROM pgjobs_job
WHERE status IN ('done', 'dead')
GROUP BY 1
ORDER BY 1
"""

#: A busy day, by share of the rows: (status, share, finished between [hours ago] a and b).
MIX: list[tuple[str, float, tuple[float, float] | None]] = [
    ("done", 0.88, (0, 24)),
    ("dead", 0.03, (0, 24)),
    ("done", 0.05, (24, 24 * 7)),  # older history, not yet pruned
    ("cancelled", 0.01, (0, 24)),
    ("ready", 0.02, None),
    ("scheduled", 0.01, None),
]


def load(cursor: object, n: int, *, shuffled: bool = False) -> None:
    """One INSERT ... SELECT per share of the mix (server-side, no round trip per row).

    Rows are written in ``finished_at`` order, as a queue leaves them (jobs finish roughly in the
    order they were enqueued, so the heap follows time); ``shuffled`` scatters them instead (the worst
    case for visiting the heap from the index before vacuum has marked pages all-visible)."""
    order = "" if shuffled else "ORDER BY t.f"
    for status, share, window in MIX:
        rows = int(n * share)
        finished = (
            f"now() - make_interval(secs => {window[0] * 3600} + random() * {(window[1] - window[0]) * 3600})"
            if window
            else "NULL::timestamptz"
        )
        run_at = "now() + interval '1 hour'" if status == "scheduled" else "now() - interval '1 day'"
        cursor.execute(  # type: ignore[attr-defined]
            f"""
            INSERT INTO pgjobs_job (task, queue, payload, status, attempts, run_at, started_at,
                                    finished_at, created_at, updated_at, last_error)
            SELECT 'bench.noop', (ARRAY['default', 'mail', 'billing'])[1 + i % 3], '{{}}'::jsonb,
                   '{status}', {0 if window is None else 1}, {run_at}, f, f, coalesce(f, now()),
                   coalesce(f, now()), {"'RuntimeError: boom'" if status == "dead" else "NULL"}
            FROM (SELECT i, {finished} AS f FROM generate_series(1, {rows}) AS i) AS t
            {order}
            """
        )


def measure(runs: int, label: str) -> list[tuple[str, float, float]]:
    from django.db import connection

    from django_pgjobs.throughput import throughput

    def naive(unit: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(NAIVE, {"unit": unit})
            cursor.fetchall()

    rows = []
    for unit in ("minute", "hour"):
        throughput(unit)  # type: ignore[arg-type]  # warm the cache and the plan once
        naive(unit)
        ours_times, base_times = [], []
        for _ in range(runs):  # alternating, so both see the same noise
            ours_times.append(median_ms(lambda u=unit: throughput(u), 1))  # type: ignore[misc]
            base_times.append(median_ms(lambda u=unit: naive(u), 1))
        rows.append(
            (f"{label}: throughput({unit!r})", statistics.median(ours_times), statistics.median(base_times))
        )
    return rows


def explain(unit: str) -> str:
    """The plan's scan of pgjobs_job, with its heap fetches (an index-only scan's visits)."""
    from django.db import connection

    from django_pgjobs.throughput import BUCKETS, THROUGHPUT

    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + THROUGHPUT,
            {"unit": unit, "buckets": BUCKETS[unit], "step": f"1 {unit}"},
        )
        lines = [r[0] for r in cursor.fetchall()]
    keep = [
        ln.strip() for ln in lines if "pgjobs_job" in ln or "Heap Fetches" in ln or "Execution Time" in ln
    ]
    return "; ".join(keep)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", "-n", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=9, help="Runs per measurement (median).")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres",
    )
    parser.add_argument("--db-name", default="pgjobs_bench_chart", help="Scratch database (dropped first).")
    parser.add_argument("--keep", action="store_true", help="Leave the scratch database behind.")
    parser.add_argument(
        "--shuffled", action="store_true", help="Rows in random finished_at order on disk (worst case)."
    )
    args = parser.parse_args(argv)

    recreate_database(args.database_url, args.db_name)
    db_url = server_url(args.database_url, args.db_name)
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    os.environ["PGJOBS_BENCH_DATABASE_URL"] = db_url
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        call_command("migrate", "django_pgjobs", verbosity=0)
        started = time.perf_counter()
        with connection.cursor() as cursor:
            load(cursor, args.jobs, shuffled=args.shuffled)
            cursor.execute("ANALYZE pgjobs_job")
            cursor.execute(
                "SELECT count(*), pg_size_pretty(pg_total_relation_size('pgjobs_job')) FROM pgjobs_job"
            )
            total, size = cursor.fetchone()
            cursor.execute(
                "SELECT count(*) FROM pgjobs_job"
                " WHERE status IN ('done', 'dead') AND finished_at > now() - interval '1 hour'"
            )
            last_hour = cursor.fetchone()[0]
        print(
            f"{total:,} jobs ({size}, {last_hour:,} finished in the last hour"
            f"{', shuffled on disk' if args.shuffled else ''}) built and analysed in "
            f"{time.perf_counter() - started:.1f} s; median of {args.runs} runs each, alternating"
        )
        rows = measure(args.runs, "after ANALYZE")
        plans = {u: explain(u) for u in ("minute", "hour")}
        with connection.cursor() as cursor:
            cursor.execute("VACUUM (ANALYZE) pgjobs_job")
        rows += measure(args.runs, "after VACUUM")
        plans_vacuumed = {u: explain(u) for u in ("minute", "hour")}
        print(f"\n{'measurement':<40} {'ours':>10} {'naive GROUP BY':>15} {'ours/naive':>11}")
        print(f"{'-' * 40} {'-' * 10} {'-' * 15} {'-' * 11}")
        for name, ours, base in rows:
            print(f"{name:<40} {ours:>7.1f} ms {base:>12.1f} ms {ours / base:>10.2f}x")
        print()
        for label, found in (("after ANALYZE", plans), ("after VACUUM", plans_vacuumed)):
            for unit, plan in found.items():
                print(f"plan {label}, {unit}: {plan}")
    finally:
        from django.db import connections

        connections.close_all()
        if not args.keep:
            with connect(server_url(args.database_url, "postgres")) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{args.db_name}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
