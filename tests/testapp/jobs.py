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


def _wait_for_rows(kind: str, value: Any, count: int, timeout: float) -> bool:
    """Wait (bounded) until ``count`` side-effect rows ``(kind, value)`` exist: handlers that must
    overlap, or outlast something, wait on that condition rather than sleep for a fixed time."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM test_executions WHERE kind = %s AND value = %s", [kind, str(value)]
            )
            if cursor.fetchone()[0] >= count:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 1.5, 0.1)


@job(name="tests.rendezvous", takes_context=True)
def rendezvous(context: JobContext, group: str, n: int, timeout: float = 30.0) -> bool:
    """Starts, then waits until all ``n`` jobs of ``group`` have started (at most ``timeout``):
    they can all end only if they all ran at the same time. Returns whether they met."""
    _record("rendezvous-start", context.job_id, group)
    met = _wait_for_rows("rendezvous-start", group, n, timeout)
    _record("rendezvous-end", context.job_id, group)
    return met


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


# -- used by the foundation suite (tests/test_payloads.py, tests/test_registry.py) ----------------
@job(name="tests.identity")
def identity(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Returns exactly what it was called with, so a test can compare it with what was enqueued."""
    return {"args": list(args), "kwargs": kwargs}


@job(name="tests.signature", queue="sig", priority=3, max_attempts=7)
def signature(a: int, b: int = 2, *, c: Any = None) -> None:
    """A handler with a real signature and handler-level options, for binding and option tests."""


# -- used by the failure suite (tests/failure/) ---------------------------------------------------
@job(name="tests.slow_first", takes_context=True, backoff=lambda attempt, exc: 0.0)
def slow_first(context: JobContext, first: float, then: float = 0.0) -> dict[str, Any]:
    """Slow on its first attempt only, so a reclaimed job finishes quickly on the next worker."""
    seconds = first if context.attempt == 1 else then
    _record("slow-start", context.job_id, context.attempt)
    time.sleep(seconds)
    _record("slow-end", context.job_id, context.attempt)
    return {"attempt": context.attempt, "pid": os.getpid()}


@job(name="tests.backoff_fails", max_attempts=5, backoff={"base": 2.0, "cap": 3600.0, "jitter": 0.2})
def backoff_fails() -> None:
    """Always fails under the default-shaped exponential backoff (base 2, 20 % jitter)."""
    raise ConnectionError("downstream is down")


@job(name="tests.overruns", takes_context=True, timeout=1.0, backoff=lambda attempt, exc: 0.0)
def overruns(context: JobContext, first: float, until_rerun: bool = False) -> int:
    """Runs past its 1 s timeout on the first attempt (so its lease must lapse), quick afterwards.

    Attempt 1 runs ``first`` seconds, or with ``until_rerun`` until attempt 2 has ended (at most
    ``first``), so it surely ends after the rerun, however slow the machine."""
    _record("overrun-start", context.job_id, context.attempt)
    if context.attempt == 1 and until_rerun:
        _wait_for_rows("overrun-end", 2, 1, first)
    elif context.attempt == 1:
        time.sleep(first)
    _record("overrun-end", context.job_id, context.attempt)
    return context.attempt


@job(name="tests.hangs", takes_context=True, timeout=1.0, max_attempts=3, backoff=lambda attempt, exc: 0.0)
def hangs(context: JobContext, seconds: float = 60.0) -> None:
    """Stuck on every attempt (think: a socket read without a timeout), far past its 1 s timeout."""
    _record("hang-start", context.job_id, context.attempt)
    time.sleep(seconds)
    _record("hang-end", context.job_id, context.attempt)


@job(name="tests.bad_backoff", backoff=lambda attempt, exc: -1)
def bad_backoff() -> None:
    """Fails under a backoff policy that answers a negative delay (a user's bug)."""
    raise RuntimeError("downstream says no")


