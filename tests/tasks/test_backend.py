"""PgJobsBackend in the enqueuing process: configuration, validation, enqueue, transactions,
idempotency and the handler registry. Worker behaviour is in test_worker.py."""

from __future__ import annotations

import datetime as dt
import math

import django
import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from django_pgjobs import job
from django_pgjobs.exceptions import IdempotencyConflict, PayloadNotSerializable
from django_pgjobs.models import Job
from django_pgjobs.registry import get_handler, registered
from django_pgjobs.tasks import PgJobsBackend, PgJobsTask, TaskHandler
from django_pgjobs.tasks.compat import (
    InvalidTask,
    InvalidTaskBackend,
    TaskResultStatus,
    task_backends,
    task_enqueued,
)
from django_pgjobs.tasks.mapping import from_pgjobs_priority, to_pgjobs_priority
from tests.helpers import db_now, job_count
from tests.tasks.helpers import captured
from tests.tasks.taskapp import tasks as t

pytestmark = pytest.mark.django_db

BACKEND = "django_pgjobs.tasks.PgJobsBackend"


# -- configuration ---------------------------------------------------------------------------------
def test_the_configured_backend_and_its_features():
    backend = task_backends["default"]
    assert isinstance(backend, PgJobsBackend)
    assert backend.alias == "default"
    assert backend.queues == {"default", "mail", "reports", "queue_1"}
    assert backend.task_class is PgJobsTask
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority
    assert getattr(backend, "supports_metadata", False) is False  # Django's main branch adds it
    assert isinstance(t.noop_task, PgJobsTask) and isinstance(t.noop_task_from_bare_decorator, PgJobsTask)


def test_options_are_refused_with_a_pointer_to_the_right_place():
    with (
        override_settings(TASKS={"default": {"BACKEND": BACKEND, "OPTIONS": {"max_attempts": 3}}}),
        pytest.raises(InvalidTaskBackend, match=r"takes no OPTIONS.*PGJOBS setting"),
    ):
        task_backends["default"]


def test_system_check_wants_the_app_installed():
    assert list(task_backends["default"].check()) == []
    apps = [a for a in django.conf.settings.INSTALLED_APPS if not a.startswith("django_pgjobs")]
    with override_settings(INSTALLED_APPS=apps):
        messages = list(PgJobsBackend("x", {"BACKEND": BACKEND}).check())
    assert [m.id for m in messages] == ["django_pgjobs.E010"]
    assert "INSTALLED_APPS" in messages[0].hint


# -- enqueue -------------------------------------------------------------------------------------
def test_enqueue_writes_one_ready_job_and_returns_its_result(django_assert_num_queries):
    with captured(task_enqueued) as signals, django_assert_num_queries(1):
        result = t.noop_task.enqueue(1, two=3)

    stored = Job.objects.get(pk=int(result.id))
    assert (stored.task, stored.queue, stored.status) == (
        "tests.tasks.taskapp.tasks.noop_task",
        "default",
        "ready",
    )
    assert stored.payload == {"args": [1], "kwargs": {"two": 3}}
    assert result.id == str(stored.id)
    assert result.status == TaskResultStatus.READY and not result.is_finished
    # The enqueue statement's own time (not the test transaction's start).
    assert result.enqueued_at == stored.created_at and stored.created_at >= db_now()
    assert (result.started_at, result.last_attempted_at, result.finished_at) == (None, None, None)
    assert (result.args, result.kwargs) == ([1], {"two": 3})
    assert (result.errors, result.worker_ids, result.attempts) == ([], [], 0)
    assert result.backend == "default"
    assert result.task == t.noop_task
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018
    assert signals == [("enqueued", PgJobsBackend, TaskResultStatus.READY, None)]


def test_aenqueue_from_async_code():
    async def enqueue():
        return await t.noop_task_async.aenqueue("x")

    with captured(task_enqueued) as signals:
        result = async_to_sync(enqueue)()
    assert Job.objects.get(pk=int(result.id)).payload == {"args": ["x"], "kwargs": {}}
    assert result.task == t.noop_task_async
    assert [s[0] for s in signals] == ["enqueued"]


def test_arguments_are_normalised_like_django_does():
    result = t.echo.enqueue((1, 2), b"bytes", nested={"t": (3,)})
    assert result.args == [[1, 2], "bytes"]
    assert Job.objects.get(pk=int(result.id)).payload == {
        "args": [[1, 2], "bytes"],
        "kwargs": {"nested": {"t": [3]}},
    }


