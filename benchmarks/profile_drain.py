"""Where a drain's Python time goes: ``runjobs --burst`` over no-op jobs under py-spy, grouped by
the worker's parts, beside the seed's raw batched drain measured in the same run.

    .venv/bin/pip install py-spy
    .venv/bin/python benchmarks/profile_drain.py -n 100000 -c 32

py-spy samples the worker from outside without stopping it (``--nonblocking``: stopping a
process 250 times a second on a busy 2-core machine inflated its Python time fourfold), and only
the thread holding the GIL (``--gil``), so a sample is Python actually running, never a thread
waiting on a lock, a socket or a condition. Each
sample is charged to the deepest django_pgjobs frame on its stack: the part of ours that ran, or
that called the library (psycopg, json, Django) that ran. Samples of the main thread outside the
claim loop are start-up and shutdown. The total is the worker's Python time, so "per job" is
comparable with the worker CPU per job that ``bench_queue.py`` prints (which also counts C code
running without the GIL).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_queue import ROOT, Bench, chunks, recreate_database, server_url, worker_env

#: (part, predicate on the deepest django_pgjobs frame's "function (path)" and the whole stack).
PARTS: list[tuple[str, Callable[[str, str], bool]]] = [
    (
        "start-up and shutdown (imports, django.setup, checks)",
        lambda f, s: "Thread._bootstrap" not in s and "ClaimLoop" not in s,
    ),
    ("decoding claimed rows (Claim tuples, JSON payloads)", lambda f, s: "_claim_from_row" in f),
    ("claim statement (psycopg: send, wait, decode rows)", lambda f, s: "psycopg" in s and "claimer.py" in s),
    ("outcome statements (psycopg)", lambda f, s: "psycopg" in s and "acknowledger.py" in s),
    (
        "heartbeat, listener, workers registry",
        lambda f, s: any(m in s for m in ("heartbeat.py", "listener.py", "fleet.py")),
    ),
    ("connections put back after each job", lambda f, s: "_reset_connections" in f),
    ("in-flight table (hand-offs between threads)", lambda f, s: "inflight.py" in f),
    (
        "executor: context, handler call, outcome",
        lambda f, s: any(
            m in f for m in ("executor.py", "registry.py", "cancellation.py", "outcome.py", "payloads.py")
        ),
    ),
    ("claim loop (entries, room, batching)", lambda f, s: "claimer.py" in f or "store.py" in f),
    ("acknowledger (batching outcomes)", lambda f, s: "acknowledger.py" in f),
]


def part_of(stack: list[str]) -> str:
    whole = ";".join(stack)
    ours = [frame for frame in stack if "django_pgjobs/" in frame]
    deepest = ours[-1] if ours else ""
    for name, test in PARTS:
        if test(deepest, whole):
            return name
    return "other"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=100_000, help="no-op jobs to drain (100000)")
    parser.add_argument("-c", type=int, default=32, help="runjobs --concurrency (32)")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second (250)")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--db-name", default="pgjobs_profile_drain")
    args = parser.parse_args(argv)
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).exists():
        raise SystemExit("py-spy is not installed: .venv/bin/pip install py-spy")

    recreate_database(args.database_url, args.db_name)
    db_url = server_url(args.database_url, args.db_name)
    bench = Bench(db_url, args.n, 0, False)
    bench.setup()
    print(f"  .. raw baseline: seed claim+ack 100/statement, {args.n:,} jobs", file=sys.stderr)
    raw_rate = bench.raw_drain(True)

    from django.db import connection

    from benchmarks.bench_queue import PAYLOAD, TASK
    from django_pgjobs import NewJob
    from django_pgjobs.models import Job

    bench.reset()
    for count in chunks(args.n, 5000):
        Job.objects.enqueue_many([NewJob(TASK, PAYLOAD) for _ in range(count)])
    connection.close()
    bench.vacuum()
    print(f"  .. ours under py-spy: runjobs --burst -c {args.c}", file=sys.stderr)
    with tempfile.NamedTemporaryFile(suffix=".txt") as raw:
        cmd = [
            py_spy,
            "record",
            "--gil",
            "--nonblocking",
            "-r",
            str(args.rate),
            "--format",
            "raw",
            "-o",
            raw.name,
            "--",
            sys.executable,
            "-m",
            "django",
            "runjobs",
            "-v",
            "0",
            "--burst",
            "-c",
            str(args.c),
        ]
        start = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, env=worker_env(db_url), capture_output=True, text=True)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"py-spy/runjobs exited with {done.returncode}:\n{done.stderr}")
        parts: collections.Counter[str] = collections.Counter()
        for line in Path(raw.name).read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            parts[part_of(stack.split(";"))] += int(count)
    finished = bench.raw.execute(
        "SELECT count(*) FILTER (WHERE status = 'done' AND attempts = 1) FROM pgjobs_job"
    ).fetchone()[0]
    if finished != args.n:
        raise SystemExit(f"expected {args.n} jobs done once, found {finished}")

    samples = sum(parts.values())
    python_s = samples / args.rate
    print(f"\ndrain of {args.n:,} no-op jobs, runjobs --burst -c {args.c} under py-spy --gil:")
    print(f"  ours (profiled, process start->exit)  {args.n / elapsed:>9,.0f} jobs/s")
    print(f"  raw batched seed SQL, same run        {raw_rate:>9,.0f} jobs/s")
    print(f"  ours / raw = {args.n / elapsed / raw_rate:.2f}x (py-spy itself takes some of the 2 cores)")
    startup = parts[PARTS[0][0]] / args.rate
    print(
        f"worker Python time: {samples:,} samples = {python_s:.2f} s, "
        f"{python_s / args.n * 1e6:.1f} us per job "
        f"({(python_s - startup) / args.n * 1e6:.1f} without start-up)"
    )
    for name, count in parts.most_common():
        print(f"  {name:<55} {count / samples:6.1%}  {count / args.rate / args.n * 1e6:5.1f} us/job")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
