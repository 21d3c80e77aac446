"""Poison jobs: whatever a handler raises, its failure is recorded, its attempt is charged, and other
jobs keep flowing; no worker process dies of it (reproduced against 0.1: a fleet crash-looping)."""

from __future__ import annotations

import pytest

from django_pgjobs.models import Job
from tests.processes import executions, wait_for
from tests.testapp import jobs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_poison_jobs_end_dead_with_a_readable_reason_while_canaries_flow(workers, clean_executions):
    poison = {kind: jobs.poison.enqueue(kind) for kind in ("unprintable", "surrogate", "nul")}
    canaries = [jobs.echo.enqueue(i) for i in range(60)]
    fleet = workers("--processes", "4", "-c", "2", "--poll-interval", "0.2")
    wait_for(
        lambda: Job.objects.filter(pk__in=[j.id for j in canaries], status="done").count() == len(canaries),
        60,
        "every canary to run",
    )
    wait_for(
        lambda: Job.objects.filter(pk__in=[j.id for j in poison.values()], status="dead").count() == 3,
        60,
        "the poison jobs to go dead",
    )
    for kind, job in poison.items():
        stored = Job.objects.get(pk=job.id)
        assert (stored.attempts, stored.max_attempts) == (3, 3), kind  # charged every time
        assert [h["outcome"] for h in stored.history] == ["failed"] * 3, kind
        assert "\x00" not in stored.last_error
        stored.last_error.encode("utf-8")  # valid text
    unprintable = Job.objects.get(pk=poison["unprintable"].id)
    assert unprintable.last_error.startswith("tests.testapp.jobs.UnprintableError: UnprintableError()")
    assert "RuntimeError: __str__ of UnprintableError failed" not in unprintable.last_error
    surrogate = Job.objects.get(pk=poison["surrogate"].id)
    assert surrogate.last_error == "ValueError: a lone surrogate: \\ud800"
    nul = Job.objects.get(pk=poison["nul"].id)
    assert nul.last_error == "RuntimeError: a NUL byte: before\\x00after"
    assert "a NUL byte" in nul.history[-1]["traceback"]
    assert len(executions("poison")) == 9  # three attempts each, no more
    output = fleet.output()
    assert "restarting" not in output and "internal error" not in output, output
