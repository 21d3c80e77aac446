"""Which tasks framework the backend runs on; the reason the other tests here did not run, if so."""

from __future__ import annotations

import django

from django_pgjobs.tasks import FRAMEWORK, MISSING_MESSAGE
from tests.helpers import prerequisite_missing


def test_a_tasks_framework_is_installed():
    if FRAMEWORK is None:
        prerequisite_missing(
            f"tests/tasks skipped: Django {django.get_version()} has no django.tasks and the "
            f"django-tasks backport is not installed ({MISSING_MESSAGE})"
        )


def test_django_tasks_is_preferred_when_django_has_it():
    if django.VERSION >= (6, 0):
        assert FRAMEWORK == "django.tasks"
    else:
        assert FRAMEWORK in ("django_tasks", None)


def test_the_backend_name_explains_a_missing_framework():
    import importlib

    import pytest

    module = importlib.import_module("django_pgjobs.tasks")
    if FRAMEWORK is None:
        with pytest.raises(ImportError, match="django-pgjobs\\[tasks\\]"):
            module.PgJobsBackend  # noqa: B018
    else:
        assert module.PgJobsBackend.__name__ == "PgJobsBackend"
    # The lease/cancel error classes import without any framework: TaskError resolves them.
    assert module.LeaseExpired.__module__ == "django_pgjobs.tasks.errors"
