"""A backend for Django's tasks framework: ``@task`` functions run on django-pgjobs.

::

    TASKS = {
        "default": {
            "BACKEND": "django_pgjobs.tasks.PgJobsBackend",
            "QUEUES": ["default", "mail"],
        }
    }

The framework is ``django.tasks`` on Django >= 6.0 and the ``django-tasks`` backport (module
``django_tasks``) on Django 5.2. This package imports without either (``django_pgjobs`` is an
installed app, and app start-up autodiscovers every app's ``tasks`` module, this one included); the
public names below are loaded on first use, and raise a clear :class:`ImportError` when neither
framework is installed.

Modules, one job each:

* :mod:`.compat`: which framework, and everything taken from it;
* :mod:`.mapping`: our job states, priorities and attempt history -> Django's ``TaskResult``
  (the one place to adapt when the storage changes);
* :mod:`.task`: :class:`PgJobsTask`, the backend's ``task_class`` (our options on ``@task``);
* :mod:`.handler`: :class:`TaskHandler`, the registry entry the worker runs;
* :mod:`.backend`: :class:`PgJobsBackend`.
"""

from __future__ import annotations

from importlib import import_module
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

MISSING_MESSAGE = (
    "django_pgjobs.tasks needs Django's tasks framework: Django >= 6.0 (django.tasks), or on Django "
    "5.2 the django-tasks backport (pip install 'django-pgjobs[tasks]')"
)


def _django_has_tasks() -> bool:
    try:
        return find_spec("django.tasks") is not None
    except ImportError:  # pragma: no cover - Django itself missing
        return False


#: The framework this process uses: "django.tasks", "django_tasks" (the backport) or None.
FRAMEWORK: str | None = (
    "django.tasks"
    if _django_has_tasks()
    else "django_tasks"
    if find_spec("django_tasks") is not None
    else None
)

_LAZY = {
    "PgJobsBackend": ".backend",
    "PgJobsTask": ".task",
    "TaskHandler": ".handler",
    "LeaseExpired": ".errors",
    "JobCancelled": ".errors",
}

__all__ = ["FRAMEWORK", *_LAZY]

if TYPE_CHECKING:
    from .backend import PgJobsBackend as PgJobsBackend
    from .errors import JobCancelled as JobCancelled
    from .errors import LeaseExpired as LeaseExpired
    from .handler import TaskHandler as TaskHandler
    from .task import PgJobsTask as PgJobsTask


def __getattr__(name: str) -> Any:
    """Load the framework-dependent names on first use (``TASKS`` names this module's
    ``PgJobsBackend``; Django imports it when the first task is defined or enqueued)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if FRAMEWORK is None and module != ".errors":
        raise ImportError(MISSING_MESSAGE)
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value
