"""Django settings for ``benchmarks/bench_queue.py`` and the ``runjobs`` processes it starts.

The database comes from ``PGJOBS_BENCH_DATABASE_URL`` (set by the script to its scratch database),
else ``DATABASE_URL``, else the local server at 127.0.0.1:5432. Everything else is a default, so the
figures are what an application with default settings gets.
"""

import os

from django_pgjobs.embedded import database_from_url
from django_pgjobs.tasks import FRAMEWORK as TASKS_FRAMEWORK

SECRET_KEY = "benchmarks-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = ["django_pgjobs", "benchmarks"]
if TASKS_FRAMEWORK == "django_tasks":
    INSTALLED_APPS.append("django_tasks")  # Django 5.2: the backport

# benchmarks/tasks.py's no-op @task, enqueued through the django.tasks backend.
TASKS = {"default": {"BACKEND": "django_pgjobs.tasks.PgJobsBackend"}}

DATABASES = {
    "default": database_from_url(
        os.environ.get("PGJOBS_BENCH_DATABASE_URL")
        or os.environ.get("DATABASE_URL")
        or "postgres://postgres@127.0.0.1:5432/pgjobs_bench"
    )
}

# ``bench_queue.py --conn-max-age S``: persistent connections in the workers. Django's default (0)
# closes a job thread's connection after every job that used it (close_old_connections), so each such
# job opens a new one.
if os.environ.get("PGJOBS_BENCH_CONN_MAX_AGE"):
    DATABASES["default"]["CONN_MAX_AGE"] = float(os.environ["PGJOBS_BENCH_CONN_MAX_AGE"])


# ``bench_queue.py`` measures enqueues with and without wake-up notifications.
if os.environ.get("PGJOBS_BENCH_LISTEN") == "0":
    PGJOBS = {"LISTEN": False}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_pgjobs": {"handlers": ["console"], "level": "WARNING"}},
}
