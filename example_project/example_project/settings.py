"""Settings of the example project: a shop that sends receipts, webhooks and processes documents.

The database is the PostgreSQL named by ``DATABASE_URL`` when it is set, otherwise a private
embedded PostgreSQL (``pip install django-pgjobs[embedded]``) that starts on first use.
"""

from pathlib import Path

from django_pgjobs.embedded import database_settings
from django_pgjobs.tasks import FRAMEWORK as TASKS_FRAMEWORK

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-project-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_pgjobs",
    "shop",
]

if TASKS_FRAMEWORK == "django_tasks":
    INSTALLED_APPS.append("django_tasks")  # Django 5.2: the django-tasks backport's checks and signals

# Django's tasks framework (shop/tasks.py) on django-pgjobs: @task functions become jobs in the same
# table, run by the same runjobs workers, visible in the same admin.
TASKS = {
    "default": {
        "BACKEND": "django_pgjobs.tasks.PgJobsBackend",
        "QUEUES": ["default", "reports"],
    }
}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
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
WSGI_APPLICATION = "example_project.wsgi.application"

DATABASES = {"default": database_settings()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"

# Receipts are printed instead of sent.
EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
DEFAULT_FROM_EMAIL = "shop@example.com"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"short": {"format": "%(asctime)s %(levelname)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "short"}},
    "loggers": {"django_pgjobs": {"handlers": ["console"], "level": "INFO", "propagate": False}},
}

PGJOBS = {
    "LEASE_SECONDS": 60,
    "HEARTBEAT_SECONDS": 10,
}
