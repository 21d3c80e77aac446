"""The django.tasks backend's tests. They need a tasks framework (Django >= 6.0, or the django-tasks
backport on Django 5.2); without one only test_framework.py is collected, and it says why the rest
did not run."""

from __future__ import annotations

import pytest

from django_pgjobs.tasks import FRAMEWORK

if FRAMEWORK is None:
    collect_ignore_glob = ["test_backend*.py", "test_worker*.py", "test_results*.py"]


@pytest.fixture
def restore_registry():
    """Tasks a test defines are removed from the handler registry afterwards."""
    from django_pgjobs.registry import register, registered, unregister

    before = registered()
    yield
    for name in set(registered()) - set(before):
        unregister(name)
    for name, handler in before.items():
        if registered().get(name) is not handler:
            unregister(name)
            register(handler)
