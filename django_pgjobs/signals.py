"""Signals the worker sends around each run, so OpenTelemetry spans, Sentry breadcrumbs or metrics
can be attached without patching the worker.

All three are sent from the executor thread that runs the job (so a receiver may keep thread-local
state, such as a span, from ``job_started`` to ``job_finished``), with ``sender`` the
:class:`~django_pgjobs.JobHandler` (None when no handler is registered under the task's name), and
through ``send_robust``: a receiver that raises is logged and never changes the job's outcome.

``job_started(context)`` just before the handler runs.

``job_finished(context, outcome, duration)`` after every run; ``outcome`` is ``"done"``,
``"failed"``, ``"cancelled"`` or ``"snoozed"``; ``duration`` in seconds.

``job_failed(context, exception, will_retry)`` after a run that raised (before ``job_finished``);
``will_retry`` says whether the job has another attempt (the write may still be refused if the
worker lost the job's lease meanwhile).
"""

from __future__ import annotations

from django.dispatch import Signal

job_started = Signal()
job_finished = Signal()
job_failed = Signal()
