"""Handlers the tests enqueue; imported by autodiscovery like a user's jobs.py."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from django.db import connection

from django_pgjobs import JobContext, job

EXECUTIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS test_executions (id bigserial PRIMARY KEY, kind text, "
    "job_id bigint, value text, pid int, at timestamptz DEFAULT clock_timestamp())"
)


def _record(kind: str, job_id: int | None, value: Any = None) -> None:
    """Side-effect table written by handlers (created by the ``clean_executions`` fixture), so tests
    can count real executions."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO test_executions (kind, job_id, value, pid) VALUES (%s, %s, %s, %s)",
            [kind, job_id, None if value is None else str(value), os.getpid()],
        )


@job(name="tests.echo", takes_context=True)
def echo(context: JobContext, value: Any = None) -> Any:
    _record("echo", context.job_id, value)
    return {"echo": value, "attempt": context.attempt, "key": context.idempotency_key}


@job(name="tests.noop")
def noop() -> None:
    return None


@job(name="tests.sleep", takes_context=True)
def sleep(context: JobContext, seconds: float) -> float:
    _record("sleep-start", context.job_id, seconds)
    time.sleep(seconds)
    _record("sleep-end", context.job_id, seconds)
    return seconds


@job(name="tests.flaky", takes_context=True, backoff=lambda attempt, exc: 0.0)
def flaky(context: JobContext, succeed_on: int) -> int:
    _record("flaky", context.job_id, context.attempt)
    if context.attempt < succeed_on:
        raise RuntimeError(f"attempt {context.attempt} fails on purpose")
    return context.attempt


@job(name="tests.always_fails", max_attempts=3, backoff={"base": 1.0, "cap": 0.0, "jitter": 0.0})
def always_fails() -> None:
    raise ValueError("this handler always fails")


@job(name="tests.exits", backoff=lambda attempt, exc: 0.0, max_attempts=2)
def exits(kind: str) -> None:
    if kind == "system_exit":
        raise SystemExit(3)
    raise KeyboardInterrupt


@job(name="tests.kills_worker", max_attempts=2, takes_context=True)
def kills_worker(context: JobContext) -> None:
    _record("kill", context.job_id, context.attempt)
    os.kill(os.getpid(), signal.SIGKILL)


@job(name="tests.bad_result")
def bad_result() -> Any:
    return {"when": object()}
