"""The Job table: the seed's ``jobs`` schema plus what the worker, sweeper and admin need.

The model is a *read* view of a row. Every write goes through :mod:`django_pgjobs.store` (via
``Job.objects``): ``save()``, ``delete()`` and the queryset's bulk writers refuse, because a row
loaded before a claim and saved after it would put a running job back in line with no owner (a
second worker then runs it concurrently). See ``docs/architecture.md`` for the states, the fence
and the indexes; each index below names the query it serves.
"""

from __future__ import annotations

from typing import Any, NoReturn

from django.db import models
from django.db.models import Q

from .exceptions import DirectWriteRefused
from .managers import JobManager


class Status(models.TextChoices):
    #: Not due yet (delayed enqueue, or waiting out a retry backoff); promoted to ready when due.
    SCHEDULED = "scheduled", "Scheduled"
    #: Due: a worker may claim it.
    READY = "ready", "Ready"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    #: Failed for good: attempts spent, backoff gave up, or its lease lapsed on the last attempt.
    DEAD = "dead", "Dead"
    #: Stopped by an operator or by code before it ran to an outcome; never retried by itself.
    CANCELLED = "cancelled", "Cancelled"


#: States a job never leaves by itself.
FINAL_STATUSES = (Status.DONE, Status.DEAD, Status.CANCELLED)
#: States a job is waiting in (not yet claimed).
WAITING_STATUSES = (Status.SCHEDULED, Status.READY)


class StatementTimestamp(models.Func):
    """``statement_timestamp()``: the time the current statement began. ``now()`` is the start of
    the *transaction*, so a job enqueued 3 s into a long transaction would look 3 s older than it
    is (and a ``delay=5`` would be due 2 s after commit)."""

    template = "statement_timestamp()"
    output_field = models.DateTimeField()


