"""Where the time of a single enqueue goes: ``noop.enqueue()`` under cProfile, grouped by part,
beside the seed's raw INSERT timed in the same run.

    .venv/bin/python benchmarks/profile_enqueue.py -n 5000

Parts: the statement round trip (psycopg's execute: the server's work plus the network), the
after-commit wake-up hook and notifier, building the returned ``Job``, argument validation, and the
rest of our Python. Also prints ours with LISTEN off (no wake-up hook) so the notifier's share shows
as a difference. A profile inflates Python-heavy parts, so the shares come from the profile and the
per-call times from separate unprofiled runs.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_queue import (
    PAYLOAD,
    SEED_ENQUEUE,
    Bench,
    recreate_database,
    server_url,
)

#: (part, predicate on a profiled function's (file, name)).
PARTS = [
    ("statement round trip (psycopg execute)", lambda f, n: "psycopg" in f and n == "execute"),
    ("wake-up hook + notifier", lambda f, n: f.endswith("notify.py")),
    ("Job built from the row", lambda f, n: n in ("_new_job", "from_db")),
    ("argument validation", lambda f, n: f.endswith(("validation.py", "payloads.py")) or n == "payload_for"),
]


def per_call(run, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        run()
    return (time.perf_counter() - start) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--db-name", default="pgjobs_profile")
    args = parser.parse_args(argv)
    recreate_database(args.database_url, args.db_name)
    bench = Bench(server_url(args.database_url, args.db_name), args.n, 0, False)
    bench.setup()
    from django.test import override_settings

    from benchmarks.jobs import noop

    payload = json.dumps(PAYLOAD)
    raw = lambda: bench.raw.execute(SEED_ENQUEUE, ("default", payload, None)).fetchone()  # noqa: E731
    ours = noop.enqueue
    for _ in range(200):  # warm up: connections, prepared statements, caches
        raw()
        ours()
    times = {"raw": [], "ours": [], "ours, LISTEN off": []}
    for _ in range(3):  # alternate, so both see the same table sizes and noise
        times["raw"].append(per_call(raw, args.n // 3))
        times["ours"].append(per_call(ours, args.n // 3))
        with override_settings(PGJOBS={"LISTEN": False}):
            times["ours, LISTEN off"].append(per_call(ours, args.n // 3))
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.n):
        ours()
    profile.disable()
    stats = pstats.Stats(profile)
    total = sum(t for (_, _, t, _, _) in stats.stats.values())  # type: ignore[attr-defined]
    cumulative = {part: 0.0 for part, _ in PARTS}
    for (file, _, name), (_, _, _, cum, _) in stats.stats.items():  # type: ignore[attr-defined]
        for part, matches in PARTS:
            if matches(file, name):
                cumulative[part] = max(cumulative[part], cum)
                break
    whole = max(cum for (_, _, _, cum, _) in stats.stats.values())  # type: ignore[attr-defined]
    print(f"single enqueue, {args.n:,} calls, median of 3 alternating slices:")
    for label, values in times.items():
        median = sorted(values)[1]
        print(f"  {label:<20} {median:7.1f} us/call  ({1e6 / median:,.0f} jobs/s)")
    print(f"  ours / raw = {sorted(times['raw'])[1] / sorted(times['ours'])[1]:.2f}x (throughput)")
    print(f"profile of ours (shares of {whole:.2f}s, profiler overhead included; {total:.2f}s own time):")
    for part, seconds in cumulative.items():
        print(f"  {part:<42} {seconds / whole:6.1%}")
    print(f"  {'the rest of our Python':<42} {1 - sum(cumulative.values()) / whole:6.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
