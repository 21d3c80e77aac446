"""``manage.py demo``: enqueue a few hundred realistic jobs (some failing) and run them."""

from __future__ import annotations

import logging
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand
from django.db import connection, transaction
from django.db.models import Count, Q, Sum
from django.test.utils import override_settings
from django.utils import timezone

from django_pgjobs.embedded import ENGINE as EMBEDDED_ENGINE
from django_pgjobs.management.commands.runjobs import configure_logging
from django_pgjobs.models import Job
from django_pgjobs.tasks import FRAMEWORK, MISSING_MESSAGE
from django_pgjobs.worker import Worker, WorkerOptions
from shop import tasks as shop_tasks
from shop.jobs import deliver_webhook, process_document, send_receipt
from shop.models import Document, Invoice, WebhookDelivery

#: How often the progress line is redrawn on a terminal, and printed anew into a pipe or a log.
PROGRESS_TTY_SECONDS = 0.3
PROGRESS_LOG_SECONDS = 5.0


class Command(BaseCommand):
    help = "Enqueue receipts, webhooks and document jobs, then run them with a burst worker."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--webhooks", type=int, default=200)
        parser.add_argument("--documents", type=int, default=100)
        parser.add_argument("--receipts", type=int, default=10)
        parser.add_argument("--concurrency", type=int, default=8)

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(0)
        logging.getLogger("django_pgjobs").setLevel(logging.ERROR)  # the progress line says it all
        rng = random.Random(1842)
        started_at = timezone.now()
        self.stdout.write(self.style.MIGRATE_HEADING("Enqueueing jobs"))

        with transaction.atomic():  # jobs commit together with the rows they are about
            invoices = [
                Invoice.objects.create(
                    customer_email=f"customer{i}@example.com", total_cents=rng.randint(500, 90000)
                )
                for i in range(options["receipts"])
            ]
            for invoice in invoices:
                send_receipt.using(idempotency_key=f"invoice:{invoice.pk}:receipt").enqueue(invoice.pk)
            # The same transaction, through Django's tasks API (shop/tasks.py): a django.tasks
            # Task enqueued on django-pgjobs commits (or rolls back) with the invoices too.
            report = self._enqueue_report([invoice.pk for invoice in invoices])
        self.stdout.write(f"  {len(invoices)} receipts          queue=mail\n")
        if report is not None:
            self.stdout.write(
                f"  1 sales report       queue=reports (a django.tasks @task, result id {report.id})"
            )

        run = started_at.strftime("%H%M%S%f")
        events = [{"order": n, "amount": rng.randint(100, 10000)} for n in range(1, options["webhooks"] + 1)]
        for data in events:
            deliver_webhook.using(idempotency_key=f"demo-{run}:order:{data['order']}:paid").enqueue(
                "order.paid", data
            )
        # Enqueueing the same side effect again (a retried HTTP request, say) finds the first job.
        again = deliver_webhook.using(idempotency_key=f"demo-{run}:order:1:paid").enqueue(
            "order.paid", events[0]
        )
        self.stdout.write(
            f"  {options['webhooks']} webhooks          queue=webhooks (every 7th answers 503 once)\n"
            f"  duplicate enqueue of order 1 -> job #{again.id}, created={again.created}"
        )

        documents = Document.objects.bulk_create(
            Document(name=f"scan-{i:03}.pdf", pages=rng.choice([3, 8, 10, 12, 25, 35, 60]))
            for i in range(options["documents"])
        )
        for document in documents:
            process_document.enqueue(document.pk)
        self.stdout.write(
            f"  {len(documents)} documents         queue=documents (some busy once, >40 pages always fail)"
        )

        self.stdout.write(
            self.style.MIGRATE_HEADING(f"Running: runjobs --burst --concurrency {options['concurrency']}")
        )
        ours = Q(created_at__gte=started_at)
        stop = threading.Event()
        tty = self.stdout.isatty()
        progress = threading.Thread(target=self._progress, args=(ours, stop, tty), daemon=True)
        clock = time.monotonic()
        with override_settings(EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend"):
            progress.start()
            self._drain(ours, options["concurrency"])
            stop.set()
            progress.join()
        elapsed = time.monotonic() - clock
        # The last progress line is counted after the workers finished, so it agrees with the table.
        self.stdout.write(("\r" if tty else "") + self._progress_line(ours))
        self._report(ours, elapsed)
        self._report_task(report)
        self._hints()

    def _enqueue_report(self, invoice_ids: list[int]) -> Any:
        """The django.tasks task, when a tasks framework is installed (Django >= 6.0, or the
        django-tasks backport on 5.2); None, and a note at the end, otherwise."""
        sales_report = getattr(shop_tasks, "sales_report", None)
        return None if sales_report is None else sales_report.enqueue(invoice_ids)

    def _report_task(self, report: Any) -> None:
        import django

        self.stdout.write(self.style.MIGRATE_HEADING("django.tasks"))
        if report is None:
            self.stdout.write(
                f"  skipped the django.tasks task: Django {django.get_version()} has no django.tasks "
                f"and the django-tasks backport is not installed ({MISSING_MESSAGE})"
            )
            return
        report.refresh()  # TaskResult.refresh(): reads the job row back through the backend
        if report.status == "SUCCESSFUL":
            outcome = f"return value {report.return_value}"
        else:
            outcome = "errors: " + ", ".join(e.exception_class_path for e in report.errors)
        where = "django.tasks" if FRAMEWORK == "django.tasks" else "the django-tasks backport (django_tasks)"
        self.stdout.write(
            f"  {report.task.module_path} via {where} on Django {django.get_version()}:\n"
            f"  result {report.id}: {report.status} after {report.attempts} attempt(s), {outcome}"
        )

    def _drain(self, ours: Q, concurrency: int) -> None:
        """Burst workers until nothing of ours is waiting, waiting out short retry backoffs."""
        while True:
            Worker(WorkerOptions(burst=True, concurrency=concurrency)).run()
            upcoming = (
                Job.objects.filter(ours, status__in=["scheduled", "ready"])
                .order_by("run_at")
                .values_list("run_at", flat=True)
                .first()
            )
            if upcoming is None:
                return
            time.sleep(max(0.0, min(5.0, (upcoming - timezone.now()).total_seconds())))

    def _progress_line(self, ours: Q) -> str:
        counts = dict(Job.objects.filter(ours).values_list("status").annotate(n=Count("id")))
        statuses = ("scheduled", "ready", "running", "done", "dead")
        return "  " + "  ".join(f"{s}: {counts.get(s, 0):4}" for s in statuses)

    def _progress(self, ours: Q, stop: threading.Event, tty: bool) -> None:
        """On a terminal, one line redrawn in place; into a pipe or a CI log, a line every few
        seconds (carriage returns there are one endless line, or hundreds)."""
        try:
            while not stop.wait(PROGRESS_TTY_SECONDS if tty else PROGRESS_LOG_SECONDS):
                line = self._progress_line(ours)
                self.stdout.write("\r" + line if tty else line, ending="" if tty else "\n")
                self.stdout.flush()
        finally:
            connection.close()

    def _report(self, ours: Q, elapsed: float) -> None:
        rows = (
            Job.objects.filter(ours)
            .values("task")
            .annotate(
                jobs=Count("id"),
                done=Count("id", filter=Q(status="done")),
                dead=Count("id", filter=Q(status="dead")),
                pending=Count("id", filter=Q(status__in=["scheduled", "ready", "running"])),
                attempts=Sum("attempts"),
            )
            .order_by("task")
        )
        self.stdout.write(self.style.MIGRATE_HEADING(f"Outcomes ({elapsed:.1f}s)"))
        header = f"  {'task':<30} {'jobs':>5} {'done':>5} {'dead':>5} {'left':>5} {'attempts':>9}"
        self.stdout.write(header)
        self.stdout.write("  " + "-" * (len(header) - 2))
        for r in rows:
            self.stdout.write(
                f"  {r['task']:<30} {r['jobs']:>5} {r['done']:>5} {r['dead']:>5} "
                f"{r['pending']:>5} {r['attempts']:>9}"
            )
        duplicates = WebhookDelivery.objects.filter(deliveries__gt=1).count()
        self.stdout.write(f"\n  webhook deliveries seen by the partner twice or more: {duplicates}")
        dead = Job.objects.filter(ours, status="dead").first()
        if dead:
            self.stdout.write(f"  example dead letter: #{dead.id} {dead.task}: {dead.last_error}")

    def _hints(self) -> None:
        manage = f"{_interpreter()} example_project/manage.py"
        self.stdout.write(
            f"\nNext: `{manage} createsuperuser`, then `{manage} runserver` and open "
            "http://127.0.0.1:8000/admin/ (Background jobs > Dead letters)."
        )
        if connection.settings_dict["ENGINE"] == EMBEDDED_ENGINE:
            self.stdout.write(
                f"The embedded PostgreSQL keeps running for runserver and runjobs; "
                f"`{manage} pgembedded stop` stops it."
            )


def _interpreter() -> str:
    """The Python that ran the demo (the quickstart's .venv), as the user can type it from the
    repository root: a bare ``python`` may not have Django."""
    root = Path(__file__).resolve().parents[4]
    exe = Path(os.path.normpath(sys.executable))
    try:
        return str(exe.relative_to(root))
    except ValueError:
        return str(exe)
