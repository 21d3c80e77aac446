"""What one run of a handler ended with, in a form that can always be stored.

A poison job is not only a handler that raises: an exception whose ``__str__`` raises, a message
with a lone surrogate (``ValueError("\\ud800")``) or a NUL byte broke the code that records the
failure, the worker died with the job in hand, the job went back in line without spending its
attempt, and every restarted worker claimed it first and died again. Everything that leaves here
is plain, valid, NUL-free text, and the exception's class is always kept.
"""

from __future__ import annotations

import traceback as tb
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Outcome:
    """A finished run. ``ok``: ``result_json`` is the result, serialised and checked; otherwise
    the error fields describe the failure and ``retry_in`` says when to try again (None: never)."""

    ok: bool
    duration: float
    result_json: str = "null"
    error_class: str = ""
    message: str = ""
    traceback: str | None = None
    retry_in: float | None = None
    #: The handler raised Snooze: run again in this many seconds, without spending the attempt.
    snooze_for: float | None = None
    #: The handler raised JobCancelled: the job ends cancelled.
    cancel: bool = False

    @property
    def label(self) -> str:
        """What ``job_finished`` reports (before the row had its say)."""
        if self.snooze_for is not None:
            return "snoozed"
        if self.cancel:
            return "cancelled"
        return "done" if self.ok else "failed"


def storable(text: Any, limit: int | None = None) -> str:
    """``text`` as a string PostgreSQL accepts: lone surrogates and NULs escaped, bounded."""
    if not isinstance(text, str):
        text = safe_str(text)
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if limit is None else text[:limit]


def safe_str(value: Any) -> str:
    """``str(value)``, else its ``repr``, else a placeholder naming its class: never raises."""
    for convert in (str, repr):
        try:
            text = convert(value)
        except Exception:
            continue
        if isinstance(text, str):
            return text
    return f"<unprintable {class_path(type(value))} object>"


def class_path(kind: type) -> str:
    """``module.QualName`` of an exception class (builtins without their module)."""
    module = getattr(kind, "__module__", None)
    name = getattr(kind, "__qualname__", None) or getattr(kind, "__name__", None) or "?"
    path = f"{module}.{name}" if isinstance(module, str) and module != "builtins" else str(name)
    return storable(path)


def failure(exc: BaseException, duration: float, retry_in: float | None, *, cancel: bool = False) -> Outcome:
    """The outcome of a run that raised ``exc`` (called inside its ``except`` block)."""
    try:
        trace = "".join(tb.format_exception(type(exc), exc, exc.__traceback__))
    except Exception as format_error:  # a traceback that cannot even be formatted
        trace = f"(the traceback could not be formatted: {safe_str(format_error)})"
    return Outcome(
        ok=False,
        duration=duration,
        error_class=class_path(type(exc)),
        message=storable(safe_str(exc)),
        traceback=storable(trace),
        retry_in=retry_in,
        cancel=cancel,
    )


def internal_failure(reason: str, duration: float, retry_in: float | None) -> Outcome:
    """A run the worker itself could not complete (an internal error while it held the job)."""
    return Outcome(
        ok=False,
        duration=duration,
        error_class="django_pgjobs.WorkerError",
        message=storable(reason),
        retry_in=retry_in,
    )