def test_an_unsupported_argument_is_a_type_error_naming_it_and_writes_nothing():
    with pytest.raises(TypeError, match="Unsupported type") as info:
        t.echo.enqueue(1, when=dt.datetime.now())
    assert "argument 'when'" in str(info.value) and "tests.tasks.taskapp.tasks.echo" in str(info.value)
    assert isinstance(info.value, PayloadNotSerializable)
    assert job_count() == 0


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((math.nan,), {}, "is not valid JSON"),
        (({1: "a"},), {}, "dict key 1 is int"),
        (("a\x00b",), {}, "NUL"),
    ],
)
def test_values_jsonb_would_change_or_refuse_are_refused(args, kwargs, message):
    with pytest.raises(PayloadNotSerializable, match=message):
        t.echo.enqueue(*args, **kwargs)
    assert job_count() == 0


@pytest.mark.parametrize(
    "args, kwargs, message",
    [((), {}, "missing a required argument: 'a'"), ((1, 2, 3), {}, "too many positional arguments")],
)
def test_a_call_that_does_not_fit_the_signature_is_a_type_error(args, kwargs, message):
    with pytest.raises(TypeError, match=message) as info:
        t.typed.enqueue(*args, **kwargs)
    assert "task 'tests.tasks.taskapp.tasks.typed'" in str(info.value)
    assert job_count() == 0


def test_run_after_is_the_jobs_run_at():
    later = timezone.now() + dt.timedelta(hours=2)
    result = t.noop_task.using(run_after=later).enqueue()
    assert Job.objects.get(pk=int(result.id)).run_at == later
    assert result.status == TaskResultStatus.READY
    assert result.task.run_after == later
    assert result.task == t.noop_task.using(run_after=later)


@override_settings(USE_TZ=False, TIME_ZONE="Europe/Paris")
def test_naive_run_after_without_time_zone_support_is_local_time():
    later = dt.datetime.now() + dt.timedelta(hours=2)
    result = t.noop_task.using(run_after=later).enqueue()
    # Stored as that local time (Django reads it back naive, in TIME_ZONE, as it was given).
    assert Job.objects.get(pk=int(result.id)).run_at == later


def test_priority_is_stored_through_the_one_mapping_and_read_back():
    result = t.noop_task.using(priority=10).enqueue()
    assert Job.objects.get(pk=int(result.id)).priority == to_pgjobs_priority(10)
    assert result.task.priority == 10
    assert all(from_pgjobs_priority(to_pgjobs_priority(p)) == p for p in range(-100, 101))


def test_queue_name_is_the_jobs_queue():
    result = t.noop_task.using(queue_name="mail").enqueue()
    assert Job.objects.get(pk=int(result.id)).queue == "mail"
    assert result.task.queue_name == "mail"


def test_max_attempts_per_call():
    result = t.noop_task.using(max_attempts=2).enqueue()
    assert Job.objects.get(pk=int(result.id)).max_attempts == 2
    assert Job.objects.get(pk=int(t.noop_task.enqueue().id)).max_attempts == 5  # PGJOBS default


# -- validation --------------------------------------------------------------------------------------
def test_unknown_queue_is_refused_and_an_empty_queues_list_allows_any():
    with pytest.raises(InvalidTask, match=r"Queue 'nope' is not valid for backend\."):
        t.noop_task.using(queue_name="nope")
    assert t.noop_task.using(queue_name="nope", backend="open").queue_name == "nope"


@pytest.mark.parametrize(
    "options, message",
    [
        ({"queue_name": "q" * 101}, "queue name is 101 characters long; the limit is 100"),
        ({"queue_name": "a\x00b"}, "queue name may not contain NUL"),
        ({"max_attempts": 0}, "max_attempts must be between 1 and"),
        ({"idempotency_key": ""}, "idempotency_key must be a non-empty string"),
        ({"idempotency_key": "k" * 256}, "idempotency_key is 256 characters long"),
    ],
)
def test_what_the_queue_cannot_store_is_invalid_task(options, message):
    with pytest.raises(InvalidTask, match=message):
        t.noop_task.using(backend="open", **options)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"priority": 101}, "priority must be a whole number between -100 and 100."),
        ({"priority": 3.5}, "priority must be a whole number"),
        ({"run_after": dt.datetime(2030, 1, 1)}, "run_after must be an aware datetime."),
    ],
)
def test_djangos_own_rules_apply(options, message):
    with pytest.raises(InvalidTask, match=message):
        t.noop_task.using(**options)


def test_validation_runs_again_at_enqueue():
    with override_settings(TASKS={"default": {"BACKEND": BACKEND, "QUEUES": ["special"]}}):
        special = t.noop_task.using(queue_name="special")
    with pytest.raises(InvalidTask, match=r"Queue 'special' is not valid for backend\."):
        special.enqueue()
    assert job_count() == 0


def module_level(a: int = 0) -> int:
    return a


