"""``@job``: turning functions into registered, enqueueable handlers.

The worker looks handlers up *by name in this registry only*; it never imports a dotted path read
from a row, so a row written by anyone cannot make a worker run code that was not registered.
"""

from __future__ import annotations

import datetime as dt
import inspect
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

from .cancellation import CancelSignal
from .exceptions import DuplicateTaskName, InvalidJob, JobCancelled, UnknownTask
from .payloads import check_arguments
from .periodic import InvalidSchedule, Schedule
from .retry import BackoffPolicy, ExponentialBackoff, default_backoff
from .validation import queue_name

if TYPE_CHECKING:
    from .models import Job
    from .store import Claim

P = ParamSpec("P")
R = TypeVar("R")

_registry: dict[str, JobHandler[Any, Any]] = {}
_registry_lock = threading.Lock()


@dataclass(frozen=True)
class JobContext:
    """What a ``takes_context=True`` handler receives first, so it can be idempotent.

    Execution is at-least-once: pass ``idempotency_key`` (or ``f"job:{job_id}"``) to downstream
    systems so a second run of the same job is recognised there.
    """

    job_id: int
    attempt: int
    max_attempts: int
    queue: str
    task: str
    idempotency_key: str | None
    worker_id: str
    #: Set by the worker when the job is asked to stop (see :mod:`django_pgjobs.cancellation`).
    cancel_signal: CancelSignal = field(default_factory=CancelSignal, compare=False, repr=False)

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    @property
    def cancel_requested(self) -> bool:
        """Whether the job was asked to stop (``Job.objects.cancel``, the admin's Cancel)."""
        return self.cancel_signal.is_set()

    @property
    def cancel_requested_by(self) -> str | None:
        return self.cancel_signal.by if self.cancel_signal.is_set() else None

    def check_cancelled(self) -> None:
        """Raise :class:`~django_pgjobs.JobCancelled` if the job was asked to stop: call it between
        the steps of a long handler."""
        if self.cancel_signal.is_set():
            raise JobCancelled(f"cancelled by {self.cancel_signal.by or 'an operator'}")

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, returning early (True) if the job is asked to stop meanwhile.
        ``math.inf`` (or anything past what a timed wait can take) waits until then."""
        seconds = max(0.0, seconds)  # NaN too: max() keeps the 0.0
        return self.cancel_signal.wait(None if seconds >= threading.TIMEOUT_MAX else seconds)

    @classmethod
    def for_claim(cls, claim: Claim, worker_id: str, cancel_signal: CancelSignal | None = None) -> JobContext:
        """The context of the attempt a claim just handed to ``worker_id``."""
        return cls(
            job_id=claim.id,
            attempt=claim.attempt,
            max_attempts=claim.max_attempts,
            queue=claim.queue,
            task=claim.task,
            idempotency_key=claim.idempotency_key,
            worker_id=worker_id,
            cancel_signal=cancel_signal or CancelSignal(),
        )


@dataclass(frozen=True)
class EnqueueOptions:
    """Per-call options set through :meth:`JobHandler.using`."""

    queue: str | None = None
    priority: int | None = None
    run_at: dt.datetime | None = None
    delay: float | dt.timedelta | None = None
    idempotency_key: str | None = None
    max_attempts: int | None = None


def _backoff_policy(backoff: BackoffPolicy | Mapping[str, float] | None) -> BackoffPolicy | None:
    if backoff is None or callable(backoff):
        return backoff
    if isinstance(backoff, Mapping):
        try:
            return ExponentialBackoff(**backoff)
        except TypeError as exc:
            raise TypeError(f"backoff options are base, cap and jitter: {exc}") from None
    raise TypeError("backoff must be a callable (attempt, exception) -> seconds | None, or a dict")


class JobHandler(Generic[P, R]):
    """A registered handler. Call it to run the function directly; ``.enqueue()`` to queue it."""

    def __init__(
        self,
        func: Callable[..., R],
        *,
        name: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        backoff: BackoffPolicy | Mapping[str, float] | None = None,
        lease: float | None = None,
        timeout: float | None = None,
        takes_context: bool = False,
        options: EnqueueOptions | None = None,
        cron: str | None = None,
        every: float | dt.timedelta | None = None,
        timezone: str | None = None,
        missed: str | None = None,
    ) -> None:
        self.func = func
        self.name = name or f"{func.__module__}.{func.__qualname__}"
        if queue is not None:
            try:
                queue_name(queue)
            except InvalidJob as exc:
                raise InvalidJob(f"@job {self.name}: {exc}") from None
        self.queue = queue
        self.priority = priority
        self.max_attempts = max_attempts
        self.backoff = _backoff_policy(backoff)
        for label, value in (("lease", lease), ("timeout", timeout)):
            if value is not None and not value > 0:
                raise ValueError(f"@job {self.name}: {label} must be a positive number of seconds")
        self.lease = lease
        self.timeout = timeout
        self.takes_context = takes_context
        self._options = options or EnqueueOptions()
        self._signature = inspect.signature(func)
        self._is_async = inspect.iscoroutinefunction(func)
        if takes_context and not self._signature.parameters:
            raise TypeError(f"@job {self.name}: takes_context=True needs a first parameter")
        self.__wrapped__ = func
        self.__doc__ = func.__doc__
        self.__name__ = getattr(func, "__name__", self.name)
        self.__qualname__ = getattr(func, "__qualname__", self.name)
        self.__module__ = func.__module__
        #: Its periodic schedule (``cron=`` or ``every=``), checked now so a bad one fails at import.
        self.schedule: Schedule | None = None
        if cron is not None or every is not None or timezone is not None or missed is not None:
            self.schedule = Schedule.build(
                self.name, cron=cron, every=every, timezone=timezone, missed=missed or "latest"
            )
            try:
                self.payload_for((), {})
            except InvalidJob as exc:
                raise InvalidSchedule(
                    f"periodic job {self.name!r} is enqueued with no arguments: {exc}"
                ) from None

    def __repr__(self) -> str:
        return f"<JobHandler {self.name}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function here and now (tests, shells); nothing is queued."""
        return self.func(*args, **kwargs)

    def using(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: dt.datetime | None = None,
        delay: float | dt.timedelta | None = None,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
    ) -> JobHandler[P, R]:
        """A copy with per-call options, like Django's ``Task.using()``; the registry is unchanged."""
        given: dict[str, Any] = {
            "queue": queue,
            "priority": priority,
            "run_at": run_at,
            "delay": delay,
            "idempotency_key": idempotency_key,
            "max_attempts": max_attempts,
        }
        options = replace(self._options, **{k: v for k, v in given.items() if v is not None})
        if options.run_at is not None and options.delay is not None:
            raise InvalidJob(f"job {self.name!r}: give run_at or delay, not both")
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone._options = options
        return clone

    def payload_for(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Check the call against the signature and JSON, and build the stored payload."""
        try:
            if self.takes_context:
                self._signature.bind(None, *args, **kwargs)
            else:
                self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidJob(f"job {self.name!r}: {exc}") from None
        return check_arguments(self.name, args, kwargs, self._positional_names(len(args)))

    def _positional_names(self, count: int) -> list[str]:
        """The parameter each of ``count`` positional arguments binds to (the call was bound, so
        they fit): its name, or ``*name`` for those a star parameter collects."""
        parameters = list(self._signature.parameters.values())[1 if self.takes_context else 0 :]
        names: list[str] = []
        for parameter in parameters:
            if len(names) == count:
                break
            if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
                names += [f"*{parameter.name}"] * (count - len(names))
            elif parameter.kind in (
                inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
            ):
                names.append(parameter.name)
            else:
                break
        return names

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Queue a run with these arguments; returns the job, with ``job.created`` False for a
        duplicate idempotency key. Joins the caller's transaction, if any."""
        from .models import Job
        from .validation import NewJob

        o = self._options
        new = NewJob(
            self.name,
            self.payload_for(args, kwargs),
            # ``is not None``, not ``or``: an explicit bad value (queue="", max_attempts=0) must reach
            # validation and be refused, not silently replaced by the handler's default.
            queue=o.queue if o.queue is not None else self.queue,
            priority=o.priority if o.priority is not None else self.priority,
            run_at=o.run_at,
            delay=o.delay,
            max_attempts=o.max_attempts if o.max_attempts is not None else self.max_attempts,
            idempotency_key=o.idempotency_key,
        )
        # payload_for already checked every argument against JSON.
        job, created = Job.objects.store.enqueue(new, checked=True)
        job.created = created  # type: ignore[attr-defined]
        return job

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """``enqueue`` for async code (runs in a thread, like Django's own async ORM calls)."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.enqueue)(*args, **kwargs)

    def retry_delay(self, attempt: int, exc: BaseException | None) -> float | None:
        """Seconds until the next attempt after this failure (None: give up)."""
        policy = self.backoff or default_backoff()
        return policy(attempt, exc)

    def run(self, context: JobContext, args: list[Any], kwargs: dict[str, Any]) -> R:
        call_args = [context, *args] if self.takes_context else args
        if self.is_async:
            return _run_coroutine(self.func, call_args, kwargs, context)
        return self.func(*call_args, **kwargs)

    @property
    def is_async(self) -> bool:
        return self._is_async


def _run_coroutine(
    func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], context: JobContext
) -> Any:
    """An ``async def`` handler, on an event loop of its own in the executor thread; a cancel
    request cancels its task, and the run ends with :class:`JobCancelled`."""
    import asyncio

    async def main() -> Any:
        task = asyncio.ensure_future(func(*args, **kwargs))
        loop = asyncio.get_running_loop()
        forget = context.cancel_signal.on_set(lambda: _call_soon(loop, task.cancel))
        try:
            return await task
        except asyncio.CancelledError:
            if context.cancel_signal.is_set():
                raise JobCancelled(f"cancelled by {context.cancel_signal.by or 'an operator'}") from None
            raise
        finally:
            forget()

    return asyncio.run(main())


def _call_soon(loop: Any, callback: Callable[[], Any]) -> None:
    try:
        loop.call_soon_threadsafe(callback)
    except RuntimeError:  # the loop already closed: the run is over
        pass


@overload
def job(func: Callable[P, R], /) -> JobHandler[P, R]: ...


@overload
def job(
    *,
    name: str | None = ...,
    queue: str | None = ...,
    priority: int | None = ...,
    max_attempts: int | None = ...,
    backoff: BackoffPolicy | Mapping[str, float] | None = ...,
    lease: float | None = ...,
    timeout: float | None = ...,
    takes_context: bool = ...,
    cron: str | None = ...,
    every: float | dt.timedelta | None = ...,
    timezone: str | None = ...,
    missed: str | None = ...,
) -> Callable[[Callable[P, R]], JobHandler[P, R]]: ...


def job(func: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Register a function as a job handler: ``@job`` or ``@job(queue="mail", max_attempts=5)``;
    ``@job(cron="0 3 * * *", timezone="Europe/Paris")`` or ``@job(every=30)`` also runs it on a
    schedule (see :mod:`django_pgjobs.periodic`)."""

    def register_handler(f: Callable[..., Any]) -> JobHandler[Any, Any]:
        return register(JobHandler(f, **options))

    return register_handler(func) if func is not None else register_handler


def register(handler: JobHandler[Any, Any]) -> JobHandler[Any, Any]:
    """Add a handler; a different function under a taken name fails loudly at import time."""
    with _registry_lock:
        existing = _registry.get(handler.name)
        if existing is not None and not _same_function(existing.func, handler.func):
            raise DuplicateTaskName(
                f"task name {handler.name!r} is registered twice: by "
                f"{_where(existing.func)} and by {_where(handler.func)}; give one an explicit name="
            )
        _registry[handler.name] = handler
    return handler


def unregister(name: str) -> None:
    with _registry_lock:
        _registry.pop(name, None)


def get_handler(name: str) -> JobHandler[Any, Any]:
    try:
        return _registry[name]
    except KeyError:
        raise UnknownTask(name) from None


def registered() -> dict[str, JobHandler[Any, Any]]:
    with _registry_lock:
        return dict(_registry)


def _same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    # A module imported twice (e.g. as __main__ and by name, or reloaded) re-registers the same code.
    return a is b or (_where(a) == _where(b))


def _where(f: Callable[..., Any]) -> str:
    code = getattr(f, "__code__", None)
    location = f" ({code.co_filename}:{code.co_firstlineno})" if code else ""
    return f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', repr(f))}{location}"
