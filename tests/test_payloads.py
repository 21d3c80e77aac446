"""Payloads: what a handler receives equals what was enqueued; anything else is refused up front."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pytest

from django_pgjobs.exceptions import InvalidJob, PayloadNotSerializable
from django_pgjobs.models import Job
from django_pgjobs.payloads import check_arguments, check_value, dumps
from django_pgjobs.registry import JobContext, get_handler
from tests.helpers import job_count
from tests.testapp import jobs
from tests.testapp.jobs import echo, identity

pytestmark = pytest.mark.django_db

ROUND_TRIP_ARGS = [
    0,
    -7,
    2**53 + 1,
    -(2**63),
    2**70,
    0.1,
    -2.5,
    1.0,
    1e-7,
    3.141592653589793,
    True,
    False,
    None,
    "",
    "plain",
    "héllo wörld",
    "日本語のテキスト",
    "emoji 😀👍🏽",
    "quotes \" ' and \\ backslash\n\ttabs",
    [],
    {},
    [1, [2, [3, {"deep": [None, True]}]]],
]
ROUND_TRIP_KWARGS = {
    "nested": {"a": {"b": {"c": [1, 2.5, "x", {"d": None}]}}},
    "unicode_keys": {"ключ": "значение", "ü": 1, "": "empty key"},
    "numbers": {"int": 42, "neg": -1, "float": 6.02e23 / 1e23, "big": 123456789012345678901234567890},
    "list_of_dicts": [{"id": i, "tags": ["a", "b"]} for i in range(3)],
    "flag": False,
}


def same_types(a, b) -> bool:
    """Equal *and* of the same JSON types all the way down (1 == 1.0 == True in Python)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same_types(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_types(a[k], b[k]) for k in a)
    return a == b


def run_claimed(job_id: int):
    """Claim the job the way a worker does and call its handler with what the row holds."""
    (claimed,) = Job.objects.claim(None, "w1")
    assert claimed.id == job_id
    handler = get_handler(claimed.task)
    context = JobContext.for_claim(claimed, "w1")
    return claimed, handler.run(context, claimed.args, claimed.kwargs)


def test_handler_receives_exactly_what_was_enqueued():
    job = identity.enqueue(*ROUND_TRIP_ARGS, **ROUND_TRIP_KWARGS)
    claimed, received = run_claimed(job.pk)
    assert same_types(received, {"args": ROUND_TRIP_ARGS, "kwargs": ROUND_TRIP_KWARGS})
    # And the result survives the trip back through complete().
    assert Job.objects.complete([(claimed.id, claimed.token, received)]) == {claimed.token: "done"}
    assert same_types(Job.objects.get(pk=job.pk).result, received)


def test_manager_enqueue_round_trips_the_payload():
    payload = {"args": ROUND_TRIP_ARGS, "kwargs": ROUND_TRIP_KWARGS}
    job, _ = Job.objects.enqueue("tests.identity", payload)
    assert same_types(Job.objects.get(pk=job.pk).payload, payload)
    _, received = run_claimed(job.pk)
    assert same_types(received, payload)


def test_takes_context_handler_gets_the_context_first(clean_executions):
    job = echo.using(idempotency_key="ctx-key").enqueue(value={"n": 1})
    _, received = run_claimed(job.pk)
    assert received == {"echo": {"n": 1}, "attempt": 1, "key": "ctx-key"}


BAD_VALUES = [
    (dt.datetime(2030, 1, 1, tzinfo=dt.UTC), "datetime is not JSON-serialisable"),
    (dt.date(2030, 1, 1), "date is not JSON-serialisable"),
    ((1, 2), "tuple would arrive as a list"),
    ({1, 2}, "set is not JSON-serialisable"),
    (frozenset(), "frozenset is not JSON-serialisable"),
    (float("nan"), "nan is not valid JSON"),
    (float("inf"), "inf is not valid JSON"),
    (float("-inf"), "-inf is not valid JSON"),
    ({1: "a"}, "dict key 1 is int, JSON keys are strings"),
    ({None: "a"}, "dict key None is NoneType"),
    ("a\x00b", "NUL"),
    ({"k\x00": 1}, "NUL"),
    ("\ud800", "lone surrogate"),
    (decimal.Decimal("1.5"), "Decimal is not JSON-serialisable"),
    (uuid.UUID(int=1), "UUID is not JSON-serialisable"),
    (b"bytes", "bytes is not JSON-serialisable"),
    (object(), "object is not JSON-serialisable"),
]


