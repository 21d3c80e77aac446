"""Settings for the test suite: a real PostgreSQL, from DATABASE_URL or the embedded server."""

import os
import secrets
from typing import Any

from django_pgjobs.embedded import database_settings


def _tasks_framework() -> str | None:
    from django_pgjobs.tasks import FRAMEWORK

    return FRAMEWORK


SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_pgjobs",
    "tests.testapp",
]

# The django.tasks backend's tests (tests/tasks/) need a tasks framework: Django >= 6.0, or the
# django-tasks backport on Django 5.2. Without one, their @task module is not installed and they skip.
TASKS_FRAMEWORK = _tasks_framework()
if TASKS_FRAMEWORK == "django_tasks":
    INSTALLED_APPS.append("django_tasks")  # the backport's signals and checks
if TASKS_FRAMEWORK:
    INSTALLED_APPS.append("tests.tasks.taskapp.apps.TaskAppConfig")
TASKS = {
    "default": {
        "BACKEND": "django_pgjobs.tasks.PgJobsBackend",
        "QUEUES": ["default", "mail", "reports", "queue_1"],
    },
    "open": {"BACKEND": "django_pgjobs.tasks.PgJobsBackend", "QUEUES": []},
}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

STATIC_URL = "/static/"

DATABASES = {"default": database_settings(mode="test")}
# Every run of the suite gets a test database of its own, so runs against one server (two
# developers, CI, tox envs side by side) never meet; PGJOBS_TEST_DB_NAME chooses the name instead.
# Exported, so every process of this run agrees on it.
os.environ.setdefault("PGJOBS_TEST_DB_NAME", f"test_pgjobs_{secrets.token_hex(4)}")
DATABASES["default"]["TEST"] = {"NAME": os.environ["PGJOBS_TEST_DB_NAME"]}
# Processes a test starts against a server other than the suite's own (the restart test's
# throwaway server, a PgBouncer) get its address here: a plain PostgreSQL entry, nothing embedded.
if os.environ.get("PGJOBS_TEST_DB_HOST"):
    DATABASES["default"] = {
        "ENGINE": "django.db.backends.postgresql",
        "HOST": os.environ["PGJOBS_TEST_DB_HOST"],
        "PORT": os.environ.get("PGJOBS_TEST_DB_PORT", ""),
        "NAME": os.environ.get("PGJOBS_WORKER_DB_NAME", "postgres"),
        "USER": os.environ.get("PGJOBS_TEST_DB_USER", "postgres"),
        "PASSWORD": "",
        "OPTIONS": {},
    }
# Worker processes started by the tests connect straight to the test database the suite created.
if os.environ.get("PGJOBS_WORKER_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["PGJOBS_WORKER_DB_NAME"]
# Behind PgBouncer in transaction pooling mode (the README's settings): a server session may
# change between transactions, so no server-side cursors and no prepared statements.
if os.environ.get("PGJOBS_TEST_PGBOUNCER"):
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    if os.environ["PGJOBS_TEST_PGBOUNCER"] != "bare":  # "bare": only the defaults
        DATABASES["default"]["OPTIONS"]["prepare_threshold"] = None
# ... possibly through a proxy the test controls (tests/proxy.py).
if os.environ.get("PGJOBS_WORKER_DB_HOST"):
    DATABASES["default"] = {
        **DATABASES["default"],
        "ENGINE": "django.db.backends.postgresql",  # the proxy is plain TCP, embedded server or not
        "USER": DATABASES["default"].get("USER") or "postgres",
        "HOST": os.environ["PGJOBS_WORKER_DB_HOST"],
        "PORT": os.environ["PGJOBS_WORKER_DB_PORT"],
    }
    DATABASES["default"].pop("EMBEDDED", None)
# A second alias for the same database, so tests can put jobs on PGJOBS["DATABASE"] = "jobs" and
# check that nothing then looks for them on "default".
DATABASES["jobs"] = {**DATABASES["default"], "TEST": {"MIRROR": "default"}}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_pgjobs": {"handlers": ["console"], "level": "INFO"}},
}

# Short timings so failure tests finish quickly; production defaults live in django_pgjobs.conf.
# Worker processes started by the failure tests get e.g. lease 2 s, heartbeat 0.5 s, sweep 0.5 s
# through these variables. The heartbeat defaults to a third of the lease (capped at 10 s) so the
# system check (heartbeat <= lease / 3) holds whatever lease a test picks.
_TEST_LEASE = float(os.environ.get("PGJOBS_TEST_LEASE", "30"))
PGJOBS: dict[str, Any] = {
    "LEASE_SECONDS": _TEST_LEASE,
    "HEARTBEAT_SECONDS": float(os.environ.get("PGJOBS_TEST_HEARTBEAT", min(10.0, _TEST_LEASE / 3))),
    "SWEEP_INTERVAL_SECONDS": float(os.environ.get("PGJOBS_TEST_SWEEP_INTERVAL", "15")),
}
# The periodic fleet tests: "every=N" or "every=N,skip" schedules tests.tick in the workers they start.
if os.environ.get("PGJOBS_TEST_PERIODIC"):
    _every, _, _missed = os.environ["PGJOBS_TEST_PERIODIC"].removeprefix("every=").partition(",")
    PGJOBS["PERIODIC"] = [{"task": "tests.tick", "every": float(_every), "missed": _missed or "latest"}]
if os.environ.get("PGJOBS_TEST_POLL_INTERVAL"):
    PGJOBS["POLL_INTERVAL_SECONDS"] = float(os.environ["PGJOBS_TEST_POLL_INTERVAL"])
if os.environ.get("PGJOBS_TEST_MAX_SNOOZES"):
    PGJOBS["MAX_SNOOZES"] = int(os.environ["PGJOBS_TEST_MAX_SNOOZES"])
# The PgBouncer test runs one worker with the setting rather than ``--no-listen``.
if os.environ.get("PGJOBS_TEST_LISTEN") == "0":
    PGJOBS["LISTEN"] = False
