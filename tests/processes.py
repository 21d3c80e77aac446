"""Real worker processes for tests: start ``runjobs`` against the test database, wait on conditions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 30.0, what: str = "condition") -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.2)


#: ``application_name`` of every session a process started by the tests opens (libpq reads
#: ``PGAPPNAME``): a test that cuts connections cuts only these, never someone else's.
APPLICATION_NAME = "pgjobs-test-child"


def worker_env(**extra: str) -> dict[str, str]:
    """Environment for a child process of the tests: the test settings, the test database."""
    env = dict(os.environ)
    env["PGAPPNAME"] = APPLICATION_NAME
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PGJOBS_WORKER_DB_NAME"] = connection.settings_dict["NAME"]
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


class WorkerProcess:
    """``python -m django runjobs ...`` as a child process, with its log captured to a file."""

    def __init__(
        self, *args: str, env: dict[str, str] | None = None, command: str = "runjobs", module: str = "django"
    ) -> None:
        self.log = tempfile.NamedTemporaryFile(prefix="pgjobs-worker-", suffix=".log", delete=False)
        self.args = [sys.executable, "-m", module, command, *args]
        self.proc = subprocess.Popen(
            self.args,
            cwd=ROOT,
            env=env or worker_env(),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 30.0) -> None:
        wait_for(lambda: text in self.output() or self._died(), timeout, f"log line {text!r}")
        if text not in self.output():
            raise AssertionError(
                f"worker exited ({self.proc.returncode}) before logging {text!r}:\n{self.output()}"
            )

    def _died(self) -> bool:
        return self.proc.poll() is not None

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL the worker, its process group and its descendants (a supervisor's children run
        in process groups of their own)."""
        for pid in [*_descendants(self.proc.pid), self.proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker still running after {timeout}s:\n{self.output()}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def children_of(pid: int) -> list[int]:
    """Direct child processes of ``pid`` (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


def _descendants(pid: int) -> list[int]:
    found = []
    for child in children_of(pid):
        found += [child, *_descendants(child)]
    return found


def query(sql: str, params: list[Any] | None = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchall()


def executions(kind: str | None = None) -> list[tuple]:
    """Rows of the handlers' side-effect table (kind, job_id, value, pid)."""
    if not query("SELECT to_regclass('test_executions')")[0][0]:
        return []
    if kind is None:
        return query("SELECT kind, job_id, value, pid FROM test_executions ORDER BY id")
    return query("SELECT kind, job_id, value, pid FROM test_executions WHERE kind = %s ORDER BY id", [kind])


def release_long_lease(job_id: int) -> None:
    """Let a running ``tests.long_lease`` job return."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO test_executions (kind, value) VALUES ('long-lease-release', %s)", [job_id]
        )


def hold_claimed_ahead(worker: WorkerProcess, followers: int = 3, warm_up: int = 80) -> tuple[Any, list[Any]]:
    """Make ``worker`` (started with ``-c 1``) hold jobs claimed ahead of its executor: warm it
    up with short jobs (a worker claims ahead only once its handlers average under 0.1 s; it
    starts assuming 1 s), then enqueue a blocker (``tests.long_lease``: runs until the test records
    ``("long-lease-release", <id>)``) and ``followers`` echo jobs behind it in one transaction.
    Returns (blocker, the followers the worker holds buffered: claimed, not started)."""
    from django.db import transaction

    from django_pgjobs.models import Job
    from tests.testapp import jobs

    warm = [jobs.noop.enqueue().id for _ in range(warm_up)]
    wait_for(
        lambda: Job.objects.filter(pk__in=warm, status="done").count() == warm_up, 60, "the warm-up jobs"
    )
    with transaction.atomic():
        blocker = jobs.long_lease.using(priority=10).enqueue()
        behind = [jobs.echo.enqueue(f"behind-{i}") for i in range(followers)]
    wait_for(lambda: executions("long-lease-start"), 30, "the blocker to start")

    def buffered() -> list[Any]:
        held = set(
            Job.objects.filter(pk__in=[j.id for j in behind], status="running").values_list("pk", flat=True)
        )
        return [j for j in behind if j.id in held]

    held = wait_for(buffered, 30, "jobs claimed ahead behind the blocker")
    assert executions("echo") == [], "a follower ran: the worker was not held up by the blocker"
    return blocker, held
