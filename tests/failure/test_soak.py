"""Soak: 20,000 jobs, 4 workers, one SIGKILLed (and replaced) every ~1,000 jobs.

At the end every job is done; a job ran more than once only if a worker died while it held the
job (each extra run is explained by a ``lease expired`` entry in its history, and the runs before
the last one happened in killed processes); none is stuck in ``running``; none is lost.

Marked ``slow``: ``pytest -m slow tests/failure`` (and ``.ci/run``) run it; the quick run skips it.
The counts are printed past pytest's output capture, so the CI log always shows them.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest

from django_pgjobs import fleet
from django_pgjobs.managers import NewJob
from django_pgjobs.models import Job
from tests.failure.helpers import fast_env
from tests.processes import query, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("clean_executions"),
]

JOBS = int(os.environ.get("PGJOBS_SOAK_JOBS", "20000"))
WORKERS = 4
KILL_EVERY = max(1, JOBS // 20)  # jobs finished between kills: ~20 kills, every few seconds


def done_count() -> int:
    return Job.objects.filter(status="done").count()


def test_soak_sigkill_workers_no_job_lost_stuck_or_run_more_than_explained(workers, report):
    started = time.monotonic()
    Job.objects.enqueue_many(NewJob("tests.soak", {"args": [], "kwargs": {}}) for _ in range(JOBS))
    env = fast_env()

    def start(slot: int):
        # -v 0: warnings only (recoveries, fencing); a log line per job would only slow the soak.
        return workers(
            "--concurrency", "4", "--poll-interval", "0.2", "-v", "0", "--worker-id", f"soak-{slot}", env=env
        )

    procs = [start(slot) for slot in range(WORKERS)]
    killed: set[int] = set()
    slot = 0
    while True:
        last = done_count()
        if last >= JOBS - KILL_EVERY:
            break
        # Pace the kills by progress (a fixed clock would race a slow, shared machine).
        wait_for(lambda last=last: done_count() >= last + KILL_EVERY, 120, "progress between kills")
        victim = procs[slot]
        os.kill(victim.pid, signal.SIGKILL)
        victim.proc.wait(timeout=30)
        killed.add(victim.pid)
        procs[slot] = start(slot)
        slot = (slot + 1) % WORKERS
    wait_for(lambda: done_count() == JOBS, 300, "every job to be done")
    elapsed = time.monotonic() - started
    # A worker restarted just now may still be importing Django, before its signal handlers exist
    # (SIGTERM would then kill it with -15): stop each once it has registered, i.e. is running.
    live = fleet.live_workers()
    wait_for(lambda: {p.pid for p in procs} <= set(live.values_list("pid", flat=True)), 60, "every worker up")
    for p in procs:
        p.signal(signal.SIGTERM)
    for p in procs:
        assert p.wait(60) == 0, p.output()[-5000:]

    statuses = dict(Counter(Job.objects.values_list("status", flat=True)))
    stuck = statuses.get("running", 0)
    # Per job: executions (side-effect rows) and lease expiries recorded in its history.
    rows = query(
        """
        SELECT j.id, count(e.id) AS runs,
               (SELECT count(*) FROM jsonb_array_elements(j.history) h
                 WHERE h->>'outcome' = 'lease expired') AS expiries,
               array_agg(e.pid ORDER BY e.id) FILTER (WHERE e.id IS NOT NULL) AS pids
        FROM pgjobs_job j LEFT JOIN test_executions e ON e.job_id = j.id AND e.kind = 'soak'
        GROUP BY j.id
        """
    )
    runs = Counter(r[1] for r in rows)
    lost = [r[0] for r in rows if r[1] == 0] + [
        i for i, s in Job.objects.exclude(status="done").values_list("id", "status")
    ]
    duplicates = [r for r in rows if r[1] > 1]
    unexplained = [r[0] for r in duplicates if r[1] > 1 + r[2] or not set(r[3][:-1]) <= killed]
    extra_runs = sum(r[1] - 1 for r in duplicates)
    report(
        f"\nSOAK: jobs={JOBS} workers={WORKERS} kills={len(killed)} duration={elapsed:.1f}s "
        f"({JOBS / elapsed:.0f} jobs/s incl. recovery) done={statuses.get('done', 0)} "
        f"duplicates={len(duplicates)} (extra runs={extra_runs}, max runs of one job="
        f"{max(runs)}) lease_recoveries={sum(r[2] for r in rows)} lost={len(lost)} stuck={stuck} "
        f"unexplained_duplicates={len(unexplained)} runs_histogram={dict(sorted(runs.items()))}"
    )
    assert len(killed) >= 10
    assert statuses == {"done": JOBS}
    assert stuck == 0 and not lost
    assert not unexplained, unexplained[:20]
    assert len(rows) == JOBS
