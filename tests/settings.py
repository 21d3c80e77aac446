"""Settings for the test suite: a real PostgreSQL, from DATABASE_URL or the embedded server."""

import os

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
# Each concurrent run of the suite (a developer's shell, CI, tox envs) may name its own test database.
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("PGJOBS_TEST_DB_NAME", "test_pgjobs")}
# Worker processes started by the tests connect straight to the test database the suite created.
if os.environ.get("PGJOBS_WORKER_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["PGJOBS_WORKER_DB_NAME"]
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
PGJOBS = {
    "LEASE_SECONDS": _TEST_LEASE,
    "HEARTBEAT_SECONDS": float(os.environ.get("PGJOBS_TEST_HEARTBEAT", min(10.0, _TEST_LEASE / 3))),
    "SWEEP_INTERVAL_SECONDS": float(os.environ.get("PGJOBS_TEST_SWEEP_INTERVAL", "15")),
}
