"""``manage.py runjobs``: run job handlers (see ``--help``)."""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_pgjobs.management.database import database_alias
from django_pgjobs.worker import Worker, WorkerOptions, default_worker_id, exit_process


def configure_logging(verbosity: int) -> None:
    """Give the django_pgjobs logger a console handler unless the project configured one."""
    logger = logging.getLogger("django_pgjobs")
    logger.setLevel({0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG))
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(process)d] %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False


class Command(BaseCommand):
    help = "Run background jobs: claim ready jobs, run their handlers, record the outcome."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            "-q",
            action="append",
            dest="queues",
            metavar="NAME[:LIMIT]",
            help="Queue to work on (repeatable), optionally with the most of its jobs this process runs at "
            "once (mail:4). Default: every queue.",
        )
        parser.add_argument("--concurrency", "-c", type=int, default=1, help="Jobs at once (threads).")
        parser.add_argument(
            "--processes", "-p", type=int, default=1, help="Worker processes under one supervisor."
        )
        parser.add_argument("--burst", action="store_true", help="Exit 0 when nothing is ready.")
        parser.add_argument("--max-jobs", type=int, default=None, help="Exit after this many jobs.")
        parser.add_argument("--worker-id", default=None, help="Default: hostname:pid.")
        parser.add_argument("--poll-interval", type=float, default=None, help="Seconds between polls.")
        parser.add_argument(
            "--no-listen",
            action="store_true",
            help="Poll only, no LISTEN/NOTIFY (for PgBouncer transaction pooling).",
        )
        parser.add_argument(
            "--no-periodic",
            action="store_true",
            help="Do not enqueue periodic jobs' ticks (other workers do; a --burst run never does).",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=float,
            default=30.0,
            help="On SIGTERM/SIGINT, seconds to let running jobs finish before releasing them.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(options["verbosity"])
        database_alias()  # PGJOBS["DATABASE"] exists (also without the system checks)
        if options["processes"] < 1:
            raise CommandError("--processes must be >= 1")
        base_id = options["worker_id"]

        def make(slot: int | None) -> Worker:
            worker_id = base_id
            if slot is not None:
                worker_id = f"{base_id}-{slot}" if base_id else default_worker_id()
            return Worker(
                WorkerOptions.from_queue_args(
                    options["queues"],
                    concurrency=options["concurrency"],
                    burst=options["burst"],
                    max_jobs=options["max_jobs"],
                    worker_id=worker_id,
                    poll_interval=options["poll_interval"],
                    listen=False if options["no_listen"] else None,
                    shutdown_timeout=options["shutdown_timeout"],
                    periodic=not options["no_periodic"],
                )
            )

        try:
            single = make(None)  # validates the options before anything is forked
        except ValueError as exc:
            raise CommandError(str(exc)) from None

        if options["processes"] == 1:
            code = single.run()
        else:
            from django_pgjobs.supervisor import Supervisor

            code = Supervisor(
                options["processes"],
                lambda slot: make(slot).run(),
                options["shutdown_timeout"],
                restart_clean_exits=not (options["burst"] or options["max_jobs"]),
            ).run()
        # A handler's leftover non-daemon thread must not keep a stopped worker alive.
        exit_process(code)
