"""Prepared statements: the store prepares its statements from their second run on a direct
connection, never on a connection that says no, and leaves the project's own queries alone."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import override_settings

from django_pgjobs.models import Job

pytestmark = pytest.mark.django_db


def _prepared() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [r[0] for r in cursor.fetchall()]


def _ours(statements: list[str]) -> list[str]:
    return [s for s in statements if "pgjobs_job" in s]


@pytest.mark.django_db(transaction=True)
def test_a_statement_is_prepared_on_its_second_run_not_its_first():
    connection.close()  # a fresh connection, as a web request with CONN_MAX_AGE = 0 gets
    Job.objects.enqueue("tests.noop")
    assert _ours(_prepared()) == []  # a request that enqueues once pays no extra round trip
    Job.objects.enqueue("tests.noop")
    (statement,) = _ours(_prepared())
    assert "INSERT INTO pgjobs_job" in statement
    Job.objects.enqueue("tests.noop")
    assert len(_ours(_prepared())) == 1  # reused, not prepared again


def test_the_projects_own_queries_are_not_prepared():
    for _ in range(3):
        Job.objects.enqueue("tests.noop")
        list(Job.objects.filter(status="ready").values_list("pk", flat=True))
    assert all("INSERT INTO pgjobs_job" in s for s in _ours(_prepared()))


@override_settings(PGJOBS={"PREPARED_STATEMENTS": False})
def test_prepared_statements_can_be_turned_off():
    for _ in range(3):
        Job.objects.enqueue("tests.noop")
    assert _ours(_prepared()) == []


@pytest.mark.django_db(transaction=True)
def test_a_database_entry_that_refuses_prepared_statements_is_obeyed():
    connection.close()
    options = connection.settings_dict["OPTIONS"]
    options["prepare_threshold"] = None
    try:
        for _ in range(3):
            Job.objects.enqueue("tests.noop")
        assert _ours(_prepared()) == []
    finally:
        del options["prepare_threshold"]
        connection.close()
