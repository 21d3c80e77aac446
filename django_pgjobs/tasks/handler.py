"""``TaskHandler``: a Django ``Task`` as an entry of django-pgjobs' handler registry.

The worker knows only the registry: it looks a claimed job's handler up by task name and calls
``handler.run(context, args, kwargs)``, then ``handler.retry_delay(attempt, exc)`` if that raised.
It never imports a path read from a row. So the backend registers every ``Task`` it validates (at
``@task`` time, when the module is imported) under ``Task.module_path``, and this adapter does, in
the worker's job thread, what Django's own backends do around a run:

* sends ``task_started`` (status RUNNING) before the call and ``task_finished`` after it, the latter
  inside the ``except`` block on failure so receivers see ``sys.exc_info()`` (Django's logging
  receiver relies on that);
* gives ``takes_context=True`` tasks Django's ``TaskContext``, whose ``attempt`` is the job's
  attempt number;
* runs ``async def`` tasks with ``Task.call`` (asgiref's ``async_to_sync``);
* normalises the return value as Django does (tuples become lists) and checks it is storable
  JSON, so an unstorable value fails here, inside the run, and ``task_finished`` says so.

Everything that touches the worker is in this class; the worker itself is unchanged.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from ..exceptions import PayloadNotSerializable
from ..payloads import check_arguments, check_value
from ..registry import JobContext, JobHandler
from .compat import (
    BUILTIN_RECEIVERS,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_finished,
    task_started,
)
from .mapping import result_from_claim, result_from_job, to_pgjobs_priority

if TYPE_CHECKING:
    from .backend import PgJobsBackend


class TaskHandler(JobHandler[Any, Any]):
    """The registered form of one ``Task`` definition (what ``@task`` returned)."""

    def __init__(self, task: Task, backend: PgJobsBackend) -> None:
        super().__init__(
            task.func,
            name=task.module_path,
            queue=task.queue_name,
            priority=to_pgjobs_priority(task.priority),
            max_attempts=getattr(task, "max_attempts", None),
            backoff=getattr(task, "backoff", None),
            lease=getattr(task, "lease", None),
            timeout=getattr(task, "timeout", None),
            takes_context=task.takes_context,
        )
        self.task = task
        #: Django sends task signals with the backend class as the sender.
        self.backend_class: type[PgJobsBackend] = type(backend)
        self._decision = threading.local()

    @staticmethod
    def definition_of(task: Task) -> tuple[Any, ...]:
        """What the worker takes from a definition. ``Task.using()`` copies (other priority,
        queue, run_after, key) share it, so they do not re-register."""
        return (
            task.func,
            task.takes_context,
            getattr(task, "backoff", None),
            getattr(task, "lease", None),
            getattr(task, "timeout", None),
        )

    def __repr__(self) -> str:
        return f"<TaskHandler {self.name}>"

    # -- enqueue side -----------------------------------------------------------------------------
    def payload_for(self, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Django's JSON normalisation (tuples -> lists, bytes -> str), then our checks: a call that
        does not fit the signature is a ``TypeError`` (as calling the function would be), and a
        value jsonb would change or refuse (NaN, NUL, int dict keys...) is
        :class:`~django_pgjobs.exceptions.PayloadNotSerializable`, naming the argument."""
        plain_args = [self._normalised(f"positional argument {i}", v) for i, v in enumerate(args)]
        plain_kwargs = {k: self._normalised(f"argument {k!r}", v) for k, v in kwargs.items()}
        try:
            if self.takes_context:
                self._signature.bind(None, *plain_args, **plain_kwargs)
            else:
                self._signature.bind(*plain_args, **plain_kwargs)
        except TypeError as exc:
            raise TypeError(f"task {self.name!r}: {exc}") from None
        return check_arguments(self.name, plain_args, plain_kwargs)

    def _normalised(self, label: str, value: Any) -> Any:
        try:
            return normalize_json(value)
        except (TypeError, ValueError) as exc:
            # Keeps Django's own message ("Unsupported type: ..."), adds which task and argument.
            raise PayloadNotSerializable(
                f"task {self.name!r}: {label} cannot be stored as JSON: {exc}"
            ) from None

    # -- worker side ------------------------------------------------------------------------------
    def run(self, context: JobContext, args: list[Any], kwargs: dict[str, Any]) -> Any:
        result = self._running_result(context, args, kwargs)
        task = result.task
        task_started.send(sender=self.backend_class, task_result=result)
        try:
            call_args: list[Any] = [TaskContext(task_result=result), *args] if self.takes_context else args
            value = normalize_json(task.call(*call_args, **kwargs))
            check_value(self.name, "return value", value)
        except BaseException as exc:  # the worker records every BaseException as a failed attempt
            final = self._is_final(context, exc)
            object.__setattr__(result, "status", TaskResultStatus.FAILED if final else TaskResultStatus.READY)
            object.__setattr__(result, "finished_at", timezone.now() if final else None)
            result.errors.append(
                TaskError(exception_class_path=_class_path(type(exc)), traceback=_format(exc))
            )
            task_finished.send_robust(sender=self.backend_class, task_result=result)
            raise
        object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
        object.__setattr__(result, "finished_at", timezone.now())
        object.__setattr__(result, "_return_value", value)
        # A receiver that raises must not turn a finished run into a retry (the task would run
        # twice): send_robust logs it (logger "django.dispatch") and the outcome stands.
        task_finished.send_robust(sender=self.backend_class, task_result=result)
        return value

    def _running_result(self, context: JobContext, args: list[Any], kwargs: dict[str, Any]) -> TaskResult:
        """The claimed job as a RUNNING ``TaskResult``.

        Complete, it takes one query: the claim leaves the history and the timestamps out of the
        row it hands the worker, and ``worker_ids``, ``errors`` and the times need them. That query
        (and, with ``CONN_MAX_AGE = 0``, the connection it opens for a task that would not touch
        the database otherwise) tripled the time of a no-op task, so it is skipped when nothing can
        see the difference: no ``takes_context``, and no signal receivers but the framework's own
        logging ones (:func:`~.mapping.result_from_claim` says what is left out then).
        """
        from ..models import Job

        sender = self.backend_class
        if not (self.takes_context or _observed(task_started, sender) or _observed(task_finished, sender)):
            return result_from_claim(self.task, context, args, kwargs, self.task.backend)
        job = Job.objects.filter(pk=context.job_id).first()
        if job is None:
            raise LookupError(f"job {context.job_id} disappeared after it was claimed")
        return result_from_job(job, self.task, self.task.backend)

    def _is_final(self, context: JobContext, exc: BaseException) -> bool:
        """Whether the worker will dead-letter the job after this failure (``task_finished`` then
        says FAILED) or schedule a retry (READY). Mirrors ``Worker._retry_delay`` and the FAIL
        statement: attempts spent, or the backoff policy gives up (``None``). The policy's answer
        is kept for the worker's own ``retry_delay`` call that follows in this thread, so a policy
        with randomness cannot tell the signal one thing and the row another."""
        if context.attempt >= context.max_attempts:
            return True
        if isinstance(exc, PayloadNotSerializable):
            return False  # the worker retries these under the default policy, which never gives up
        try:
            delay = JobHandler.retry_delay(self, context.attempt, exc)
        except Exception as policy_error:
            self._decision.pending = (exc, context.attempt, None, policy_error)
            return False  # the worker falls back to the default policy
        self._decision.pending = (exc, context.attempt, delay, None)
        return delay is None

    def retry_delay(self, attempt: int, exc: BaseException | None) -> float | None:
        pending = getattr(self._decision, "pending", None)
        self._decision.pending = None
        if pending is not None and pending[0] is exc and pending[1] == attempt:
            if pending[3] is not None:
                raise pending[3]
            return pending[2]
        return super().retry_delay(attempt, exc)


def _observed(signal: Any, sender: type) -> bool:
    """Whether anything but the framework's own logging receiver listens to ``signal``. Uses
    ``Signal._live_receivers`` (Django's, private); anything unexpected counts as "observed", which
    only costs the query."""
    builtin = BUILTIN_RECEIVERS.get(id(signal))
    try:
        sync_receivers, async_receivers = signal._live_receivers(sender)
    except Exception:
        return True
    return bool(async_receivers) or any(r is not builtin for r in sync_receivers)


def _class_path(cls: type[BaseException]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _format(exc: BaseException) -> str:
    from traceback import format_exception

    return "".join(format_exception(exc))
