"""The @job decorator and the handler registry."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import threading

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.utils import timezone

from django_pgjobs import job
from django_pgjobs.cancellation import CancelSignal
from django_pgjobs.exceptions import DuplicateTaskName, InvalidJob, UnknownTask
from django_pgjobs.models import Job
from django_pgjobs.registry import (
    JobContext,
    JobHandler,
    get_handler,
    register,
    registered,
    unregister,
)
from django_pgjobs.retry import ExponentialBackoff
from tests.helpers import clock_now, db_now, job_count
from tests.testapp.jobs import signature


@pytest.fixture(autouse=True)
def restore_registry():
    """Handlers registered by a test are removed afterwards; the app's own are kept."""
    before = registered()
    yield
    for name in set(registered()) - set(before):
        unregister(name)
    for name, handler in before.items():
        if registered().get(name) is not handler:
            unregister(name)
            register(handler)


def test_bare_decorator_registers_under_module_and_qualname():
    @job
    def send_receipt(invoice_id: int) -> str:
        return f"sent {invoice_id}"

    assert isinstance(send_receipt, JobHandler)
    assert (
        send_receipt.name
        == f"{__name__}.test_bare_decorator_registers_under_module_and_qualname.<locals>.send_receipt"
    )
    assert get_handler(send_receipt.name) is send_receipt
    assert send_receipt(5) == "sent 5"  # calling runs the function here, queues nothing
    assert send_receipt.__name__ == "send_receipt"
    assert (send_receipt.queue, send_receipt.priority, send_receipt.max_attempts) == (None, None, None)


def test_decorator_with_options():
    @job(
        name="tests.registry.options",
        queue="mail",
        priority=-2,
        max_attempts=9,
        backoff={"base": 3, "cap": 60, "jitter": 0},
        lease=90,
        timeout=30,
    )
    def handler() -> None:
        """Docstring kept."""

    assert get_handler("tests.registry.options") is handler
    assert (handler.queue, handler.priority, handler.max_attempts) == ("mail", -2, 9)
    assert handler.backoff == ExponentialBackoff(base=3, cap=60, jitter=0)
    assert (handler.lease, handler.timeout) == (90, 30)
    assert handler.__doc__ == "Docstring kept."
    assert handler.retry_delay(2, RuntimeError()) == 9
    assert handler.retry_delay(10, None) == 60


def test_handler_without_backoff_uses_the_configured_default(settings):
    settings.PGJOBS = {"BACKOFF_BASE": 3.0, "BACKOFF_CAP_SECONDS": 100.0, "BACKOFF_JITTER": 0.0}

    @job(name="tests.registry.default_backoff")
    def handler() -> None: ...

    assert handler.retry_delay(2, None) == 9
    assert handler.retry_delay(9, None) == 100


def test_custom_backoff_callable_is_used_as_is():
    calls = []

    def policy(attempt, exc):
        calls.append((attempt, type(exc).__name__))
        return None if attempt >= 2 else 1.5

    @job(name="tests.registry.custom_backoff", backoff=policy)
    def handler() -> None: ...

    assert handler.retry_delay(1, KeyError()) == 1.5
    assert handler.retry_delay(2, KeyError()) is None
    assert calls == [(1, "KeyError"), (2, "KeyError")]


@pytest.mark.parametrize(
    "options, error, message",
    [
        ({"backoff": {"bse": 2}}, TypeError, "backoff options are base, cap and jitter"),
        ({"backoff": 5}, TypeError, "backoff must be a callable"),
        ({"backoff": {"base": 0.5}}, ValueError, "base must be >= 1"),
        ({"lease": 0}, ValueError, "lease must be a positive number"),
        ({"timeout": -1}, ValueError, "timeout must be a positive number"),
        (
            {"queue": "pgjobs:cancel"},
            InvalidJob,
            "@job tests.registry.bad: queue name 'pgjobs:cancel' is reserved",
        ),
        ({"queue": "pgjobs:queues"}, InvalidJob, "queue name 'pgjobs:queues' is reserved"),
    ],
)
def test_bad_decorator_options_fail_at_import_time(options, error, message):
    with pytest.raises(error, match=message):

        @job(name="tests.registry.bad", **options)
        def handler() -> None: ...

    assert "tests.registry.bad" not in registered()


def test_duplicate_name_for_a_different_function_is_refused():
    @job(name="tests.registry.dup")
    def first() -> None: ...

    with pytest.raises(DuplicateTaskName, match=r"tests\.registry\.dup") as info:

        @job(name="tests.registry.dup")
        def second() -> None: ...

    assert "first" in str(info.value) and "second" in str(info.value)
    assert get_handler("tests.registry.dup") is first


def test_registering_the_same_function_again_is_allowed():
    def func() -> None: ...

    a = job(name="tests.registry.same")(func)
    b = job(name="tests.registry.same")(func)
    assert get_handler("tests.registry.same") is b
    assert a.func is b.func


def test_unknown_task_name():
    with pytest.raises(UnknownTask, match=r"no handler registered for task 'tests\.nope'"):
        get_handler("tests.nope")