class Job(models.Model):
    id = models.BigAutoField(primary_key=True)
    task = models.CharField(max_length=200, help_text="Registered handler name.")
    queue = models.CharField(max_length=100, default="default", db_default="default")
    payload = models.JSONField(default=dict, help_text="Handler arguments: {'args': [...], 'kwargs': {...}}.")
    status = models.CharField(
        max_length=10, choices=Status.choices, default=Status.READY, db_default=Status.READY
    )
    priority = models.SmallIntegerField(
        default=0, db_default=0, help_text="Higher runs first (as in django.tasks)."
    )
    attempts = models.IntegerField(
        default=0, db_default=0, help_text="Claims so far; every claim is a new attempt number."
    )
    max_attempts = models.IntegerField(default=5, db_default=5)
    run_at = models.DateTimeField(db_default=StatementTimestamp())
    #: The fence: a number from ``pgjobs_job_claim_token_seq`` written by each claim, never reused.
    claim_token = models.BigIntegerField(null=True, blank=True, editable=False)
    locked_at = models.DateTimeField(null=True, blank=True)
    locked_by = models.CharField(max_length=200, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    last_error = models.TextField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    history = models.JSONField(
        default=list,
        db_default=models.Value([], models.JSONField()),
        help_text="One entry per attempt: worker, times, outcome, error and traceback.",
    )
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    #: A running job asked to stop (``Job.objects.cancel``): when, and by whom. Its worker learns
    #: it at the next heartbeat (or at once by notification) and the handler sees it in its context.
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_by = models.CharField(max_length=200, null=True, blank=True)
    #: Times the handler raised ``Snooze``: a snooze spends no attempt, so this bounds them.
    snoozes = models.IntegerField(default=0, db_default=0)
    created_at = models.DateTimeField(db_default=StatementTimestamp())
    updated_at = models.DateTimeField(db_default=StatementTimestamp())

    objects = JobManager()

    class Meta:
        db_table = "pgjobs_job"
        ordering = ["-id"]
        permissions = [("operate_job", "Can retry, cancel and run jobs now")]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in Status]), name="pgjobs_job_status_valid"
            ),
            models.CheckConstraint(condition=Q(max_attempts__gte=1), name="pgjobs_job_max_attempts_positive"),
            models.CheckConstraint(condition=Q(attempts__gte=0), name="pgjobs_job_attempts_nonnegative"),
            models.CheckConstraint(
                condition=~Q(queue="") & ~Q(task=""), name="pgjobs_job_queue_task_nonempty"
            ),
            models.CheckConstraint(
                condition=~Q(status="running")
                | (
                    Q(locked_by__isnull=False)
                    & Q(lease_expires_at__isnull=False)
                    & Q(claim_token__isnull=False)
                ),
                name="pgjobs_job_running_is_claimed",
            ),
            # Invariant 5. Partial: most jobs have no key, and a NULL entry would still be written
            # on every state change of every key-less job (a plain UNIQUE stores NULLs).
            # Serves: enqueue's ON CONFLICT, the duplicate's read-back, the admin's key search.
            models.UniqueConstraint(
                fields=["idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="pgjobs_job_idempotency_key_uniq",
            ),
        ]
        # A non-HOT update adds an entry to every index whose predicate the new row version
        # matches, so each index is partial on the few states its queries ask about, and none
        # holds lease_expires_at: a heartbeat stays a HOT update (no index write at all).
        indexes = [
            # Serves: claims from named queues (store.CLAIM_QUEUE, CLAIM_QUEUES); the admin's
            # ready-job queue filter; the loose scan listing queues that have ready jobs.
            models.Index(
                fields=["queue", "-priority", "run_at", "id"],
                name="pgjobs_job_claim_idx",
                condition=Q(status="ready"),
            ),
            # Serves: claims from every queue (store.CLAIM_ANY), one ordered scan across queues.
            models.Index(
                fields=["-priority", "run_at", "id"],
                name="pgjobs_job_claim_any_idx",
                condition=Q(status="ready"),
            ),
            # Serves: promotion of due scheduled jobs (store.PROMOTE) and "when is the next one
            # due" (store.NEXT_DUE). Keeps the 300,000 jobs due tomorrow out of the claim path.
            models.Index(fields=["run_at"], name="pgjobs_job_scheduled_idx", condition=Q(status="scheduled")),
            # Serves: the lease sweep (store.SWEEP scans the running jobs, bounded by the fleet's
            # concurrency), releasing a worker's unknown claims (store.RELEASE_UNKNOWN), the
            # admin's running/lease-expired filters. Keyed by worker, not by lease: a heartbeat
            # changes only lease_expires_at and must not touch any index.
            models.Index(fields=["locked_by"], name="pgjobs_job_running_idx", condition=Q(status="running")),
            # Serves: retention (store.PRUNE), the dead-letter list (newest failure first), the
            # overview's last-hour outcomes and throughput chart.
            models.Index(
                fields=["status", "finished_at"],
                name="pgjobs_job_finished_idx",
                condition=Q(status__in=["done", "dead", "cancelled"]),
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.task} [{self.status}]"

    # -- one writer: the store --------------------------------------------------------------------
    def save(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise DirectWriteRefused(
            "Job.save()",
            "enqueue with a @job handler's .enqueue() or Job.objects.enqueue(); change a waiting or "
            "dead job with Job.objects.edit(), retry(), cancel() or run_now()",
        )

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise DirectWriteRefused("Job.delete()", "use Job.objects.discard([job.id])")

    @property
    def args(self) -> list:
        return list((self.payload or {}).get("args", []))

    @property
    def kwargs(self) -> dict:
        return dict((self.payload or {}).get("kwargs", {}))


class DeadJob(Job):
    """Proxy so the admin can give dead letters their own entry."""

    class Meta:
        proxy = True
        verbose_name = "dead letter"
        verbose_name_plural = "dead letters"
        ordering = ["-finished_at", "-id"]


class WorkerProcess(models.Model):
    """One row per live ``runjobs`` process (each supervisor child too), written by its heartbeat
    thread: registered at start, its ``expires_at`` pushed forward every beat (a HOT update: no
    index holds it), deleted on a clean exit. A process that stops beating is not live once
    ``expires_at`` passes (a few heartbeats) and the sweep deletes its row later. Written by
    :mod:`django_pgjobs.fleet`; read by the admin's Workers page, ``jobstats`` and the metrics."""

    #: The worker's name: its ``--worker-id`` and, after ``#``, this process incarnation (the
    #: value its claims write into ``Job.locked_by``).
    name = models.CharField(max_length=200, primary_key=True)
    worker_id = models.CharField(max_length=200)
    host = models.CharField(max_length=255)
    pid = models.IntegerField()
    #: Queues it claims from (empty: every queue) and per-queue limits (``-q mail:4``).
    queues = models.JSONField(default=list)
    queue_limits = models.JSONField(default=dict)
    concurrency = models.IntegerField()
    version = models.CharField(max_length=50)
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    #: Live until then; each beat sets it a few heartbeat intervals ahead.
    expires_at = models.DateTimeField()
    #: Jobs held at the last beat (claimed ahead, running, or finished with the outcome unwritten).
    in_flight = models.IntegerField(default=0)

    class Meta:
        db_table = "pgjobs_worker"
        ordering = ["worker_id", "name"]
        verbose_name = "worker"

    def __str__(self) -> str:
        return self.name

    def claims_from(self, queue: str) -> bool:
        return not self.queues or queue in self.queues


class QueuePause(models.Model):
    """A paused queue: workers claim nothing from it (running jobs finish) until the row is deleted.
    Written by :mod:`django_pgjobs.queue_control` (admin buttons, ``manage.py jobqueues``); every
    worker reads the table about once a second."""

    queue = models.CharField(max_length=100, primary_key=True)
    paused_at = models.DateTimeField()
    paused_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        db_table = "pgjobs_queue_pause"
        ordering = ["queue"]
        verbose_name = "paused queue"

    def __str__(self) -> str:
        return self.queue
