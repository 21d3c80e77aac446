"""Throughput and wake-up latency of django-pgjobs, each beside a raw psycopg baseline of the seed's SQL.

Run from the repository root::

    .venv/bin/python benchmarks/bench_queue.py            # 20,000 jobs
    .venv/bin/python benchmarks/bench_queue.py --quick    # 2,000 jobs, a smoke run

The machine is shared and noisy, so every figure is printed beside a baseline measured in the same
run, right before it, with the ratio ours / baseline. The baseline is the seed article's own SQL
(``jobs`` table, exact DDL) driven by psycopg 3 directly: no Django, no threads, no fencing, no
history. Each raw statement runs in autocommit, i.e. it is its own transaction (the seed wraps each
one in ``with conn.transaction()``; in autocommit that adds a BEGIN and a COMMIT round trip, so this
baseline is the stronger one).

The script drops and recreates its own scratch database (``--db-name``, default ``pgjobs_bench``) on
the server of ``--database-url`` (default ``$DATABASE_URL``, else ``postgres://postgres@127.0.0.1:5432``),
migrates ``django_pgjobs`` into it and creates the seed's table beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.rows import dict_row

ROOT = Path(__file__).resolve().parent.parent

# -- the seed's SQL, verbatim (the raw baseline) -------------------------------------------------
SEED_DDL = """
CREATE TABLE jobs (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue           text NOT NULL DEFAULT 'default',
    payload         jsonb NOT NULL,
    status          text NOT NULL DEFAULT 'ready'
                    CHECK (status IN ('ready', 'running', 'done', 'dead')),
    attempts        integer NOT NULL DEFAULT 0,
    max_attempts    integer NOT NULL DEFAULT 5,
    run_at          timestamptz NOT NULL DEFAULT now(),
    locked_at       timestamptz,
    locked_by       text,
    idempotency_key text UNIQUE,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX jobs_ready_idx
    ON jobs (queue, run_at, id)
    WHERE status = 'ready';
"""

SEED_ENQUEUE = """\
INSERT INTO jobs (queue, payload, idempotency_key)
VALUES (%s, %s, %s)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id"""

CLAIM_SQL = """\
WITH candidate AS (
    SELECT id FROM jobs
    WHERE status = 'ready' AND queue = %s AND run_at <= now()
    ORDER BY run_at, id
    FOR UPDATE SKIP LOCKED
    LIMIT 1
)
UPDATE jobs AS j
SET status = 'running', locked_at = now(), locked_by = %s,
    attempts = attempts + 1, updated_at = now()
FROM candidate
WHERE j.id = candidate.id
RETURNING j.*
"""
CLAIM_BATCH_SQL = CLAIM_SQL.replace("LIMIT 1", "LIMIT 100")

COMPLETE_SQL = """UPDATE jobs SET status = 'done', locked_at = NULL,
               locked_by = NULL, updated_at = now()
               WHERE id = %s AND locked_by = %s"""
COMPLETE_BATCH_SQL = COMPLETE_SQL.replace("WHERE id = %s", "WHERE id = ANY(%s)")

PAYLOAD = {"args": [], "kwargs": {}}  # what ``noop.enqueue()`` stores
TASK = "bench.noop"
TASKS_TASK = "benchmarks.tasks.noop_task"  # the @task's registry name (its module path)
RAW_WORKER = "bench:raw"


# -- plumbing -------------------------------------------------------------------------------------
def server_url(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + dbname))


def connect(url: str, **kwargs: Any) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True, **kwargs)


def recreate_database(url: str, name: str) -> None:
    admin_db = urlsplit(url).path.lstrip("/") or "postgres"
    if admin_db == name:
        admin_db = "postgres"
    with connect(server_url(url, admin_db)) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def worker_env(db_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    env["PGJOBS_BENCH_DATABASE_URL"] = db_url
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def chunks(n: int, size: int) -> list[int]:
    return [min(size, n - i) for i in range(0, n, size)]


@dataclass
class Row:
    measurement: str
    ours: float
    base: float
    base_label: str
    unit: str
    higher_is_better: bool = True

    def ratio(self) -> str:
        return f"{self.ours / self.base:.2f}x" if self.base else "-"


def fmt(value: float, unit: str) -> str:
    if unit == "ms":
        return f"{value:,.2f} ms"
    if unit == "share":
        return f"{value:.0%}"
    return f"{value:,.0f} /s"


class BackendCpu:
    """CPU seconds spent by the server processes serving one database while it runs: polls
    ``pg_stat_activity`` every 20 ms and reads each backend's ``/proc/<pid>/stat`` (the server is
    local). A backend that was already there counts from its first sample; one that appears later
    counts from its own start (a connection's set-up is part of what it costs)."""

    def __init__(self, db_url: str) -> None:
        self.conn = connect(db_url)
        self._stop = threading.Event()
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._thread: threading.Thread | None = None

    @staticmethod
    def _cpu(pid: int) -> float | None:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _sample(self, initial: bool = False) -> None:
        pids = [
            r[0]
            for r in self.conn.execute(
                "SELECT pid FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchall()
        ]
        for pid in pids:
            cpu = self._cpu(pid)
            if cpu is None:
                continue
            self._first.setdefault(pid, cpu if initial else 0.0)
            self._last[pid] = cpu

    def __enter__(self) -> BackendCpu:
        self._sample(initial=True)

        def run() -> None:
            while not self._stop.wait(0.02):
                self._sample()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        self._sample()
        self.conn.close()

    @property
    def seconds(self) -> float:
        return sum(self._last[pid] - self._first[pid] for pid in self._last)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# -- the benchmark --------------------------------------------------------------------------------
class Bench:
    def __init__(self, db_url: str, n: int, latency_samples: int, verbose: bool) -> None:
        self.db_url = db_url
        self.n = n
        self.latency_samples = latency_samples
        self.verbose = verbose
        self.rows: list[Row] = []
        self.notes: list[str] = []
        self.raw = connect(db_url)
        #: A REPEATABLE READ transaction holding its snapshot while drains run (--hold-snapshot).
        self.hold_snapshot = False
        self._startup_cpu: float | None = None

    def log(self, message: str) -> None:
        print(f"  .. {message}", file=sys.stderr, flush=True)

    # -- setup ------------------------------------------------------------------------------------
    def setup(self) -> None:
        os.environ.update(worker_env(self.db_url))
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", "django_pgjobs", verbosity=0)
        self.raw.execute(SEED_DDL)

    def reset(self) -> None:
        from django.db import connection

        connection.close()
        self.raw.execute("TRUNCATE jobs, pgjobs_job RESTART IDENTITY")

    def vacuum(self) -> None:
        self.raw.execute("VACUUM ANALYZE jobs")
        self.raw.execute("VACUUM ANALYZE pgjobs_job")

    # -- enqueue ----------------------------------------------------------------------------------
    def raw_enqueue_single(self) -> float:
        payload = json.dumps(PAYLOAD)
        start = time.perf_counter()
        for _ in range(self.n):
            self.raw.execute(SEED_ENQUEUE, ("default", payload, None)).fetchone()
        return self.n / (time.perf_counter() - start)

    def raw_enqueue_bulk(self, size: int = 1000) -> float:
        payload = json.dumps(PAYLOAD)
        start = time.perf_counter()
        for count in chunks(self.n, size):
            values = ", ".join(["(%s, %s)"] * count)
            params: list[Any] = []
            for _ in range(count):
                params += ["default", payload]
            self.raw.execute(f"INSERT INTO jobs (queue, payload) VALUES {values}", params)
        return self.n / (time.perf_counter() - start)

    def ours_enqueue_single(self) -> float:
        from benchmarks.jobs import noop

        start = time.perf_counter()
        for _ in range(self.n):
            noop.enqueue()
        return self.n / (time.perf_counter() - start)

    def ours_enqueue_bulk(self, size: int = 1000) -> float:
        from django_pgjobs import NewJob
        from django_pgjobs.models import Job

        start = time.perf_counter()
        for count in chunks(self.n, size):
            Job.objects.enqueue_many([NewJob(TASK, PAYLOAD) for _ in range(count)])
        return self.n / (time.perf_counter() - start)

    def check_enqueued(self, table: str, n: int | None = None) -> None:
        want = self.n if n is None else n
        count = self.raw.execute(f"SELECT count(*) FROM {table} WHERE status = 'ready'").fetchone()[0]
        if count != want:
            raise SystemExit(f"expected {want} ready rows in {table}, found {count}")

    def concurrent_enqueue(self, mode: str, processes: int) -> float:
        """Jobs/s of ``processes`` processes enqueueing one job per call at once (``mode``: see
        ``enqueue_child``), from the moment they are released together to the last one's end."""
        per_child = max(1, self.n // processes)
        children = []
        with connect(self.db_url) as gate:
            gate.execute("SELECT pg_advisory_lock(%s)", (START_LOCK,))
            for _ in range(processes):
                children.append(
                    subprocess.Popen(
                        [sys.executable, __file__, "--enqueue-child", mode, str(per_child)],
                        cwd=ROOT,
                        env={
                            **worker_env(self.db_url),
                            **({"PGJOBS_BENCH_LISTEN": "0"} if mode == "ours-quiet" else {}),
                        },
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                )
            for child in children:  # each prints "ready" once connected, set up and waiting
                if child.stdout is None or child.stdout.readline().strip() != "ready":
                    raise SystemExit(f"enqueue child ({mode}) did not start")
            waiting = 0
            deadline = time.monotonic() + 60
            while waiting < processes and time.monotonic() < deadline:
                waiting = self.raw.execute(
                    "SELECT count(*) FROM pg_locks "
                    "WHERE locktype = 'advisory' AND objid = %s AND NOT granted",
                    (START_LOCK,),
                ).fetchone()[0]
            start = time.perf_counter()
            gate.execute("SELECT pg_advisory_unlock(%s)", (START_LOCK,))
            for child in children:
                if child.wait(timeout=600) != 0:
                    raise SystemExit(f"enqueue child ({mode}) failed")
            elapsed = time.perf_counter() - start
        return per_child * processes / elapsed

    def task_vs_job_enqueue(self, rounds: int = 10) -> tuple[float, float]:
        """(jobs/s through ``noop_task.enqueue()``, the django.tasks backend; jobs/s through our own
        ``noop.enqueue()``), ``self.n`` of each, alternating in ``rounds`` slices so that both see
        the same table size and the same machine noise."""
        from benchmarks.jobs import noop
        from benchmarks.tasks import noop_task

        per_round = chunks(self.n, max(1, self.n // rounds))
        spent = {"task": 0.0, "job": 0.0}
        for index, count in enumerate(per_round):
            # Which goes first alternates too, so neither always follows the other's autovacuum.
            for kind in ("job", "task") if index % 2 else ("task", "job"):
                call = noop_task.enqueue if kind == "task" else noop.enqueue
                start = time.perf_counter()
                for _ in range(count):
                    call()
                spent[kind] += time.perf_counter() - start
        return self.n / spent["task"], self.n / spent["job"]

    def enqueue_tasks(self) -> None:
        from django_pgjobs.tasks import FRAMEWORK

        if FRAMEWORK is None:
            self.notes.append("django.tasks backend: skipped (no tasks framework installed)")
            return
        import django

        self.reset()
        self.log("enqueue, one per call: django.tasks backend vs our own enqueue (alternating)")
        tasks, jobs = self.task_vs_job_enqueue()
        self.check_enqueued("pgjobs_job", 2 * self.n)
        self.rows.append(
            Row(
                "enqueue via django.tasks backend, 1 per call (jobs/s)",
                tasks,
                jobs,
                "noop.enqueue() (ours)",
                "/s",
            )
        )
        self.notes.append(
            f"django.tasks backend row: {FRAMEWORK} on Django {django.get_version()}; its baseline is our "
            "own @job enqueue, alternated with it in 10 slices (target: ratio >= 0.90)"
        )

    def drain_tasks(self, rounds: int = 3) -> None:
        """Drains of no-op @task jobs next to the same drains of @job jobs: the worker-side cost of
        the adapter (signals, normalisation; no query unless something observes the run). Each
        configuration runs ``rounds`` times in alternating order; the medians are reported, since
        one drain on this shared machine can be 20 % off the next."""
        from django_pgjobs.tasks import FRAMEWORK

        if FRAMEWORK is None:
            self.notes.append("django.tasks drain: skipped (no tasks framework installed)")
            return
        for label, args in (("runjobs -c 1", ["-c", "1"]), ("runjobs -c 8", ["-c", "8"])):
            spans: dict[str, list[float]] = {TASK: [], TASKS_TASK: []}
            for index in range(rounds):
                for task in (TASK, TASKS_TASK) if index % 2 == 0 else (TASKS_TASK, TASK):
                    kind = "@task" if task == TASKS_TASK else "@job"
                    self.log(f"drain {label}: {kind} no-ops (round {index + 1} of {rounds})")
                    spans[task].append(self.ours_drain(args, task=task)[1])
            job_span, task_span = (statistics.median(spans[t]) for t in (TASK, TASKS_TASK))
            self.notes.append(
                f"drain {label} first start->last finish, each round: "
                f"@job {', '.join(f'{s:,.0f}' for s in spans[TASK])}; "
                f"@task {', '.join(f'{s:,.0f}' for s in spans[TASKS_TASK])} jobs/s"
            )
            self.rows.append(
                Row(
                    f"drain @task {label}, first start->last finish (median of {rounds})",
                    task_span,
                    job_span,
                    "@job drain (ours)",
                    "/s",
                )
            )

    def enqueue(self) -> None:
        for label, raw, ours, base_label in (
            (
                "enqueue, one per call",
                self.raw_enqueue_single,
                self.ours_enqueue_single,
                "INSERT, 1 per transaction",
            ),
            (
                "enqueue, bulk 1000 per call",
                self.raw_enqueue_bulk,
                self.ours_enqueue_bulk,
                "multi-row INSERT per 1000",
            ),
        ):
            self.reset()
            self.log(f"{label}: raw")
            base = raw()
            self.check_enqueued("jobs")
            self.log(f"{label}: ours")
            mine = ours()
            self.check_enqueued("pgjobs_job")
            self.rows.append(Row(f"{label} (jobs/s)", mine, base, base_label, "/s"))
        processes = 16
        total = max(1, self.n // processes) * processes
        results = {}
        for mode in ("raw", "raw-notify", "ours", "ours-quiet"):
            self.reset()
            self.log(f"enqueue, {processes} processes at once: {mode}")
            results[mode] = self.concurrent_enqueue(mode, processes)
            self.check_enqueued("jobs" if mode.startswith("raw") else "pgjobs_job", total)
        label = f"enqueue, {processes} processes at once (jobs/s)"
        self.rows.append(Row(label, results["ours"], results["raw"], "INSERT, 1 per transaction", "/s"))
        self.rows.append(
            Row(label, results["ours"], results["ours-quiet"], "ours with LISTEN off (no NOTIFY)", "/s")
        )
        self.rows.append(
            Row(
                f"enqueue, {processes} at once, NOTIFY in the INSERT",
                results["raw-notify"],
                results["raw"],
                "INSERT, 1 per transaction",
                "/s",
            )
        )
        self.enqueue_tasks()

    # -- drain ------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def snapshot_held(self) -> Any:
        """With ``hold_snapshot``: a REPEATABLE READ transaction that has taken its snapshot and
        stays open, so nothing the drain deletes or updates can be cleaned up meanwhile (a report,
        a long analytics query, a forgotten psql session)."""
        if not self.hold_snapshot:
            yield
            return
        holder = connect(self.db_url)
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pgjobs_job").fetchone()
        try:
            yield
        finally:
            holder.execute("ROLLBACK")
            holder.close()

    def raw_drain(self, batch: bool) -> float:
        self.reset()
        self.raw_enqueue_bulk()
        self.vacuum()
        conn = connect(self.db_url, row_factory=dict_row)
        with self.snapshot_held(), BackendCpu(self.db_url) as server:
            client = time.process_time()
            rate = self._raw_loop(conn, batch)
            client = time.process_time() - client
        self.last_cpu = (client / self.n * 1e6, server.seconds / self.n * 1e6)
        conn.close()
        left = self.raw.execute("SELECT count(*) FROM jobs WHERE status <> 'done'").fetchone()[0]
        if left:
            raise SystemExit(f"raw drain: {left} not done")
        return rate

    def _raw_loop(self, conn: psycopg.Connection, batch: bool) -> float:
        done = 0
        start = time.perf_counter()
        if batch:
            while True:
                jobs = conn.execute(CLAIM_BATCH_SQL, ("default", RAW_WORKER)).fetchall()
                if not jobs:
                    break
                conn.execute(COMPLETE_BATCH_SQL, ([j["id"] for j in jobs], RAW_WORKER))
                done += len(jobs)
        else:
            while True:
                job = conn.execute(CLAIM_SQL, ("default", RAW_WORKER)).fetchone()
                if job is None:
                    break
                conn.execute(COMPLETE_SQL, (job["id"], RAW_WORKER))
                done += 1
        elapsed = time.perf_counter() - start
        if done != self.n:
            raise SystemExit(f"raw drain: {done} done of {self.n}")
        return self.n / elapsed

    def startup_cpu(self) -> float:
        """CPU seconds of ``runjobs --burst`` on an empty queue: start-up and shutdown alone."""
        if self._startup_cpu is None:
            self.reset()
            before = children_cpu()
            subprocess.run(
                [sys.executable, "-m", "django", "runjobs", "-v", "0", "--burst"],
                cwd=ROOT,
                env=worker_env(self.db_url),
                check=True,
                capture_output=True,
            )
            self._startup_cpu = children_cpu() - before
        return self._startup_cpu

    def ours_drain(self, args: list[str], task: str = TASK) -> tuple[float, float]:
        """(jobs/s from process start to exit, jobs/s from the first start to the last finish)."""
        from django_pgjobs import NewJob
        from django_pgjobs.models import Job

        self.reset()
        for count in chunks(self.n, 5000):
            Job.objects.enqueue_many([NewJob(task, PAYLOAD) for _ in range(count)])
        from django.db import connection

        connection.close()
        self.vacuum()
        log = tempfile.TemporaryFile()
        cmd = [sys.executable, "-m", "django", "runjobs", "-v", "0", "--burst", *args]
        with self.snapshot_held(), BackendCpu(self.db_url) as server:
            worker_cpu = children_cpu()
            start = time.perf_counter()
            proc = subprocess.Popen(
                cmd, cwd=ROOT, env=worker_env(self.db_url), stdout=log, stderr=subprocess.STDOUT
            )
            # With --processes the supervisor exits once every child drained the queue and exited 0.
            code = proc.wait()
            elapsed = time.perf_counter() - start
            worker_cpu = children_cpu() - worker_cpu
        self.last_cpu = (worker_cpu / self.n * 1e6, server.seconds / self.n * 1e6)
        log.seek(0)
        output = log.read().decode(errors="replace").strip()
        log.close()
        if code != 0 or (output and self.verbose):
            print(output, file=sys.stderr)
        if code != 0:
            raise SystemExit(f"{' '.join(cmd)} exited with {code}")
        row = self.raw.execute(
            """SELECT count(*) FILTER (WHERE status = 'done'), count(*), max(attempts),
                      extract(epoch FROM max(finished_at) - min(started_at))
               FROM pgjobs_job"""
        ).fetchone()
        done, total, max_attempts, span = row
        if done != self.n or total != self.n or max_attempts != 1:
            raise SystemExit(f"ours {args}: {done}/{total} done, max attempts {max_attempts}")
        return self.n / elapsed, self.n / float(span)

    def drain(self, configs: list[tuple[str, list[str], bool]]) -> None:
        for label, args, batched in configs:
            base_label = "claim+ack 100/statement" if batched else "claim+ack 1/transaction"
            self.log(f"drain {label}: raw baseline ({base_label})")
            base = self.raw_drain(batched)
            self.log(f"drain {label}: ours")
            base_cpu = self.last_cpu
            wall, span = self.ours_drain(args)
            ours_cpu = self.last_cpu
            startup = self.startup_cpu() / self.n * 1e6
            worker, server = ours_cpu
            self.notes.append(
                f"CPU per job, drain {label}: worker {worker:.0f} us ({worker - startup:.0f} without "
                f"start-up), PostgreSQL {server:.0f} us; raw client {base_cpu[0]:.0f} us, "
                f"PostgreSQL {base_cpu[1]:.0f} us"
            )
            self.rows.append(
                Row(f"drain {label}, process start->exit (jobs/s)", wall, base, base_label, "/s")
            )
            self.rows.append(Row(f"drain {label}, first start->last finish", span, base, base_label, "/s"))

    def held_snapshot(self, config: tuple[str, list[str]]) -> None:
        """The same drains without and with a snapshot held open throughout: every claim then walks
        the index entries of jobs finished since (vacuum may not remove them), most for small
        claims. Reports the share of its speed each side keeps."""
        label, args = config
        rates: dict[tuple[str, bool], float] = {}
        for hold in (False, True):
            self.hold_snapshot = hold
            self.log(f"drain {label}{' with a held snapshot' if hold else ''}: raw batched")
            rates[("raw", hold)] = self.raw_drain(True)
            self.log(f"drain {label}{' with a held snapshot' if hold else ''}: ours")
            rates[("ours", hold)] = self.ours_drain(args)[1]
        self.hold_snapshot = False
        ours_kept = rates[("ours", True)] / rates[("ours", False)]
        raw_kept = rates[("raw", True)] / rates[("raw", False)]
        self.rows.append(
            Row(
                f"drain {label} with a snapshot held, share of its own speed",
                ours_kept,
                raw_kept,
                "raw batched, same",
                "share",
            )
        )
        self.notes.append(
            "held snapshot: "
            + ", ".join(
                f"{side} {'held' if hold else 'free'} {rate:,.0f} jobs/s"
                for (side, hold), rate in rates.items()
            )
        )

    # -- idle wake-up latency ---------------------------------------------------------------------
    def raw_wakeup(self) -> tuple[list[float], list[float]]:
        """Seed SQL woken by NOTIFY: (claim start - created_at on the DB clock, pure NOTIFY delivery)."""
        self.reset()
        listener = connect(self.db_url, row_factory=dict_row)
        listener.execute("LISTEN bench_wake")
        done = threading.Event()
        stop = threading.Event()
        received: list[float] = []
        claim: list[float] = []  # locked_at - created_at of each claimed row (DB clock), ms
        mode = {"claim": True}

        def listen() -> None:
            while not stop.is_set():
                # Act after the generator returns: it holds the connection while it waits.
                if not list(listener.notifies(timeout=0.2, stop_after=1)):
                    continue
                received.append(time.perf_counter())
                if mode["claim"]:
                    job = listener.execute(CLAIM_SQL, ("default", RAW_WORKER)).fetchone()
                    if job is not None:
                        claim.append((job["locked_at"] - job["created_at"]).total_seconds() * 1000)
                        listener.execute(COMPLETE_SQL, (job["id"], RAW_WORKER))
                done.set()

        thread = threading.Thread(target=listen, daemon=True)
        thread.start()
        payload = json.dumps(PAYLOAD)
        for _ in range(self.latency_samples):
            done.clear()
            # One statement (its own transaction), like ours: insert and notify commit together.
            self.raw.execute(
                """WITH ins AS (INSERT INTO jobs (queue, payload) VALUES ('default', %s) RETURNING id)
                   SELECT id, pg_notify('bench_wake', 'default') FROM ins""",
                (payload,),
            ).fetchone()
            if not done.wait(10):
                raise SystemExit("raw listener did not wake up")
            time.sleep(0.01)
        mode["claim"] = False
        delivery = []
        for _ in range(self.latency_samples):
            done.clear()
            received.clear()
            sent = time.perf_counter()
            self.raw.execute("SELECT pg_notify('bench_wake', 'ping')")
            if not done.wait(10):
                raise SystemExit("raw listener did not receive a notification")
            delivery.append((received[0] - sent) * 1000)
            time.sleep(0.01)
        stop.set()
        thread.join()
        listener.close()
        return claim, delivery

    def ours_wakeup(self) -> list[float]:
        from benchmarks.jobs import noop

        self.reset()
        log = tempfile.TemporaryFile()
        cmd = [sys.executable, "-m", "django", "runjobs", "-v", "0", "-c", "1", "--poll-interval", "30"]
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=worker_env(self.db_url), stdout=log, stderr=subprocess.STDOUT
        )
        try:

            def wait(condition: Callable[[], bool], what: str) -> None:
                deadline = time.monotonic() + 30
                while not condition():
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit(f"worker: timed out waiting for {what}")
                    time.sleep(0.002)

            def listening() -> bool:
                return bool(
                    self.raw.execute(
                        """SELECT count(*) FROM pg_stat_activity
                           WHERE datname = current_database() AND application_name LIKE 'pgjobs %% listen'
                             AND state = 'idle' AND query NOT LIKE 'LISTEN%%'"""
                    ).fetchone()[0]
                )

            def finished(job_id: int) -> Callable[[], bool]:
                query = "SELECT status = 'done' FROM pgjobs_job WHERE id = %s"
                return lambda: bool(self.raw.execute(query, (job_id,)).fetchone()[0])

            wait(listening, "LISTEN")
            warm = noop.enqueue()  # the first claim after start-up, not a wake-up
            wait(finished(warm.id), "the warm-up job")
            time.sleep(0.1)
            ids = []
            for _ in range(self.latency_samples):
                job = noop.enqueue()
                ids.append(job.id)
                wait(finished(job.id), f"job {job.id}")
                time.sleep(0.01)  # let the worker go idle again (its post-ack claim finds nothing)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            log.close()
        return [
            float(r[0]) * 1000
            for r in self.raw.execute(
                "SELECT extract(epoch FROM started_at - created_at) FROM pgjobs_job WHERE id = ANY(%s)",
                (ids,),
            ).fetchall()
        ]

    def wakeup(self) -> None:
        self.log(f"idle wake-up: raw LISTEN baseline ({self.latency_samples} jobs)")
        base_claim, base_delivery = self.raw_wakeup()
        self.log(f"idle wake-up: ours, runjobs -c 1 --poll-interval 30 ({self.latency_samples} jobs)")
        mine = self.ours_wakeup()
        if len(mine) != self.latency_samples or len(base_claim) != self.latency_samples:
            raise SystemExit("missing latency samples")
        for name, pick in (("p50", 0.50), ("p95", 0.95), ("max", 1.0)):
            ours, base, pure = (percentile(s, pick) for s in (mine, base_claim, base_delivery))
            self.rows.append(
                Row(f"idle wake-up {name}, created->started", ours, base, "LISTEN+seed claim", "ms", False)
            )
            self.notes.append(f"raw NOTIFY delivery alone (client clock), {name}: {pure:.2f} ms")

    # -- report -----------------------------------------------------------------------------------
    def table(self) -> str:
        head = ("measurement", "ours", "baseline (raw psycopg, seed SQL)", "ours/base")
        body = [
            (r.measurement, fmt(r.ours, r.unit), f"{fmt(r.base, r.unit)}  {r.base_label}", r.ratio())
            for r in self.rows
        ]
        widths = [max(len(x[i]) for x in [head, *body]) for i in range(4)]
        line = "  ".join("-" * w for w in widths)
        out = [
            "  ".join(
                h.ljust(w) if i in (0, 2) else h.rjust(w)
                for i, (h, w) in enumerate(zip(head, widths, strict=True))
            ),
            line,
        ]
        for r in body:
            out.append(
                "  ".join(
                    c.ljust(w) if i in (0, 2) else c.rjust(w)
                    for i, (c, w) in enumerate(zip(r, widths, strict=True))
                )
            )
        return "\n".join(out)


#: Advisory lock key the concurrent enqueue children line up on.
START_LOCK = 815_4712


def enqueue_child(mode: str, count: int) -> None:
    """One of the concurrent enqueuers: set up, say "ready", wait at the start line, enqueue
    ``count`` jobs one per call. ``raw``: the seed INSERT; ``raw-notify``: the same with
    ``pg_notify`` in the statement (how 0.1 woke workers); ``ours``: ``noop.enqueue()``;
    ``ours-quiet``: the same with LISTEN off, so no notification at all."""
    db_url = os.environ["PGJOBS_BENCH_DATABASE_URL"]
    payload = json.dumps(PAYLOAD)
    conn = connect(db_url)
    if mode.startswith("ours"):
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        from django.db import connection

        from benchmarks.jobs import noop

        connection.ensure_connection()
        noop.enqueue()  # connect and prepare before the start line
        conn.execute("DELETE FROM pgjobs_job")

        def one() -> None:
            noop.enqueue()
    elif mode == "raw-notify":
        statement = """WITH ins AS (INSERT INTO jobs (queue, payload) VALUES ('default', %s) RETURNING id)
                       SELECT id, pg_notify('bench_wake', 'default') FROM ins"""

        def one() -> None:
            conn.execute(statement, (payload,)).fetchone()
    else:

        def one() -> None:
            conn.execute(SEED_ENQUEUE, ("default", payload, None)).fetchone()

    print("ready", flush=True)
    conn.execute("SELECT pg_advisory_lock_shared(%s)", (START_LOCK,))
    conn.execute("SELECT pg_advisory_unlock_shared(%s)", (START_LOCK,))
    for _ in range(count):
        one()
    if mode.startswith("ours"):
        from django_pgjobs.notify import notifier

        notifier().flush()


def median_ms(fn: Callable[[], object], runs: int) -> float:
    """Median wall time of ``runs`` calls of ``fn``, in milliseconds (the 1,000,000-job scripts)."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    if q >= 1.0:
        return ordered[-1]
    return statistics.quantiles(ordered, n=100, method="inclusive")[round(q * 100) - 1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", "-n", type=int, default=20_000, help="Jobs per measurement (20000).")
    parser.add_argument("--quick", action="store_true", help="Smoke run: 2,000 jobs, 50 latency samples.")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres",
        help="Server to use (its database is only used to create the scratch one).",
    )
    parser.add_argument("--db-name", default="pgjobs_bench", help="Scratch database (dropped first).")
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument(
        "--only",
        choices=("enqueue", "drain", "wakeup", "tasks"),
        action="append",
        help="Run only these parts (repeatable).",
    )
    parser.add_argument(
        "--hold-snapshot",
        action="store_true",
        help="Also drain with a REPEATABLE READ snapshot held open throughout (run it on a server "
        "with autovacuum on, e.g. the embedded one) and report what share of their speed we and raw "
        "SQL keep.",
    )
    parser.add_argument(
        "--conn-max-age",
        type=float,
        help="CONN_MAX_AGE for our side (default Django's 0: a job that used the database reconnects).",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="Show the workers' output.")
    parser.add_argument("--enqueue-child", nargs=2, metavar=("MODE", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.enqueue_child:
        enqueue_child(args.enqueue_child[0], int(args.enqueue_child[1]))
        return 0
    n = 2000 if args.quick else args.jobs
    samples = 50 if args.quick else args.latency_samples
    parts = args.only or ["enqueue", "drain", "wakeup", "tasks"]

    if args.conn_max_age is not None:
        os.environ["PGJOBS_BENCH_CONN_MAX_AGE"] = str(args.conn_max_age)
    recreate_database(args.database_url, args.db_name)
    bench = Bench(server_url(args.database_url, args.db_name), n, samples, args.verbose)
    bench.setup()
    started = time.perf_counter()
    if "enqueue" in parts:
        bench.enqueue()
    if "drain" in parts:
        bench.drain(
            [
                ("runjobs -c 1", ["-c", "1"], False),
                ("runjobs -c 1", ["-c", "1"], True),
                ("runjobs -c 8", ["-c", "8"], True),
                ("runjobs -c 32", ["-c", "32"], True),
                ("runjobs -p 2 -c 16", ["-p", "2", "-c", "16"], True),
            ]
        )
    if args.hold_snapshot:
        bench.held_snapshot(("runjobs -c 32", ["-c", "32"]))
    if "wakeup" in parts:
        bench.wakeup()
    if "tasks" in parts:
        if "enqueue" not in parts:
            bench.enqueue_tasks()
        bench.drain_tasks()

    with psycopg.connect(bench.db_url) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
    print(
        f"\ndjango-pgjobs benchmark: {n:,} no-op jobs per measurement, {samples} wake-up samples, "
        f"PostgreSQL {version}, {os.cpu_count()} CPUs, {time.perf_counter() - started:.0f}s"
    )
    print(bench.table())
    for note in bench.notes:
        print(f"  {note}")
    print(
        "  ratio = ours / baseline (throughput: higher is better; latency: lower is better). Each "
        "baseline was measured right before its row."
    )
    bench.raw.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
