"""The no-op handler the benchmark enqueues; autodiscovered by workers like a user's jobs.py."""

from __future__ import annotations

from django_pgjobs import job


@job(name="bench.noop")
def noop() -> None:
    return None
