"""Exceptions that name a failed attempt in ``TaskResult.errors`` when no exception was raised.

Django's ``TaskError`` holds an exception class *path* (``TaskError.exception_class`` imports it) and
a traceback. Two of our ways to fail an attempt have no exception behind them: the worker vanished
and its lease lapsed, or staff cancelled the job. They are reported under these classes so that
``errors[i].exception_class`` still resolves to something a program can test for. This module needs
no tasks framework, so the classes import everywhere.
"""

from __future__ import annotations

from ..exceptions import JobCancelled as _JobCancelled


class LeaseExpired(Exception):
    """The attempt's worker stopped heartbeating (crash, kill, lost machine) and the sweeper took
    the job back; the traceback text says which worker and attempt."""


#: Staff cancelled the job (admin Cancel action, or ``Job.objects.cancel``), before it ran or
#: while it ran; the traceback text says who. The one class the handler-side API raises too.
JobCancelled = _JobCancelled