@pytest.mark.parametrize("value, reason", BAD_VALUES)
def test_handler_enqueue_refuses_a_bad_keyword_argument(value, reason):
    with pytest.raises(PayloadNotSerializable) as info:
        identity.enqueue(1, when=value)
    message = str(info.value)
    assert "job 'tests.identity'" in message
    assert "argument 'when'" in message
    assert reason in message
    assert job_count() == 0


@pytest.mark.parametrize("value, reason", BAD_VALUES[:6])
def test_handler_enqueue_refuses_a_bad_positional_argument(value, reason):
    with pytest.raises(PayloadNotSerializable, match=r"argument '\*args' \(positional 1\)") as info:
        identity.enqueue("fine", value)
    assert reason in str(info.value)
    assert job_count() == 0


def test_a_positional_refusal_names_the_parameter_it_binds_to():
    when = dt.datetime(2030, 1, 1)
    with pytest.raises(PayloadNotSerializable) as info:
        jobs.signature.enqueue(1, when)  # signature(a, b=2, *, c=None)
    assert str(info.value) == (
        "job 'tests.signature': argument 'b' (positional 1) cannot be stored as JSON: "
        "datetime is not JSON-serialisable"
    )
    with pytest.raises(PayloadNotSerializable, match=r"argument 'b' \(positional 1\) \(at b\['at'\]\)"):
        jobs.signature.enqueue(1, {"at": when})
    # A takes_context handler: the context parameter takes no argument, the next one does.
    with pytest.raises(PayloadNotSerializable, match=r"argument 'value' \(positional 0\)"):
        jobs.echo.enqueue({1, 2})
    # Passed by keyword, it reads as before.
    with pytest.raises(PayloadNotSerializable, match=r"argument 'b' cannot be stored"):
        jobs.signature.enqueue(1, b=when)
    assert job_count() == 0


def test_without_a_handler_positions_are_all_there_is():
    with pytest.raises(PayloadNotSerializable, match=r"positional argument 0 cannot be stored"):
        check_arguments("t", [{1, 2}], {})


def test_the_error_points_into_nested_values():
    with pytest.raises(PayloadNotSerializable) as info:
        identity.enqueue(order={"lines": [{"sku": "a"}, {"sku": "b", "at": dt.datetime(2030, 1, 1)}]})
    message = str(info.value)
    assert "argument 'order'" in message
    assert "(at order['lines'][1]['at'])" in message
    assert "datetime" in message
    assert job_count() == 0


@pytest.mark.parametrize("value, reason", BAD_VALUES)
def test_manager_enqueue_refuses_a_bad_payload(value, reason):
    with pytest.raises(PayloadNotSerializable) as info:
        Job.objects.enqueue("tests.raw", {"args": [], "kwargs": {"when": value}})
    message = str(info.value)
    assert "job 'tests.raw'" in message
    assert "payload['kwargs']['when']" in message
    assert reason in message
    assert job_count() == 0


def test_payload_errors_are_invalid_job_and_type_errors():
    # Callers can catch either the package's InvalidJob or the built-in TypeError.
    with pytest.raises(InvalidJob):
        identity.enqueue(x={1, 2})
    with pytest.raises(TypeError):
        identity.enqueue(x={1, 2})


def test_check_arguments_builds_the_stored_payload():
    assert check_arguments("t", (1, "a"), {"k": [1]}) == {"args": [1, "a"], "kwargs": {"k": [1]}}
    assert check_arguments("t", [], {}) == {"args": [], "kwargs": {}}


def test_check_value_names_what_it_checks():
    check_value("t", "result", {"ok": [1, 2.5, None]})
    with pytest.raises(PayloadNotSerializable, match=r"job 't': result \(at result\['when'\]\)"):
        check_value("t", "result", {"when": dt.time(1)})


def test_dumps_is_compact_strict_json():
    assert dumps({"a": [1, 2.5, None, True], "é": "ü"}) == '{"a":[1,2.5,null,true],"\\u00e9":"\\u00fc"}'
    with pytest.raises(ValueError):
        dumps(float("nan"))


def test_an_integer_too_long_to_print_as_json_is_refused_at_enqueue():
    with pytest.raises(
        PayloadNotSerializable, match=r"argument 'n' cannot be stored as JSON: integer too large"
    ):
        jobs.identity.enqueue(n=10**5000)
    jobs.identity.enqueue(n=10**4000)  # under Python's 4,300-digit limit: fine
