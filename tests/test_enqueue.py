"""Enqueue: defaults, scheduling, idempotency keys, bulk enqueue, transactions and notifications."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connections, transaction
from django.test import override_settings
from django.utils import timezone

from django_pgjobs.exceptions import IdempotencyConflict, InvalidJob
from django_pgjobs.managers import Enqueued, NewJob
from django_pgjobs.models import Job
from tests.helpers import clock_now, db_now, job_count, row_text
from tests.testapp.jobs import signature

pytestmark = pytest.mark.django_db

CHANNEL = "django_pgjobs"
PAYLOAD = {"args": [1], "kwargs": {"x": "y"}}


# -- single enqueue ------------------------------------------------------------------------------
def test_enqueue_inserts_a_ready_job_with_defaults():
    job, created = Job.objects.enqueue("tests.noop")
    after = clock_now()

    assert created is True
    stored = Job.objects.get(pk=job.pk)
    assert (stored.task, stored.queue, stored.status) == ("tests.noop", "default", "ready")
    assert (stored.priority, stored.attempts, stored.max_attempts) == (0, 0, 5)
    assert stored.payload == {}
    assert stored.history == []
    # The statement's time, not the (test) transaction's start.
    assert db_now() <= stored.run_at <= after
    assert stored.created_at == stored.run_at
    assert stored.idempotency_key is None
    assert stored.locked_by is None and stored.lease_expires_at is None
    # The returned object is the stored row.
    assert (job.id, job.status, job.run_at) == (stored.id, stored.status, stored.run_at)


def test_enqueue_options_are_stored():
    run_at = timezone.now() + dt.timedelta(days=1)
    job, _ = Job.objects.enqueue(
        "tests.noop", PAYLOAD, queue="mail", priority=-5, run_at=run_at, max_attempts=9
    )
    stored = Job.objects.get(pk=job.pk)
    assert (stored.queue, stored.priority, stored.max_attempts) == ("mail", -5, 9)
    assert stored.run_at == run_at
    assert stored.payload == PAYLOAD
    assert stored.status == "scheduled"  # due tomorrow: out of the claim index until promoted


def test_enqueue_with_a_run_at_in_the_past_is_ready_with_that_place_in_line():
    run_at = timezone.now() - dt.timedelta(hours=1)
    job, _ = Job.objects.enqueue("tests.noop", run_at=run_at)
    assert (job.status, Job.objects.get(pk=job.pk).run_at) == ("ready", run_at)


@pytest.mark.parametrize("delay", [30, 2.5, dt.timedelta(minutes=2)])
def test_enqueue_delay_sets_run_at_relative_to_the_statement(delay):
    job, _ = Job.objects.enqueue("tests.noop", delay=delay)
    after = clock_now()
    seconds = dt.timedelta(seconds=delay.total_seconds() if isinstance(delay, dt.timedelta) else delay)
    stored = Job.objects.get(pk=job.pk)
    assert db_now() + seconds <= stored.run_at <= after + seconds
    assert (job.status, stored.status) == ("scheduled", "scheduled")


def test_a_delay_counts_from_the_enqueue_not_from_the_start_of_a_long_transaction():
    # The caller's transaction (here: the test's) has been open for a while before it enqueues.
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_sleep(0.3)")
    job, _ = Job.objects.enqueue("tests.noop", delay=2)
    stored = Job.objects.get(pk=job.pk)
    assert stored.run_at >= db_now() + dt.timedelta(seconds=2.3)
    assert stored.created_at >= db_now() + dt.timedelta(seconds=0.3)


@override_settings(PGJOBS={"DEFAULT_QUEUE": "q-default", "DEFAULT_PRIORITY": 4, "DEFAULT_MAX_ATTEMPTS": 2})
def test_enqueue_defaults_come_from_settings():
    job, _ = Job.objects.enqueue("tests.noop")
    assert (job.queue, job.priority, job.max_attempts) == ("q-default", 4, 2)


# -- idempotency ---------------------------------------------------------------------------------
def test_same_key_twice_returns_the_same_row_unchanged():
    first, created1 = Job.objects.enqueue("tests.noop", PAYLOAD, idempotency_key="k1")
    before = row_text(first.pk)
    second, created2 = Job.objects.enqueue("tests.noop", PAYLOAD, idempotency_key="k1")

    assert (created1, created2) == (True, False)
    assert second.pk == first.pk
    assert row_text(first.pk) == before
    assert job_count() == 1


def test_same_key_with_equal_json_in_another_key_order_is_a_duplicate_not_a_conflict():
    first, _ = Job.objects.enqueue(
        "tests.noop", {"args": [], "kwargs": {"a": 1, "b": 2}}, idempotency_key="k"
    )
    second, created = Job.objects.enqueue(
        "tests.noop", {"kwargs": {"b": 2, "a": 1}, "args": []}, idempotency_key="k"
    )
    assert (second.pk, created) == (first.pk, False)


@pytest.mark.parametrize(
    "task, payload",
    [("tests.noop", {"args": [2], "kwargs": {"x": "y"}}), ("tests.echo", PAYLOAD)],
    ids=["different-payload", "different-task"],
)
def test_same_key_different_payload_or_task_conflicts_and_keeps_the_stored_row(task, payload):
    first, _ = Job.objects.enqueue("tests.noop", PAYLOAD, idempotency_key="invoice:1842:send-receipt")
    before = row_text(first.pk)

    with pytest.raises(IdempotencyConflict, match="invoice:1842:send-receipt") as info:
        Job.objects.enqueue(task, payload, idempotency_key="invoice:1842:send-receipt")

    assert info.value.key == "invoice:1842:send-receipt"
    assert row_text(first.pk) == before
    assert job_count() == 1


def test_conflict_inside_the_callers_transaction_leaves_it_usable():
    Job.objects.enqueue("tests.noop", PAYLOAD, idempotency_key="k")
    with transaction.atomic():
        with pytest.raises(IdempotencyConflict):
            Job.objects.enqueue("tests.noop", {"args": [9]}, idempotency_key="k")
        other, created = Job.objects.enqueue("tests.noop", PAYLOAD, idempotency_key="k2")
    assert created and Job.objects.filter(pk=other.pk).exists()


def test_handler_enqueue_reports_duplicates_through_created():
    first = signature.using(idempotency_key="sig:1").enqueue(1, c=3)
    second = signature.using(idempotency_key="sig:1").enqueue(1, c=3)
    assert (first.created, second.created) == (True, False)
    assert first.pk == second.pk
    with pytest.raises(IdempotencyConflict, match="sig:1"):
        signature.using(idempotency_key="sig:1").enqueue(2, c=3)


# -- enqueue_many --------------------------------------------------------------------------------
def test_enqueue_many_returns_ids_and_created_flags_in_input_order():
    existing, _ = Job.objects.enqueue("tests.noop", PAYLOAD, idempotency_key="old")
    jobs = [
        NewJob("tests.noop", {"args": [0]}),
        NewJob("tests.noop", PAYLOAD, idempotency_key="old"),  # already in the table
        NewJob("tests.noop", {"args": [2]}, idempotency_key="new"),
        NewJob("tests.noop", {"args": [3]}, queue="other"),
        NewJob("tests.noop", {"args": [2]}, idempotency_key="new"),  # repeated inside the batch
        NewJob("tests.noop", {"args": [5]}),
    ]
    result = Job.objects.enqueue_many(jobs)

    assert [r.created for r in result] == [True, False, True, True, False, True]
    assert result[1] == Enqueued(existing.pk, False)
    assert result[4].id == result[2].id
    fresh = [result[i].id for i in (0, 2, 3, 5)]
    assert len(set(fresh)) == 4 and existing.pk not in fresh
    # Each id is the row that was asked for at that position.
    for position, entry in enumerate(result):
        stored = Job.objects.get(pk=entry.id)
        assert stored.payload == jobs[position].payload
        assert stored.idempotency_key == jobs[position].idempotency_key
    assert Job.objects.get(pk=result[3].id).queue == "other"
    assert job_count() == 5


def test_enqueue_many_repeated_key_with_equal_json_in_another_key_order_is_a_duplicate():
    # The same rule as for single enqueues (jsonb equality), inside one batch and against the table.
    first = {"args": [], "kwargs": {"a": 1, "nested": {"x": 1, "y": [1, {"p": 1, "q": 2}]}}}
    reordered = {"kwargs": {"nested": {"y": [1, {"q": 2, "p": 1}], "x": 1}, "a": 1}, "args": []}
    result = Job.objects.enqueue_many(
        [
            NewJob("tests.noop", first, idempotency_key="k"),
            NewJob("tests.noop", reordered, idempotency_key="k"),
        ]
    )
    assert [r.created for r in result] == [True, False]
    assert result[0].id == result[1].id
    again = Job.objects.enqueue_many([NewJob("tests.noop", reordered, idempotency_key="k")])
    assert again == [Enqueued(result[0].id, False)]
    assert job_count() == 1


def test_enqueue_many_keeps_order_across_batches():
    jobs = [NewJob("tests.noop", {"args": [i]}) for i in range(7)]
    jobs.insert(3, NewJob("tests.noop", {"args": ["k"]}, idempotency_key="k"))
    jobs.append(NewJob("tests.noop", {"args": ["k"]}, idempotency_key="k"))  # in a later batch
    result = Job.objects.enqueue_many(jobs, batch_size=2)

    assert [Job.objects.get(pk=r.id).payload for r in result] == [j.payload for j in jobs]
    assert result[-1] == Enqueued(result[3].id, False)
    assert sum(r.created for r in result) == 8


def test_enqueue_many_empty_is_a_no_op():
    assert Job.objects.enqueue_many([]) == []
    assert job_count() == 0


def test_enqueue_many_conflict_with_the_table_writes_nothing():
    existing, _ = Job.objects.enqueue("tests.noop", PAYLOAD, idempotency_key="taken")
    before = row_text(existing.pk)
    jobs = [NewJob("tests.noop", {"args": [i]}) for i in range(5)]
    jobs.append(NewJob("tests.noop", {"args": ["different"]}, idempotency_key="taken"))

    with pytest.raises(IdempotencyConflict, match="taken"):
        Job.objects.enqueue_many(jobs, batch_size=2)  # the conflict is in the last batch

    assert job_count() == 1
    assert row_text(existing.pk) == before


def test_enqueue_many_conflict_inside_the_batch_writes_nothing():
    jobs = [
        NewJob("tests.noop", {"args": [1]}, idempotency_key="dup"),
        NewJob("tests.noop", {"args": [2]}),
        NewJob("tests.noop", {"args": [3]}, idempotency_key="dup"),
    ]
    with pytest.raises(IdempotencyConflict, match="dup"):
        Job.objects.enqueue_many(jobs)
    assert job_count() == 0


def test_enqueue_many_bad_input_anywhere_writes_nothing():
    jobs = [NewJob("tests.noop", {"args": [i]}) for i in range(3)] + [NewJob("tests.noop", queue="")]
    with pytest.raises(InvalidJob, match="queue name"):
        Job.objects.enqueue_many(jobs)
    assert job_count() == 0


def test_enqueue_many_joins_the_callers_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        Job.objects.enqueue_many([NewJob("tests.noop"), NewJob("tests.noop")])
        raise RuntimeError("roll back")
    assert job_count() == 0


# -- transactions --------------------------------------------------------------------------------
def test_enqueue_in_a_rolled_back_transaction_leaves_no_row():
    with pytest.raises(RuntimeError), transaction.atomic():
        job, _ = Job.objects.enqueue("tests.noop", idempotency_key="rolled-back")
        assert Job.objects.filter(pk=job.pk).exists()
        raise RuntimeError("roll back")
    assert job_count() == 0
    # The key is free again.
    assert Job.objects.enqueue("tests.noop", idempotency_key="rolled-back")[1] is True


def _listen(pg_connect):
    conn = pg_connect()
    conn.execute(f"LISTEN {CHANNEL}")
    return conn


def _notifications(conn, count: int, timeout: float = 10.0) -> list[tuple[str, str]]:
    """Wait (bounded) for ``count`` notifications and return (channel, payload) pairs in order."""
    return [(n.channel, n.payload) for n in conn.notifies(timeout=timeout, stop_after=count)]


def _marker(queue: str = "marker") -> None:
    """A committed, due enqueue: its notification arrives after any sent by earlier commits, so
    seeing it first proves that nothing earlier was sent (no sleeping and hoping)."""
    Job.objects.enqueue("tests.noop", queue=queue)


@pytest.mark.django_db(transaction=True)
def test_enqueue_notifies_on_commit_only(pg_connect):
    listener = _listen(pg_connect)
    with transaction.atomic():
        Job.objects.enqueue("tests.noop", queue="mail")
        Job.objects.enqueue("tests.noop", queue="mail")  # folded into one by PostgreSQL
        # Not committed yet: nothing may have been delivered.
        Job.objects.enqueue("tests.noop", queue="other-before-commit")
        assert list(listener.notifies(timeout=0, stop_after=1)) == []
    assert _notifications(listener, 2) == [(CHANNEL, "mail"), (CHANNEL, "other-before-commit")]
    _marker()
    assert _notifications(listener, 1) == [(CHANNEL, "marker")]


@pytest.mark.django_db(transaction=True)
def test_rolled_back_enqueue_sends_no_notification(pg_connect):
    listener = _listen(pg_connect)
    with pytest.raises(RuntimeError), transaction.atomic():
        Job.objects.enqueue("tests.noop", queue="rolled-back")
        raise RuntimeError("roll back")
    _marker()
    assert _notifications(listener, 1) == [(CHANNEL, "marker")]
    assert job_count() == 1


@pytest.mark.django_db(transaction=True)
def test_delayed_and_duplicate_enqueues_send_no_notification(pg_connect):
    from django_pgjobs.notify import notifier

    Job.objects.enqueue("tests.noop", queue="dup", idempotency_key="dup")
    assert notifier().flush()  # the first enqueue's own wake-up is sent before we listen
    listener = _listen(pg_connect)
    Job.objects.enqueue("tests.noop", queue="delayed", delay=60)
    Job.objects.enqueue("tests.noop", queue="scheduled", run_at=timezone.now() + dt.timedelta(hours=1))
    Job.objects.enqueue("tests.noop", queue="dup", idempotency_key="dup")  # not created
    Job.objects.enqueue_many([NewJob("tests.noop", queue="delayed-many", delay=60)])
    _marker()
    assert _notifications(listener, 1) == [(CHANNEL, "marker")]


@pytest.mark.django_db(transaction=True)
def test_enqueue_many_notifies_each_due_queue_once(pg_connect):
    listener = _listen(pg_connect)
    Job.objects.enqueue_many(
        [
            NewJob("tests.noop", queue="a"),
            NewJob("tests.noop", queue="b"),
            NewJob("tests.noop", queue="a"),
            NewJob("tests.noop", queue="later", delay=600),
        ]
    )
    _marker()
    got = _notifications(listener, 3)
    assert sorted(got[:2]) == [(CHANNEL, "a"), (CHANNEL, "b")]
    assert got[2] == (CHANNEL, "marker")


# -- concurrency ---------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_concurrent_enqueues_of_one_key_make_one_row():
    n = 10
    barrier = threading.Barrier(n, timeout=30)
    results: list[tuple[int, bool] | BaseException] = [None] * n  # type: ignore[list-item]

    def enqueue(i: int) -> None:
        try:
            connections["default"].ensure_connection()  # connect before the race, not during it
            barrier.wait()
            job, created = Job.objects.enqueue("tests.noop", PAYLOAD, idempotency_key="race")
            results[i] = (job.pk, created)
        except BaseException as exc:  # reported by the assertion below
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=enqueue, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)

    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == []
    ids = {job_id for job_id, _ in results}
    assert len(ids) == 1
    assert sum(created for _, created in results) == 1
    assert list(Job.objects.values_list("pk", flat=True)) == list(ids)


# -- bad input: a clear error and nothing written -------------------------------------------------
NAIVE = dt.datetime(2030, 1, 1, 12, 0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"run_at": NAIVE}, "naive"),
        ({"delay": -1}, "delay must be >= 0"),
        ({"delay": dt.timedelta(seconds=-5)}, "delay must be >= 0"),
        ({"delay": float("nan")}, "delay must be >= 0"),
        ({"delay": float("inf")}, "delay must be at most"),
        ({"delay": 1e300}, "delay must be at most"),
        ({"delay": "10"}, "delay must be seconds or a timedelta"),
        ({"delay": True}, "delay must be seconds or a timedelta"),
        ({"run_at": timezone.now(), "delay": 5}, "run_at or delay, not both"),
        ({"run_at": "2030-01-01T00:00:00Z"}, "run_at must be a datetime"),
        ({"run_at": dt.date(2030, 1, 1)}, "run_at must be a datetime"),
        ({"queue": ""}, "queue name must be a non-empty string"),
        ({"queue": "   "}, "queue name must be a non-empty string"),
        ({"queue": "q" * 101}, "queue name is 101 characters long; the limit is 100"),
        ({"queue": "a\x00b"}, "NUL"),
        ({"queue": 5}, "queue name must be a non-empty string"),
        ({"queue": "pgjobs:cancel"}, "job 'tests.noop': queue name 'pgjobs:cancel' is reserved"),
        ({"queue": "pgjobs:queues"}, "job 'tests.noop': queue name 'pgjobs:queues' is reserved"),
        ({"queue": "pgjobs:mine"}, "names starting with 'pgjobs:' are the workers' control messages"),
        ({"max_attempts": 0}, "max_attempts must be between 1"),
        ({"max_attempts": -3}, "max_attempts must be between 1"),
        ({"max_attempts": 2**31}, "max_attempts must be between 1"),
        ({"max_attempts": 1.5}, "max_attempts must be an integer"),
        ({"priority": 32768}, "priority must be between -32768 and 32767"),
        ({"priority": -32769}, "priority must be between -32768 and 32767"),
        ({"priority": "1"}, "priority must be an integer"),
        ({"priority": True}, "priority must be an integer"),
        ({"idempotency_key": ""}, "idempotency_key must be a non-empty string"),
        ({"idempotency_key": "k" * 256}, "idempotency_key is 256 characters long"),
        ({"idempotency_key": 42}, "idempotency_key must be a non-empty string"),
    ],
)
def test_bad_options_raise_invalid_job_and_write_nothing(kwargs, message):
    with pytest.raises(InvalidJob, match=message.replace("(", r"\(")):
        Job.objects.enqueue("tests.noop", **kwargs)
    assert job_count() == 0


@pytest.mark.parametrize(
    "task, message", [("", "task name"), ("t" * 201, "task name is 201"), (None, "task name")]
)
def test_bad_task_names_are_refused(task, message):
    with pytest.raises(InvalidJob, match=message):
        Job.objects.enqueue(task)
    assert job_count() == 0


@pytest.mark.parametrize("payload", [[1, 2], "x", 3])
def test_payload_must_be_a_dict(payload):
    with pytest.raises(
        InvalidJob, match=rf"payload must be a JSON object \(a dict\), got {type(payload).__name__}"
    ):
        Job.objects.enqueue("tests.noop", payload)
    assert job_count() == 0


def test_limits_are_inclusive():
    job, _ = Job.objects.enqueue(
        "t" * 200, queue="q" * 100, priority=-32768, max_attempts=2**31 - 1, idempotency_key="k" * 255
    )
    other, _ = Job.objects.enqueue("tests.noop", priority=32767, max_attempts=1, delay=0)
    assert Job.objects.filter(pk__in=[job.pk, other.pk]).count() == 2


@pytest.mark.parametrize(
    "options, message",
    [
        ({"max_attempts": 0}, "max_attempts must be between 1"),
        ({"queue": ""}, "queue name must be a non-empty string"),
        ({"priority": 40000}, "priority must be between"),
        ({"delay": -1}, "delay must be >= 0"),
        ({"run_at": NAIVE}, "naive"),
    ],
)
def test_handler_options_are_validated_too(options, message):
    with pytest.raises(InvalidJob, match=message):
        signature.using(**options).enqueue(1)
    assert job_count() == 0


def test_handler_enqueue_uses_handler_options_and_using_overrides_them():
    job = signature.enqueue(1)
    assert (job.task, job.queue, job.priority, job.max_attempts) == ("tests.signature", "sig", 3, 7)
    job = signature.using(queue="q2", priority=0, max_attempts=1).enqueue(1)
    assert (job.queue, job.priority, job.max_attempts) == ("q2", 0, 1)


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_enqueue_takes_no_lock_on_the_existing_job(pg_connect):
    """ON CONFLICT DO UPDATE would row-lock the existing job until the caller's transaction ends
    (holding up the worker that runs it); the duplicate is read back instead."""
    first, _ = Job.objects.enqueue("tests.noop", PAYLOAD, idempotency_key="held")
    other = pg_connect()
    with transaction.atomic():
        again, created = Job.objects.enqueue("tests.noop", PAYLOAD, idempotency_key="held")
        assert (again.pk, created) == (first.pk, False)
        # Another session can lock the row at once: nothing holds it.
        with other.transaction():
            locked = other.execute(
                "SELECT id FROM pgjobs_job WHERE id = %s FOR UPDATE NOWAIT", [first.pk]
            ).fetchall()
        assert locked == [(first.pk,)]


def test_the_returned_duplicate_is_the_stored_job():
    first, _ = Job.objects.enqueue("tests.noop", PAYLOAD, idempotency_key="k", priority=3, delay=60)
    again, created = Job.objects.enqueue("tests.noop", PAYLOAD, idempotency_key="k")
    assert created is False
    for field in ("pk", "status", "priority", "run_at", "payload", "created_at", "max_attempts"):
        assert getattr(again, field) == getattr(first, field), field


@override_settings(PGJOBS={"MAX_PAYLOAD_BYTES": 1000})
def test_a_payload_over_the_size_limit_is_refused_with_its_size():
    with pytest.raises(
        InvalidJob, match=r"job 'tests\.noop': payload is 2,0\d\d bytes of JSON; the limit is 1,000"
    ):
        Job.objects.enqueue("tests.noop", {"args": ["x" * 2000], "kwargs": {}})
    with pytest.raises(InvalidJob, match="MAX_PAYLOAD_BYTES"):
        signature.enqueue(1, c="y" * 2000)
    with pytest.raises(InvalidJob, match="bytes of JSON"):
        Job.objects.enqueue_many([NewJob("tests.noop"), NewJob("tests.noop", {"args": ["z" * 2000]})])
    assert job_count() == 0
    Job.objects.enqueue("tests.noop", {"args": ["x" * 900], "kwargs": {}})  # under it: fine


def test_the_default_payload_limit_is_one_mebibyte():
    Job.objects.enqueue("tests.noop", {"args": ["x" * (1024 * 1024 - 100)]})
    with pytest.raises(InvalidJob, match="the limit is 1,048,576"):
        Job.objects.enqueue("tests.noop", {"args": ["x" * (1024 * 1024)]})


def test_new_job_is_exported():
    import django_pgjobs

    assert django_pgjobs.NewJob is NewJob


@pytest.mark.django_db(transaction=True)
def test_a_stream_of_wake_ups_for_one_queue_is_coalesced_and_the_last_is_never_lost(pg_connect):
    """A hundred enqueues' wake-ups within a few milliseconds: one notification at once (an idle
    worker wakes immediately) and one at the end of the window, not a hundred transactions."""
    from django_pgjobs.notify import notifier

    listener = _listen(pg_connect)
    n = notifier()
    assert n.flush()
    sent_before = n.sent
    for _ in range(100):
        n.wake("default", ["stream"])
    assert n.flush()
    _marker()
    got = []
    for note in listener.notifies(timeout=10):  # bounded; the marker comes after everything sent
        got.append(note.payload)
        if note.payload == "marker":
            break
    stream = [p for p in got if p == "stream"]
    assert 1 <= len(stream) <= 5, got
    assert got[-1] == "marker"
    assert n.sent - sent_before <= 6


@pytest.mark.django_db(transaction=True)
def test_no_wake_up_into_a_backlog_but_always_for_a_quiet_queue(pg_connect):
    """A queue whose oldest ready job has waited BACKLOG_SECONDS has busy (or no) workers: more
    notifications would only cost transactions. A quiet queue's first job still wakes at once."""
    from django_pgjobs.models import Job as JobModel
    from django_pgjobs.store import BACKLOG_SECONDS

    listener = _listen(pg_connect)
    Job.objects.enqueue("tests.noop", queue="busy")  # a quiet queue: woken
    assert _notifications(listener, 1) == [(CHANNEL, "busy")]
    # The job has been waiting longer than the backlog threshold (as on a saturated queue).
    from tests.factories import force_update

    (waiting,) = JobModel.objects.filter(queue="busy")
    force_update(waiting.pk, run_at=timezone.now() - dt.timedelta(seconds=BACKLOG_SECONDS * 20))
    Job.objects.enqueue("tests.noop", queue="busy")  # into the backlog: no wake-up
    Job.objects.enqueue("tests.noop", queue="fresh")  # another queue, quiet: woken
    _marker()
    assert _notifications(listener, 2) == [(CHANNEL, "fresh"), (CHANNEL, "marker")]


