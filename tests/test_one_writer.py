"""One writer: ORM writes on jobs refuse, naming the operation to use instead; reads stay."""

from __future__ import annotations

import pytest

from django_pgjobs import DirectWriteRefused
from django_pgjobs.models import DeadJob, Job
from tests.factories import JobFactory
from tests.helpers import row_text

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "write, operation, instead",
    [
        (lambda job: job.save(), "Job.save()", "Job.objects.edit()"),
        (lambda job: job.save(update_fields=["status"]), "Job.save()", "Job.objects.edit()"),
        (lambda job: job.delete(), "Job.delete()", "Job.objects.discard"),
        (lambda job: Job.objects.filter(pk=job.pk).update(status="ready"), "QuerySet.update()", "edit("),
        (lambda job: Job.objects.filter(pk=job.pk).delete(), "QuerySet.delete()", "discard(ids)"),
        (lambda job: Job.objects.all().delete(), "QuerySet.delete()", "discard(ids)"),
        (lambda job: Job.objects.bulk_create([Job(task="t")]), "bulk_create()", "enqueue_many"),
        (lambda job: Job.objects.bulk_update([job], ["queue"]), "bulk_update()", "edit("),
        (lambda job: Job.objects.create(task="t"), "QuerySet.create()", "enqueue()"),
        (lambda job: Job.objects.get_or_create(task="t"), "get_or_create()", "idempotency_key"),
        (lambda job: Job.objects.update_or_create(pk=job.pk), "update_or_create()", "edit("),
        (lambda job: DeadJob.objects.filter(pk=job.pk).update(queue="x"), "QuerySet.update()", "edit("),
    ],
)
def test_orm_writes_refuse_and_name_the_operation_to_use(write, operation, instead):
    job = JobFactory(dead=True)
    before = row_text(job.pk)
    with pytest.raises(DirectWriteRefused) as info:
        write(job)
    assert operation in str(info.value) and instead in str(info.value)
    assert row_text(job.pk) == before


def test_a_job_loaded_before_a_claim_cannot_put_it_back_in_line():
    """The reproduced bug: an instance read while ready, saved after a worker claimed the job."""
    job = JobFactory()
    stale = Job.objects.get(pk=job.pk)
    (claimed,) = Job.objects.claim(None, "w1")
    with pytest.raises(DirectWriteRefused):
        stale.save()
    assert Job.objects.get(pk=job.pk).status == "running"
    assert Job.objects.get(pk=job.pk).claim_token == claimed.token


def test_reads_still_work():
    jobs = JobFactory.create_batch(3)
    assert Job.objects.count() == 3
    assert list(Job.objects.order_by("pk").values_list("pk", flat=True)) == [j.pk for j in jobs]
    jobs[0].refresh_from_db()
    assert Job.objects.filter(status="ready").exists()
