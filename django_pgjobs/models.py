"""The Job table: the seed's ``jobs`` schema plus what the worker, sweeper and admin need.

Every state change goes through :class:`~django_pgjobs.managers.JobManager` (backed by
:mod:`django_pgjobs.sql`); the model itself is a read-side view of a row.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from .managers import JobManager


class Status(models.TextChoices):
    READY = "ready", "Ready"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    DEAD = "dead", "Dead"


class Job(models.Model):
    id = models.BigAutoField(primary_key=True)
    task = models.CharField(max_length=200, help_text="Registered handler name.")
    queue = models.CharField(max_length=100, default="default", db_default="default")
    payload = models.JSONField(default=dict, help_text="Handler arguments: {'args': [...], 'kwargs': {...}}.")
    status = models.CharField(
        max_length=10, choices=Status.choices, default=Status.READY, db_default=Status.READY
    )
    priority = models.SmallIntegerField(
        default=0, db_default=0, help_text="Lower runs first (like Unix nice)."
    )
    attempts = models.IntegerField(default=0, db_default=0)
    max_attempts = models.IntegerField(default=5, db_default=5)
    run_at = models.DateTimeField(db_default=Now())
    locked_at = models.DateTimeField(null=True, blank=True)
    locked_by = models.CharField(max_length=200, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True, unique=True)
    last_error = models.TextField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    history = models.JSONField(
        default=list,
        db_default=models.Value([], models.JSONField()),
        help_text="One entry per attempt: worker, times, outcome, error and traceback.",
    )
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    objects = JobManager()

    class Meta:
        db_table = "pgjobs_job"
        ordering = ["-id"]
        permissions = [("operate_job", "Can retry, cancel and run jobs now")]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["ready", "running", "done", "dead"]),
                name="pgjobs_job_status_valid",
            ),
            models.CheckConstraint(condition=Q(max_attempts__gte=1), name="pgjobs_job_max_attempts_positive"),
            models.CheckConstraint(condition=Q(attempts__gte=0), name="pgjobs_job_attempts_nonnegative"),
            models.CheckConstraint(
                condition=~Q(queue="") & ~Q(task=""), name="pgjobs_job_queue_task_nonempty"
            ),
            models.CheckConstraint(
                condition=~Q(status="running")
                | (Q(locked_by__isnull=False) & Q(lease_expires_at__isnull=False)),
                name="pgjobs_job_running_is_leased",
            ),
        ]
        indexes = [
            # The claim index: only claimable rows, in the claim query's exact ORDER BY.
            models.Index(
                fields=["queue", "priority", "run_at", "id"],
                name="pgjobs_job_claim_idx",
                condition=Q(status="ready"),
            ),
            # The same for a worker of every queue (the default): one ordered scan across queues.
            models.Index(
                fields=["priority", "run_at", "id"],
                name="pgjobs_job_claim_any_idx",
                condition=Q(status="ready"),
            ),
            # The lease sweep only ever looks at running rows, by lease expiry.
            models.Index(
                fields=["lease_expires_at"],
                name="pgjobs_job_lease_idx",
                condition=Q(status="running"),
            ),
            # Admin filters and retention pruning: status (+ finished_at) without scanning the table.
            models.Index(fields=["status", "finished_at"], name="pgjobs_job_status_finished_idx"),
            models.Index(fields=["task", "status"], name="pgjobs_job_task_status_idx"),
            # The admin's queue filter lists distinct queues; without this it scans the table.
            models.Index(fields=["queue", "status"], name="pgjobs_job_queue_status_idx"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.task} [{self.status}]"

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
