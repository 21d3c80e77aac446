"""The shop's ``django.tasks`` task, next to its ``@job`` handlers in jobs.py.

It is written against Django's own tasks API only, so it would run on any tasks backend; the
project's ``TASKS`` setting picks ``django_pgjobs.tasks.PgJobsBackend``, which makes it an ordinary
django-pgjobs job (same table, worker, retries, admin). Django 6.0+ has ``django.tasks``; on Django
5.2 the django-tasks backport provides the same API as ``django_tasks``
(``pip install "django-pgjobs[tasks]"``). With neither, the task is simply not defined and the demo
says so.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Sum

from .models import Invoice

try:
    from django.tasks import TaskContext, task  # Django >= 6.0
except ImportError:
    try:
        from django_tasks import TaskContext, task  # Django 5.2 + the backport
    except ImportError:
        task = None

if task is not None:

    @task(queue_name="reports", takes_context=True)
    def sales_report(context: TaskContext, invoice_ids: list[int]) -> dict[str, Any]:
        """Count and total of a batch of invoices. Reads only, so running it twice is harmless;
        the result is stored as the task's return value (``TaskResult.return_value``)."""
        totals = Invoice.objects.filter(pk__in=invoice_ids).aggregate(n=Count("id"), cents=Sum("total_cents"))
        return {"invoices": totals["n"], "total_cents": totals["cents"] or 0, "attempt": context.attempt}
