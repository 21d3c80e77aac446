"""``PgJobsBackend``: Django's tasks framework on django-pgjobs' job table.

A ``@task`` enqueued through this backend is an ordinary django-pgjobs job: the same table, claim,
lease, heartbeat, sweeper, fencing, retries with backoff, idempotency keys and admin as ``@job``
jobs. What the framework adds is its API (``Task.enqueue``, ``TaskResult``, signals); what this
module adds is the translation, and nothing else: the job is written by ``Job.objects.enqueue`` and
read back through :mod:`.mapping`.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core import checks

from ..exceptions import DuplicateTaskName, InvalidJob, PayloadNotSerializable, UnknownTask
from ..registry import get_handler, register
from ..validation import NewJob, job_parameters
from .compat import (
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    task_enqueued,
)
from .handler import TaskHandler
from .mapping import result_from_job, run_at_for, to_pgjobs_priority
from .task import PgJobsTask

#: Largest job id (bigint); a longer digit string cannot name a job.
_MAX_ID = 2**63 - 1


class PgJobsBackend(BaseTaskBackend):
    """``TASKS = {"default": {"BACKEND": "django_pgjobs.tasks.PgJobsBackend", "QUEUES": [...]}}``.

    ``QUEUES`` lists the queue names tasks may use (Django's rule: default ``["default"]``, an
    empty list allows any). ``OPTIONS`` is not used: the ``PGJOBS`` settings configure the queue
    itself, and per-task options go on ``@task(...)`` (Django 6.1, the backport) or ``.using()``.
    """

    task_class = PgJobsTask

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        if self.options:
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]: PgJobsBackend takes no OPTIONS (got {sorted(self.options)}); "
                "configure the queue in the PGJOBS setting and tasks with @task(...) or .using()"
            )

    # -- validation and registration ----------------------------------------------------------------
    def validate_task(self, task: Task) -> None:
        """Django's rules, then ours; registers the definition so workers can run it by name.

        Called by ``Task.__post_init__`` (so at ``@task`` time, when the module is imported, and
        for every ``.using()`` copy) and again on enqueue. Everything refused raises Django's
        ``InvalidTask``.
        """
        super().validate_task(task)
        try:
            # The same option checks as the enqueue itself (queue name, max_attempts, key...).
            job_parameters(self._new_job(task.module_path, {}, task))
        except InvalidJob as exc:
            raise InvalidTask(f"task {task.module_path!r}: {exc}") from exc
        self._handler_for(task)

    def _handler_for(self, task: Task) -> TaskHandler:
        """The registered handler of this task's definition; registers it if it is new."""
        try:
            existing = get_handler(task.module_path)
        except UnknownTask:
            existing = None
        if isinstance(existing, TaskHandler) and TaskHandler.definition_of(
            existing.task
        ) == TaskHandler.definition_of(task):
            return existing
        try:
            handler = TaskHandler(task, self)  # checks backoff, lease, timeout
            register(handler)  # DuplicateTaskName when a @job already has this name
        except (DuplicateTaskName, TypeError, ValueError) as exc:
            raise InvalidTask(f"task {task.module_path!r}: {exc}") from exc
        return handler

    # -- enqueue ------------------------------------------------------------------------------------
    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Insert the job on ``PGJOBS["DATABASE"]``'s connection, inside the caller's transaction
        if there is one (a rollback leaves no job), exactly like ``Job.objects.enqueue``.

        With an idempotency key that already has a job, that job's result comes back (its status
        may be anything) and ``task_enqueued`` is not sent again.
        """
        # Django's rules again (settings may have changed since the Task was created, as Django's
        # own backends assume); the queue's own option checks run inside Job.objects.enqueue, so
        # they are not repeated here (this is the enqueue hot path).
        super().validate_task(task)
        handler = self._handler_for(task)
        payload = handler.payload_for(tuple(args), dict(kwargs))
        job, created = self._enqueue_job(handler.name, payload, task)
        result = result_from_job(job, handler.task, self.alias)
        if created:
            task_enqueued.send(type(self), task_result=result)
        return result

    @staticmethod
    def _new_job(name: str, payload: dict[str, Any], task: Task) -> NewJob:
        """A Django ``Task`` call as our enqueue options: the one place they are mapped."""
        return NewJob(
            task=name,
            payload=payload,
            queue=task.queue_name,
            priority=to_pgjobs_priority(task.priority),
            run_at=run_at_for(task.run_after),
            max_attempts=getattr(task, "max_attempts", None),
            idempotency_key=getattr(task, "idempotency_key", None),
        )

    def _enqueue_job(self, name: str, payload: dict[str, Any], task: Task) -> tuple[Any, bool]:
        from ..models import Job

        new = self._new_job(name, payload, task)
        try:
            return Job.objects.enqueue(
                new.task,
                new.payload,
                queue=new.queue,
                priority=new.priority,
                run_at=new.run_at,
                max_attempts=new.max_attempts,
                idempotency_key=new.idempotency_key,
            )
        except PayloadNotSerializable:
            raise
        except InvalidJob as exc:  # validated above; kept so nothing reaches users as our type
            raise InvalidTask(f"task {name!r}: {exc}") from exc

    # -- results ------------------------------------------------------------------------------------
    def get_result(self, result_id: str) -> TaskResult:
        """The stored job as a ``TaskResult``; ``TaskResultDoesNotExist`` for an id that is not a
        job, or a job that is not a ``django.tasks`` task registered in this process."""
        from ..models import Job

        job_id = _job_id(result_id)
        job = None if job_id is None else Job.objects.filter(pk=job_id).first()
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        try:
            handler = get_handler(job.task)
        except UnknownTask:
            handler = None
        if not isinstance(handler, TaskHandler):
            raise TaskResultDoesNotExist(
                f"{result_id}: job {job.id} runs {job.task!r}, which is not a django.tasks task "
                "registered in this process (a @job job, or a task module that was not imported)"
            )
        return result_from_job(job, handler.task, self.alias)

    # -- system checks ------------------------------------------------------------------------------
    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        messages = list(super().check(**kwargs))
        if not apps.is_installed("django_pgjobs"):
            messages.append(
                checks.Error(
                    f"TASKS[{self.alias!r}] uses {type(self).__name__}, but django_pgjobs is not installed",
                    hint="Add 'django_pgjobs' to INSTALLED_APPS (it owns the job table and the worker).",
                    id="django_pgjobs.E010",
                )
            )
        return messages


def _job_id(result_id: Any) -> int | None:
    """A result id is the job id as a string of digits (what ``TaskResult.id`` holds)."""
    if isinstance(result_id, str) and result_id.isascii() and result_id.isdigit():
        value = int(result_id)
        return value if 0 < value <= _MAX_ID else None
    return None
