"""The no-op ``django.tasks`` task the benchmark enqueues through ``PgJobsBackend`` (autodiscovered
by the workers like a user's tasks.py). Not defined when no tasks framework is installed."""

from __future__ import annotations

from typing import Any

from django_pgjobs.tasks import FRAMEWORK

task: Any = None
if FRAMEWORK == "django.tasks":
    from django.tasks import task
elif FRAMEWORK == "django_tasks":
    from django_tasks import task

if task is not None:

    @task()
    def noop_task() -> None:
        return None
