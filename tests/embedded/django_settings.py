"""Minimal Django settings for the engine's own tests: independent of the rest of the app.

Only contenttypes and auth are installed, so these tests keep working while the job queue's
models are being changed. The embedded options come from the environment the test sets.
"""

import os

from django_pgjobs.embedded import embedded_database

SECRET_KEY = "tests-only-not-secret"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth"]
DATABASES = {"default": embedded_database(os.environ.get("PGJOBS_EMBEDDED_TEST_MODE", "development"))}
