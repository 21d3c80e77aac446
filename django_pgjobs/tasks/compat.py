"""Which tasks framework is here: Django's own ``django.tasks`` (Django >= 6.0) or the
``django-tasks`` backport (module ``django_tasks``, for Django 5.2).

Both have the same API; they differ in a few names (the backport 0.12 calls ``InvalidTask``
``InvalidTaskError``) and in where helpers live. Everything the backend needs from the framework is
imported here, so the rest of the package never asks which one it got.

When Django has ``django.tasks`` it is used even if the backport is installed too: a project on
Django 6 that still imports ``django_tasks`` has a second, separate registry of backends, which this
backend does not join.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import FRAMEWORK, MISSING_MESSAGE

if TYPE_CHECKING:
    # Type-check against Django's own API (django-stubs); the backport mirrors it.
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, signals, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import (
        InvalidTask,
        InvalidTaskBackend,
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
elif FRAMEWORK == "django.tasks":
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, signals, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import (
        InvalidTask,
        InvalidTaskBackend,
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
elif FRAMEWORK == "django_tasks":
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, exceptions, signals, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

    # 0.12.0 names them InvalidTaskError / InvalidTaskBackendError; its main branch already took
    # Django's names. Accept either, so a backport release that renames them keeps working.
    InvalidTask = getattr(exceptions, "InvalidTask", None) or exceptions.InvalidTaskError
    InvalidTaskBackend = getattr(exceptions, "InvalidTaskBackend", None) or exceptions.InvalidTaskBackendError
else:
    raise ImportError(MISSING_MESSAGE)

#: The framework's own receivers (they log id, path and status, nothing else), by signal. A run
#: nobody else listens to can skip reading the row (see handler.TaskHandler._running_result).
BUILTIN_RECEIVERS = {
    id(task_started): getattr(signals, "log_task_started", None),
    id(task_finished): getattr(signals, "log_task_finished", None),
}

__all__ = [
    "BUILTIN_RECEIVERS",
    "FRAMEWORK",
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
