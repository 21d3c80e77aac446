"""factory-boy factories for jobs in every state (rows as the store would leave them).

Jobs refuse ORM writes (only the store writes them), so the factory inserts its rows with plain SQL:
test fixtures are the one place rows are put straight into a state.
"""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import factory
from django.db import connections
from django.db.models.expressions import DatabaseDefault
from django.utils import timezone

from django_pgjobs.models import Job, Status

_tokens = itertools.count(10**12)  # far from the claim-token sequence's own values


def insert_job(**fields: Any) -> Job:
    """Insert one job row with exactly these field values (others take their database default)."""
    job = Job(**fields)
    if job.status == Status.RUNNING and job.claim_token is None:
        job.claim_token = next(_tokens)
    alias = Job.objects.db_alias
    connection = connections[alias]
    columns, values = [], []
    for f in Job._meta.concrete_fields:
        value = getattr(job, f.attname)
        if (f.primary_key and value is None) or isinstance(value, DatabaseDefault):
            continue
        columns.append(connection.ops.quote_name(f.column))
        values.append(f.get_db_prep_save(value, connection))
    placeholders = ", ".join(["%s"] * len(values))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO pgjobs_job ({', '.join(columns)}) VALUES ({placeholders}) RETURNING id", values
        )
        job.pk = cursor.fetchone()[0]
    return Job.objects.get(pk=job.pk)  # as stored (database defaults filled in)


def force_update(ids: list[int] | int, **fields: Any) -> None:
    """Put existing rows straight into a state (a test's "meanwhile, a worker claimed it")."""
    ids = [ids] if isinstance(ids, int) else list(ids)
    if fields.get("status") == Status.RUNNING and "claim_token" not in fields:
        fields["claim_token"] = next(_tokens)
    connection = connections[Job.objects.db_alias]
    assignments, values = [], []
    for name, value in fields.items():
        f = Job._meta.get_field(name)
        assignments.append(f"{connection.ops.quote_name(f.column)} = %s")
        values.append(f.get_db_prep_save(value, connection))
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE pgjobs_job SET {', '.join(assignments)} WHERE id = ANY(%s)", [*values, ids])


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    @classmethod
    def _create(cls, model_class: type[Job], *args: Any, **kwargs: Any) -> Job:
        return insert_job(**kwargs)

    task = "tests.testapp.jobs.record"
    queue = "default"
    payload = factory.LazyFunction(lambda: {"args": [], "kwargs": {}})
    status = Status.READY
    priority = 0
    attempts = 0
    max_attempts = 5
    run_at = factory.LazyFunction(timezone.now)
    history = factory.LazyFunction(list)

    class Params:
        running = factory.Trait(
            status=Status.RUNNING,
            attempts=1,
            locked_by="worker-test",
            locked_at=factory.LazyFunction(timezone.now),
            started_at=factory.LazyFunction(timezone.now),
            lease_expires_at=factory.LazyFunction(lambda: timezone.now() + dt.timedelta(seconds=60)),
        )
        expired = factory.Trait(
            status=Status.RUNNING,
            attempts=1,
            locked_by="worker-gone",
            locked_at=factory.LazyFunction(lambda: timezone.now() - dt.timedelta(minutes=5)),
            started_at=factory.LazyFunction(lambda: timezone.now() - dt.timedelta(minutes=5)),
            lease_expires_at=factory.LazyFunction(lambda: timezone.now() - dt.timedelta(seconds=1)),
        )
        done = factory.Trait(
            status=Status.DONE,
            attempts=1,
            result={"ok": True},
            started_at=factory.LazyFunction(timezone.now),
            finished_at=factory.LazyFunction(timezone.now),
        )
        dead = factory.Trait(
            status=Status.DEAD,
            attempts=5,
            last_error="RuntimeError: boom",
            finished_at=factory.LazyFunction(timezone.now),
            history=factory.LazyFunction(
                lambda: [
                    {
                        "attempt": 5,
                        "worker": "w",
                        "outcome": "failed",
                        "error_class": "RuntimeError",
                        "message": "boom",
                        "traceback": "Traceback...\nRuntimeError: boom",
                    }
                ]
            ),
        )
        delayed = factory.Trait(
            status=Status.SCHEDULED,
            run_at=factory.LazyFunction(lambda: timezone.now() + dt.timedelta(hours=1)),
        )
        cancelled = factory.Trait(
            status=Status.CANCELLED,
            last_error="cancelled by staff",
            finished_at=factory.LazyFunction(timezone.now),
        )


class DeadJobFactory(JobFactory):
    dead = True
