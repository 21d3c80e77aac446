"""Django settings for ``benchmarks/bench_queue.py`` and the ``runjobs`` processes it starts.

The database comes from ``PGJOBS_BENCH_DATABASE_URL`` (set by the script to its scratch database),
else ``DATABASE_URL``, else the local server at 127.0.0.1:5432. Everything else is a default, so the
figures are what an application with default settings gets.
"""

import os

from django_pgjobs.embedded import database_from_url

SECRET_KEY = "benchmarks-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = ["django_pgjobs", "benchmarks"]

DATABASES = {
    "default": database_from_url(
        os.environ.get("PGJOBS_BENCH_DATABASE_URL")
        or os.environ.get("DATABASE_URL")
        or "postgres://postgres@127.0.0.1:5432/pgjobs_bench"
    )
}

# ``bench_queue.py --server-side-binding``: psycopg server-side parameters, so psycopg prepares
# statements it runs often (Django's default is client-side binding: every statement is re-planned).
if os.environ.get("PGJOBS_BENCH_SERVER_SIDE_BINDING") == "1":
    DATABASES["default"]["OPTIONS"]["server_side_binding"] = True

# ``bench_queue.py`` measures enqueues with and without wake-up notifications.
if os.environ.get("PGJOBS_BENCH_LISTEN") == "0":
    PGJOBS = {"LISTEN": False}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_pgjobs": {"handlers": ["console"], "level": "WARNING"}},
}
