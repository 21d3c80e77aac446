"""django-pgjobs: a durable PostgreSQL job queue for Django.

Public API::

    from django_pgjobs import job

    @job(queue="mail", max_attempts=5)
    def send_receipt(invoice_id: int) -> None: ...

    send_receipt.enqueue(invoice_id=1842)
"""

from __future__ import annotations

from .exceptions import (
    DirectWriteRefused,
    DuplicateTaskName,
    IdempotencyConflict,
    InvalidJob,
    JobCancelled,
    PayloadNotSerializable,
    PgJobsError,
    Snooze,
    UnknownTask,
)
from .registry import JobContext, JobHandler, job
from .validation import NewJob

__all__ = [
    "DirectWriteRefused",
    "DuplicateTaskName",
    "IdempotencyConflict",
    "InvalidJob",
    "JobCancelled",
    "JobContext",
    "JobHandler",
    "NewJob",
    "PayloadNotSerializable",
    "PgJobsError",
    "Snooze",
    "UnknownTask",
    "job",
]
__version__ = "0.1.0"
