"""``manage.py sweepjobs``: recover abandoned leases and apply retention (see ``--help``).

Workers already sweep now and then; this command is for deployments that want recovery and
retention on a schedule of their own (cron, a sidecar with ``--loop``), or an operator's one-off
``--dry-run`` look at what would happen.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, InterfaceError, connections

from django_pgjobs.conf import get_settings
from django_pgjobs.management.commands.runjobs import configure_logging
from django_pgjobs.management.database import database_alias
from django_pgjobs.sweeper import run_sweep

logger = logging.getLogger("django_pgjobs")


class Command(BaseCommand):
    help = (
        "Return running jobs whose lease expired to ready (or dead when their attempts are spent) "
        "and prune done/dead jobs past their retention age. One pass unless --loop."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", action="store_true", help="Keep sweeping every --interval seconds.")
        parser.add_argument(
            "--interval",
            type=float,
            default=None,
            help="Seconds between passes with --loop (default: PGJOBS SWEEP_INTERVAL_SECONDS).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Report what a pass would do; change nothing."
        )
        parser.add_argument("--no-prune", action="store_true", help="Recover leases only; no retention.")
        parser.add_argument(
            "--batch-size",
            type=int,
            default=None,
            help="Rows per statement (default: PGJOBS BATCH_SIZE).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(options["verbosity"])
        alias = database_alias()  # PGJOBS["DATABASE"] exists (also without the system checks)
        s = get_settings()
        interval = s.SWEEP_INTERVAL_SECONDS if options["interval"] is None else options["interval"]
        if not interval > 0:
            raise CommandError("--interval must be > 0")
        if options["batch_size"] is not None and options["batch_size"] < 1:
            raise CommandError("--batch-size must be >= 1")

        def one_pass() -> None:
            report = run_sweep(
                dry_run=options["dry_run"],
                prune=not options["no_prune"],
                batch_size=options["batch_size"],
                # A one-off pass drains everything (still in bounded batches); a loop takes its
                # time, batch by batch, pass by pass.
                max_batches=100 if options["loop"] else 1_000_000,
            )
            self.stdout.write(report.summary())
            self.stdout.flush()

        if not options["loop"]:
            one_pass()
            return

        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        self.stdout.write(f"sweeping every {interval:g}s (SIGTERM or Ctrl-C to stop)")
        self.stdout.flush()
        failures = 0
        while not stop.is_set():
            started = time.monotonic()
            try:
                one_pass()
                failures = 0
            except (DatabaseError, InterfaceError) as exc:
                # A restart or a cut connection: drop it; the next pass reconnects.
                failures += 1
                logger.warning("database error during sweep (%s); retrying", str(exc).strip()[:200])
                connections[alias].close()
                stop.wait(min(interval, 0.1 * 2 ** min(failures, 6)))
                continue
            stop.wait(max(0.0, interval - (time.monotonic() - started)))
        self.stdout.write("sweeper stopped")