def test_function_must_be_module_level(restore_registry):
    from django_pgjobs.tasks.compat import task_backends

    def local() -> None: ...

    cls = task_backends["default"].task_class
    with pytest.raises(InvalidTask, match="module level"):
        cls(func=local, priority=0, backend="default", queue_name="default", run_after=None)


# -- our options on @task ------------------------------------------------------------------------------
@pytest.mark.skipif(not t.DECORATOR_FORWARDS_OPTIONS, reason="Django 6.0's @task takes no extra options")
def test_decorator_options_reach_the_handler_the_worker_uses(restore_registry):
    from django_pgjobs.tasks.compat import Task

    decorated = t.task(max_attempts=3, backoff={"base": 3, "cap": 60, "jitter": 0}, lease=90, timeout=30)(
        module_level
    )
    assert isinstance(decorated, Task) and decorated.max_attempts == 3
    handler = get_handler("tests.tasks.test_backend.module_level")
    assert isinstance(handler, TaskHandler)
    assert (handler.lease, handler.timeout, handler.max_attempts) == (90, 30, 3)
    assert handler.retry_delay(2, RuntimeError()) == 9
    assert Job.objects.get(pk=int(decorated.enqueue().id)).max_attempts == 3


@pytest.mark.skipif(t.DECORATOR_FORWARDS_OPTIONS, reason="Django 6.1 and the backport forward options")
def test_django_60_decorator_takes_no_options_but_the_task_class_does(restore_registry):
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_attempts'"):
        t.task(max_attempts=3)(module_level)
    made = t.pgjobs_task(max_attempts=3, lease=90)(module_level)
    assert get_handler("tests.tasks.test_backend.module_level").lease == 90
    assert Job.objects.get(pk=int(made.enqueue().id)).max_attempts == 3


@pytest.mark.parametrize(
    "options, message",
    [
        ({"lease": 0}, "lease must be a positive number"),
        ({"timeout": -1}, "timeout must be a positive number"),
        ({"backoff": {"bse": 2}}, "backoff options are base, cap and jitter"),
        ({"backoff": 5}, "backoff must be a callable"),
        ({"max_attempts": 0}, "max_attempts must be between 1"),
    ],
)
def test_bad_options_are_refused_at_definition(restore_registry, options, message):
    with pytest.raises(InvalidTask, match=message):
        t.pgjobs_task(**options)(module_level)
    assert "tests.tasks.test_backend.module_level" not in registered()


# -- registry --------------------------------------------------------------------------------------------
def test_every_task_is_registered_by_module_path_at_import():
    handler = get_handler("tests.tasks.taskapp.tasks.noop_task")
    assert isinstance(handler, TaskHandler) and handler.task is t.noop_task
    # Autodiscovery imported tasks.py: even tasks nobody referenced yet are known.
    assert "tests.tasks.taskapp.tasks.breaks_finished_receiver" in registered()
    assert "tests.tasks.taskapp.tasks.not_a_task" not in registered()


def test_using_copies_do_not_replace_the_registered_definition():
    t.noop_task.using(priority=5, queue_name="mail", idempotency_key="copy").enqueue()
    assert get_handler("tests.tasks.taskapp.tasks.noop_task").task is t.noop_task


def test_a_job_handler_holding_the_name_is_a_conflict(restore_registry):
    job(name="tests.tasks.test_backend.module_level")(lambda: None)
    with pytest.raises(InvalidTask, match="registered twice"):
        t.pgjobs_task()(module_level)


# -- idempotency -------------------------------------------------------------------------------------------
def test_the_same_key_returns_the_existing_job_without_a_second_signal():
    with captured(task_enqueued) as signals:
        first = t.echo.using(idempotency_key="order:7").enqueue(7)
        again = t.echo.using(idempotency_key="order:7").enqueue(7)
    assert again.id == first.id and job_count() == 1
    assert again.task.idempotency_key == "order:7"
    assert [s[0] for s in signals] == ["enqueued"]
    with pytest.raises(IdempotencyConflict, match="order:7"):
        t.echo.using(idempotency_key="order:7").enqueue(8)


# -- transactions ------------------------------------------------------------------------------------------
def test_enqueue_inside_a_rolled_back_atomic_leaves_nothing():
    with pytest.raises(RuntimeError), transaction.atomic():
        t.noop_task.enqueue()
        assert job_count() == 1
        raise RuntimeError("roll back")
    assert job_count() == 0


@pytest.mark.django_db(transaction=True)
def test_other_sessions_see_the_job_only_after_commit(pg_connect):
    other = pg_connect()
    with transaction.atomic():
        result = t.noop_task.enqueue()
        assert other.execute("SELECT count(*) FROM pgjobs_job").fetchone()[0] == 0
    assert other.execute("SELECT id FROM pgjobs_job").fetchall() == [(int(result.id),)]