def test_the_control_payloads_are_in_the_reserved_queue_namespace():
    # What the reservation protects: a queue named like one would be taken for the control message.
    from django_pgjobs.queue_control import QUEUES_CHANGED
    from django_pgjobs.store import CANCEL_REQUESTED
    from django_pgjobs.validation import RESERVED_QUEUE_PREFIX

    assert CANCEL_REQUESTED.startswith(RESERVED_QUEUE_PREFIX)
    assert QUEUES_CHANGED.startswith(RESERVED_QUEUE_PREFIX)


@pytest.mark.parametrize("queue", ["pgjobs:cancel", "pgjobs:queues"])
def test_a_handler_enqueue_into_a_reserved_queue_names_the_job_and_the_queue(queue):
    from tests.testapp.jobs import noop

    with pytest.raises(InvalidJob, match=f"job 'tests.noop': queue name '{queue}' is reserved"):
        noop.using(queue=queue).enqueue()
    with pytest.raises(InvalidJob, match=f"queue name '{queue}' is reserved"):
        Job.objects.enqueue_many([NewJob("tests.noop", queue="mail"), NewJob("tests.noop", queue=queue)])
    assert job_count() == 0


def test_names_that_merely_contain_pgjobs_are_fine():
    for queue in ("pgjobs", "my-pgjobs:cancel", "PGJOBS:cancel", "pgjobs-mail"):
        Job.objects.enqueue("tests.noop", queue=queue)
    assert job_count() == 4