@job(name="tests.exits_process", max_attempts=3, takes_context=True)
def exits_process(context: JobContext) -> None:
    """Poison: ends its own worker process without any cleanup, every time."""
    _record("exit", context.job_id, context.attempt)
    os._exit(1)


@job(name="tests.resilient", takes_context=True, max_attempts=50, backoff=lambda attempt, exc: 0.05)
def resilient(context: JobContext, seconds: float = 0.0) -> int:
    """Records its run; may fail while the database is cut away, and then simply retries."""
    if seconds:
        time.sleep(seconds)
    _record("resilient", context.job_id, context.attempt)
    return context.attempt


@job(name="tests.soak", takes_context=True, max_attempts=20, backoff=lambda attempt, exc: 0.0)
def soak(context: JobContext) -> None:
    """One side-effect row per execution, nothing else: the soak counts these."""
    _record("soak", context.job_id, context.attempt)


@job(name="tests.long_lease", takes_context=True, lease=30.0)
def long_lease(context: JobContext, timeout: float = 60.0) -> None:
    """A handler with its own lease, longer than the worker's default. Runs until the test
    records ``("long-lease-release", <job id>)`` (at most ``timeout``), so the test can look at
    its lease while it surely still runs."""
    _record("long-lease-start", context.job_id, context.attempt)
    _wait_for_rows("long-lease-release", context.job_id, 1, timeout)


@job(name="tests.pooled", takes_context=True)
def pooled(context: JobContext) -> None:
    """Records, in one statement, which server session ran it (``pg_backend_pid()``): behind a
    transaction pooler the worker connections share the pooler's few server sessions."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO test_executions (kind, job_id, value, pid) "
            "VALUES ('pooled', %s, pg_backend_pid()::text, %s)",
            [context.job_id, os.getpid()],
        )


@job(name="tests.overrun_once", takes_context=True, timeout=2.0, max_attempts=1)
def overrun_once(context: JobContext) -> dict[str, Any]:
    """Attempt 1 overruns its 2 s timeout (so it is abandoned and its lease lapses) and returns
    only once attempt 2 has started; attempt 2 returns when the test records "go". The result
    says which run produced it."""
    _record("overrun-once-start", context.job_id, context.attempt)
    kind = "overrun-once-start" if context.attempt == 1 else "go"
    if not _wait_for_rows(kind, 2, 1, 60.0):
        raise TimeoutError(f"no {kind} for attempt 2 within 60 s")
    _record("overrun-once-end", context.job_id, context.attempt)
    return {"attempt": context.attempt, "pid": os.getpid()}


@job(name="tests.two_runs", takes_context=True, max_attempts=1)
def two_runs(context: JobContext, first: float, then: float) -> dict[str, Any]:
    """``first`` seconds on attempt 1, ``then`` afterwards; the result says which run it is."""
    _record("two-runs-start", context.job_id, context.attempt)
    time.sleep(first if context.attempt == 1 else then)
    _record("two-runs-end", context.job_id, context.attempt)
    return {"attempt": context.attempt, "pid": os.getpid()}


class UnprintableError(Exception):
    """An exception whose message cannot even be computed."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ of UnprintableError failed")


@job(name="tests.poison", takes_context=True, max_attempts=3, backoff=lambda attempt, exc: 0.0)
def poison(context: JobContext, kind: str) -> None:
    """Fails in the ways that used to break the code recording the failure."""
    _record("poison", context.job_id, f"{kind}:{context.attempt}")
    if kind == "unprintable":
        raise UnprintableError()
    if kind == "surrogate":
        raise ValueError("a lone surrogate: \ud800")
    raise RuntimeError("a NUL byte: before\x00after")


