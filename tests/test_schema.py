"""The schema: claim/sweep plans use their partial indexes, constraints hold, storage options are
set, and the migrations match the models."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction

from django_pgjobs import sql
from django_pgjobs.models import Job
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

DONE_ROWS = 100_000
READY_ROWS = 1_000
RUNNING_ROWS = 50


def _fill(*, done: int = DONE_ROWS, ready: int = READY_ROWS, running: int = RUNNING_ROWS) -> None:
    """A table shaped like production: mostly finished jobs, a few claimable and running ones."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO pgjobs_job (task, queue, payload, status, attempts, run_at, result,
                                    started_at, finished_at, created_at, updated_at)
            SELECT 'tests.noop', 'q' || (g %% 5), '{}'::jsonb, 'done', 1, now() - interval '2 days',
                   'null'::jsonb, now() - interval '2 days', now() - make_interval(secs => g),
                   now() - interval '2 days', now() - interval '1 day'
            FROM generate_series(1, %s) AS g
            """,
            [done],
        )
        cursor.execute(
            """
            INSERT INTO pgjobs_job (task, queue, payload, status, priority, run_at)
            SELECT 'tests.noop', 'q' || (g %% 5), '{}'::jsonb, 'ready', (g %% 3)::smallint,
                   now() - make_interval(secs => g)
            FROM generate_series(1, %s) AS g
            """,
            [ready],
        )
        cursor.execute(
            """
            INSERT INTO pgjobs_job (task, queue, payload, status, attempts, run_at, locked_by,
                                    locked_at, started_at, lease_expires_at)
            SELECT 'tests.noop', 'q1', '{}'::jsonb, 'running', 1, now(), 'w', now(), now(),
                   CASE WHEN g <= %s THEN now() - interval '1 minute' ELSE now() + interval '1 minute' END
            FROM generate_series(1, %s) AS g
            """,
            [running // 2, running],  # half of them expired
        )
        cursor.execute("ANALYZE pgjobs_job")


def _plan(statement: str, params: dict) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + statement, params)
        (plan,) = cursor.fetchone()
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return json.dumps(plan)


def _scans(plan_json: str) -> list[tuple[str, str | None, str | None]]:
    """(node type, relation, index) of every node in the plan."""
    found = []

    def walk(node: dict) -> None:
        found.append((node["Node Type"], node.get("Relation Name"), node.get("Index Name")))
        for child in node.get("Plans", []):
            walk(child)

    walk(json.loads(plan_json)[0]["Plan"])
    return found


def _assert_uses(statement: str, params: dict, index: str) -> None:
    nodes = _scans(_plan(statement, params))
    assert not [n for n in nodes if n[0] == "Seq Scan" and n[1] == "pgjobs_job"], nodes
    assert any(n[2] == index for n in nodes), nodes


CLAIM = {"worker_id": "w", "lease": 30.0, "limit": 10}


def test_claim_for_a_queue_uses_the_partial_claim_index():
    _fill()
    _assert_uses(sql.CLAIM_QUEUE, {**CLAIM, "queue": "q1"}, "pgjobs_job_claim_idx")


def test_claim_from_every_queue_uses_the_partial_claim_any_index():
    _fill()
    _assert_uses(sql.CLAIM_ANY, CLAIM, "pgjobs_job_claim_any_idx")


def test_sweep_uses_the_partial_lease_index():
    _fill()
    params = {"limit": 1000, "message": "lease expired", "error_class": None, "traceback": None}
    _assert_uses(sql.SWEEP, {**params, "history_limit": 25}, "pgjobs_job_lease_idx")
    assert Job.objects.sweep_preview() == (RUNNING_ROWS // 2, 0)


def test_claim_on_the_big_table_still_claims_in_order():
    _fill(running=0)
    expected = list(
        Job.objects.filter(queue="q1", status="ready")
        .order_by("priority", "run_at", "id")
        .values_list("id", flat=True)[:3]
    )
    claimed = Job.objects.claim(["q1"], "w", limit=3)
    assert [j.id for j in claimed] == expected
    assert Job.objects.filter(status="running").count() == 3


def test_claim_indexes_are_partial_on_ready_and_lease_index_on_running():
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'pgjobs_job'")
        defs = dict(cursor.fetchall())
    assert (
        "(queue, priority, run_at, id) WHERE ((status)::text = 'ready'::text)" in defs["pgjobs_job_claim_idx"]
    )
    assert "(priority, run_at, id) WHERE ((status)::text = 'ready'::text)" in defs["pgjobs_job_claim_any_idx"]
    assert "(lease_expires_at) WHERE ((status)::text = 'running'::text)" in defs["pgjobs_job_lease_idx"]
    assert "UNIQUE" in defs["pgjobs_job_idempotency_key_key"]


# -- constraints ---------------------------------------------------------------------------------
def test_check_constraints_exist():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = 'pgjobs_job'::regclass AND contype = 'c'"
        )
        names = {r[0] for r in cursor.fetchall()}
    assert names >= {
        "pgjobs_job_status_valid",
        "pgjobs_job_max_attempts_positive",
        "pgjobs_job_attempts_nonnegative",
        "pgjobs_job_queue_task_nonempty",
        "pgjobs_job_running_is_leased",
    }


@pytest.mark.parametrize(
    "assignment, constraint",
    [
        ("status = 'bogus'", "pgjobs_job_status_valid"),
        ("status = 'READY'", "pgjobs_job_status_valid"),
        ("max_attempts = 0", "pgjobs_job_max_attempts_positive"),
        ("attempts = -1", "pgjobs_job_attempts_nonnegative"),
        ("queue = ''", "pgjobs_job_queue_task_nonempty"),
        ("task = ''", "pgjobs_job_queue_task_nonempty"),
        ("status = 'running'", "pgjobs_job_running_is_leased"),  # no worker, no lease
        ("status = 'running', locked_by = 'w'", "pgjobs_job_running_is_leased"),
    ],
)
def test_direct_writes_that_break_the_state_rules_are_refused(assignment, constraint):
    job = JobFactory()
    with pytest.raises(IntegrityError, match=constraint), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE pgjobs_job SET {assignment} WHERE id = %s", [job.pk])
    assert Job.objects.get(pk=job.pk).status == "ready"


def test_every_valid_status_is_accepted():
    for status in ("ready", "done", "dead"):
        JobFactory(status=status)
    JobFactory(running=True)
    assert Job.objects.count() == 4


def test_idempotency_key_is_unique_in_the_database():
    JobFactory(idempotency_key="k")
    with pytest.raises(IntegrityError, match="idempotency_key"), transaction.atomic():
        JobFactory(idempotency_key="k")
    # Many key-less jobs are fine (NULLs are distinct).
    JobFactory.create_batch(3, idempotency_key=None)
    assert Job.objects.count() == 4


def test_database_defaults_fill_a_minimal_insert():
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO pgjobs_job (task, payload) VALUES ('t', '{}') RETURNING id")
        (job_id,) = cursor.fetchone()
    job = Job.objects.get(pk=job_id)
    assert (job.queue, job.status, job.priority, job.attempts, job.max_attempts, job.history) == (
        "default",
        "ready",
        0,
        0,
        5,
        [],
    )
    assert job.run_at is not None and job.created_at is not None and job.updated_at is not None


# -- storage and migrations ----------------------------------------------------------------------
def test_table_storage_options_are_set():
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE oid = 'pgjobs_job'::regclass")
        (options,) = cursor.fetchone()
    options = dict(o.split("=", 1) for o in options)
    assert options == {
        "fillfactor": "70",
        "autovacuum_vacuum_scale_factor": "0.01",
        "autovacuum_vacuum_threshold": "1000",
        "autovacuum_analyze_scale_factor": "0.02",
        "autovacuum_vacuum_insert_scale_factor": "0.05",
    }


def test_migrations_match_the_models():
    # Exits with SystemExit(1) when the models have changes no migration describes.
    call_command("makemigrations", "django_pgjobs", "--check", "--dry-run", verbosity=0)
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
