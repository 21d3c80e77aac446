"""factory-boy factories for jobs in every state (rows as the manager would leave them)."""

from __future__ import annotations

import datetime as dt

import factory
from django.utils import timezone

from django_pgjobs.models import Job, Status


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

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
        delayed = factory.Trait(run_at=factory.LazyFunction(lambda: timezone.now() + dt.timedelta(hours=1)))


class DeadJobFactory(JobFactory):
    dead = True