@job(name="tests.leaves_thread", takes_context=True)
def leaves_thread(context: JobContext, seconds: float, kind: str = "thread") -> str:
    """Starts a thread that outlives it and is never joined: a plain non-daemon thread, or a
    ThreadPoolExecutor's (joined at interpreter exit). The process must still exit when stopped."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    if kind == "thread":
        threading.Thread(target=time.sleep, args=(seconds,), name="handler-leftover", daemon=False).start()
    else:
        ThreadPoolExecutor(thread_name_prefix="handler-pool").submit(time.sleep, seconds)
    _record("leaves-thread", context.job_id)
    return "left a thread"


@job(name="tests.leaves_transaction", takes_context=True)
def leaves_transaction(context: JobContext, how: str) -> str:
    """Leaves its thread's connection in a transaction (autocommit off, or an atomic block it
    never exits), with an uncommitted side effect the worker must roll back."""
    from django.db import transaction

    if how == "autocommit":
        transaction.set_autocommit(False)
    else:
        transaction.atomic().__enter__()
    _record("uncommitted", context.job_id)
    return how


@job(name="tests.sleep_then_mark", takes_context=True)
def sleep_then_mark(context: JobContext, seconds: float, path: str) -> int:
    """Records its start in the database, sleeps, then notes its end in a file: the end is seen
    even while the database is unreachable."""
    _record("sleep-start", context.job_id, seconds)
    time.sleep(seconds)
    with open(path, "a") as f:
        f.write(f"{context.job_id}\n")
    return context.attempt


# -- cancel and snooze ---------------------------------------------------------------------------
@job(name="tests.cooperative", takes_context=True)
def cooperative(context: JobContext, seconds: float = 60.0) -> str:
    """Works in small steps and stops when asked (check_cancelled raises JobCancelled)."""
    _record("cooperative-start", context.job_id)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        context.check_cancelled()
        context.sleep(0.05)
    return "ran to the end"


@job(name="tests.async_cooperative", takes_context=True)
async def async_cooperative(context: JobContext, seconds: float = 60.0) -> str:
    """An async handler that never looks at the context: its task is cancelled for it."""
    import asyncio

    from asgiref.sync import sync_to_async

    await sync_to_async(_record)("async-start", context.job_id)
    await asyncio.sleep(seconds)
    return "ran to the end"


@job(name="tests.ignores_cancel", takes_context=True)
def ignores_cancel(context: JobContext, path: str) -> str:
    """Starts, then waits for a file to appear, paying no attention to a cancel request."""
    _record("ignores-start", context.job_id)
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    return f"saw cancel request: {context.cancel_requested} by {context.cancel_requested_by}"


@job(name="tests.snoozes", takes_context=True, max_attempts=1)
def snoozes(context: JobContext, times: int, seconds: float = 0.0) -> int:
    """Snoozes ``times`` times, then succeeds; returns the attempt it succeeded on."""
    from django_pgjobs import Snooze

    _record("snoozes", context.job_id, context.attempt)
    if context.attempt <= times:
        raise Snooze(seconds)
    return context.attempt


@job(name="tests.waits_for_go", takes_context=True, backoff=lambda attempt, exc: 3600.0)
def waits_for_go(context: JobContext, fail: bool = False, timeout: float = 60.0) -> int:
    """Runs until the test records ``("go", <job id>)`` (at most ``timeout``), then returns its
    attempt or, with ``fail``, raises (retried an hour later)."""
    _record("waits-start", context.job_id, context.attempt)
    if not _wait_for_rows("go", context.job_id, 1, timeout):
        raise TimeoutError(f"no go for job {context.job_id} within {timeout} s")
    _record("waits-end", context.job_id, context.attempt)
    if fail:
        raise ValueError(f"job {context.job_id} fails on purpose")
    return context.attempt


from .signal_probe import connect as _connect_signal_probe  # noqa: E402 (after the handlers)

_connect_signal_probe()


@job(name="tests.tick", takes_context=True)
def tick(context: JobContext) -> str | None:
    """Run on a schedule by the periodic tests (PGJOBS_TEST_PERIODIC puts it in PGJOBS["PERIODIC"])."""
    _record("tick", context.job_id, context.idempotency_key)
    return context.idempotency_key
