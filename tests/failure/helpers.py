"""Shared pieces of the failure suite: fast worker timings and the concurrent-enqueue child."""

from __future__ import annotations

import json
import os
import sys

from tests.processes import worker_env

#: Worker timings for failure tests: a 2 s lease, heartbeats every 0.5 s (a quarter of the lease, so
#: the system check passes) and a sweep attempt every 0.5 s, so a lapsed lease is recovered fast.
FAST = {
    "PGJOBS_TEST_LEASE": "2",
    "PGJOBS_TEST_HEARTBEAT": "0.5",
    "PGJOBS_TEST_SWEEP_INTERVAL": "0.5",
}

#: Advisory lock the test holds exclusively while the enqueue children line up on it (shared).
START_LOCK = 815_4711


def fast_env(**extra: str) -> dict[str, str]:
    return worker_env(**FAST, **extra)


def enqueue_race_main() -> None:
    """``python -m tests.failure.helpers KEY_PREFIX N``: connect, wait at the start line (a shared
    advisory lock the test holds exclusively), then enqueue keys ``PREFIX:0..N-1`` as fast as
    possible; print which of them this process created, as JSON."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    from django.db import connection

    from django_pgjobs.models import Job

    prefix, n = sys.argv[1], int(sys.argv[2])
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock_shared(%s)", [START_LOCK])  # blocks until "go"
        cursor.execute("SELECT pg_advisory_unlock_shared(%s)", [START_LOCK])
    created = {}
    for i in range(n):
        job, was_created = Job.objects.enqueue(
            "tests.echo", {"args": ["same payload"], "kwargs": {}}, idempotency_key=f"{prefix}:{i}"
        )
        created[f"{prefix}:{i}"] = [job.id, was_created]
    print(json.dumps(created), flush=True)


if __name__ == "__main__":
    enqueue_race_main()
