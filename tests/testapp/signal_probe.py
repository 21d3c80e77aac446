"""Receivers of the worker signals, connected when PGJOBS_TEST_SIGNALS names a file: each signal
appends a JSON line there (in the worker process), so a test can read what the worker sent."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from django_pgjobs.signals import job_failed, job_finished, job_started

_lock = threading.Lock()


def _write(event: str, **fields: Any) -> None:
    with _lock, open(os.environ["PGJOBS_TEST_SIGNALS"], "a") as out:
        out.write(json.dumps({"event": event, "thread": threading.current_thread().name, **fields}) + "\n")


def started(sender: Any, context: Any, **kwargs: Any) -> None:
    _write("started", job_id=context.job_id, attempt=context.attempt, sender=getattr(sender, "name", None))


def finished(sender: Any, context: Any, outcome: str, duration: float, **kwargs: Any) -> None:
    _write("finished", job_id=context.job_id, outcome=outcome, duration=duration)


def failed(sender: Any, context: Any, exception: BaseException, will_retry: bool, **kwargs: Any) -> None:
    _write("failed", job_id=context.job_id, error=type(exception).__name__, will_retry=will_retry)


def broken(sender: Any, **kwargs: Any) -> None:
    raise RuntimeError("a receiver that raises must not change the job's outcome")


def connect() -> None:
    if os.environ.get("PGJOBS_TEST_SIGNALS"):
        job_started.connect(started)
        job_started.connect(broken)
        job_finished.connect(finished)
        job_failed.connect(failed)