def test_using_returns_a_configured_copy_and_leaves_the_handler_alone():
    copy = signature.using(queue="other", priority=9, idempotency_key="k", max_attempts=2)
    assert copy is not signature
    assert isinstance(copy, JobHandler) and copy.name == signature.name
    assert get_handler("tests.signature") is signature
    # Chained calls merge options.
    later = copy.using(delay=5)
    assert later._options.delay == 5 and later._options.queue == "other"
    assert copy._options.delay is None
    assert signature._options.queue is None


def test_using_refuses_run_at_with_delay():
    with pytest.raises(InvalidJob, match="run_at or delay, not both"):
        signature.using(run_at=timezone.now(), delay=5)
    with pytest.raises(InvalidJob, match="run_at or delay, not both"):
        signature.using(delay=5).using(run_at=timezone.now())


@pytest.mark.django_db
def test_using_options_reach_the_row():
    run_at = timezone.now() + dt.timedelta(hours=3)
    job_ = signature.using(queue="q9", priority=1, run_at=run_at, idempotency_key="using-key").enqueue(1)
    stored = Job.objects.get(pk=job_.pk)
    assert (stored.queue, stored.priority, stored.run_at, stored.idempotency_key) == (
        "q9",
        1,
        run_at,
        "using-key",
    )
    assert stored.max_attempts == 7  # from the decorator
    delayed = signature.using(delay=dt.timedelta(minutes=1)).enqueue(2)
    run_at = Job.objects.get(pk=delayed.pk).run_at
    assert db_now() + dt.timedelta(minutes=1) <= run_at <= clock_now() + dt.timedelta(minutes=1)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((), {}, "missing a required argument: 'a'"),
        ((1, 2, 3), {}, "too many positional arguments"),
        ((1,), {"d": 4}, "unexpected keyword argument 'd'"),
        ((1,), {"a": 1}, "multiple values for argument 'a'"),
    ],
)
def test_signature_errors_are_invalid_job_at_enqueue(args, kwargs, message):
    with pytest.raises(InvalidJob, match=message) as info:
        signature.enqueue(*args, **kwargs)
    assert "job 'tests.signature'" in str(info.value)
    assert job_count() == 0


@pytest.mark.django_db
def test_payload_is_args_and_kwargs_as_called():
    job_ = signature.enqueue(1, c={"x": [1]})
    assert Job.objects.get(pk=job_.pk).payload == {"args": [1], "kwargs": {"c": {"x": [1]}}}


def test_takes_context_binds_arguments_after_the_context():
    @job(name="tests.registry.ctx", takes_context=True)
    def handler(context: JobContext, a: int, *, b: int = 0) -> tuple:
        return context.job_id, context.is_last_attempt, a, b

    assert handler.payload_for((1,), {"b": 2}) == {"args": [1], "kwargs": {"b": 2}}
    with pytest.raises(InvalidJob, match="missing a required argument: 'a'"):
        handler.payload_for((), {})
    context = JobContext(
        job_id=7, attempt=3, max_attempts=3, queue="q", task=handler.name, idempotency_key=None, worker_id="w"
    )
    assert handler.run(context, [1], {"b": 2}) == (7, True, 1, 2)


def test_takes_context_needs_a_parameter():
    with pytest.raises(TypeError, match="takes_context=True needs a first parameter"):

        @job(name="tests.registry.ctx_none", takes_context=True)
        def handler() -> None: ...

    assert "tests.registry.ctx_none" not in registered()


def test_run_without_context_ignores_it():
    @job(name="tests.registry.plain")
    def handler(a: int, b: int = 0) -> int:
        return a + b

    context = JobContext(
        job_id=1, attempt=1, max_attempts=5, queue="q", task=handler.name, idempotency_key=None, worker_id="w"
    )
    assert handler.run(context, [1], {"b": 2}) == 3
    assert context.is_last_attempt is False


@pytest.mark.parametrize("seconds", [math.inf, 1e300])
def test_context_sleep_longer_than_a_timed_wait_waits_until_asked_to_stop(seconds):
    """threading's timed waits refuse more than TIMEOUT_MAX (OverflowError): such a sleep is an
    untimed wait, which the cancel signal still ends."""
    signal = CancelSignal()
    context = JobContext(
        job_id=1,
        attempt=1,
        max_attempts=5,
        queue="q",
        task="t",
        idempotency_key=None,
        worker_id="w",
        cancel_signal=signal,
    )
    answer: list[bool] = []
    sleeper = threading.Thread(target=lambda: answer.append(context.sleep(seconds)))
    sleeper.start()
    signal.set(by="tester")
    sleeper.join(10)
    assert answer == [True]


def test_context_sleep_of_nan_or_a_negative_time_returns_at_once():
    context = JobContext(
        job_id=1, attempt=1, max_attempts=5, queue="q", task="t", idempotency_key=None, worker_id="w"
    )
    assert context.sleep(math.nan) is False
    assert context.sleep(-5) is False


@pytest.mark.django_db(transaction=True)
def test_aenqueue_queues_from_async_code():
    async def enqueue_then_close():
        try:
            return await signature.aenqueue(5)
        finally:  # the connection belongs to asgiref's worker thread: close it there
            await sync_to_async(connections.close_all)()

    job_ = asyncio.run(enqueue_then_close())
    assert Job.objects.get(pk=job_.pk).payload == {"args": [5], "kwargs": {}}
