"""``manage.py jobqueues pause NAME... | resume NAME... | list [--json]``.

Pausing and resuming go through :mod:`django_pgjobs.queue_control`, as the admin's buttons do, so
every worker of the fleet obeys within about a second. Several names change together or not at
all: one transaction, so a bad name in the list leaves every queue as it was.
"""

from __future__ import annotations

import getpass
import json
import socket
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from django_pgjobs import queue_control
from django_pgjobs.management.commands.jobstats import table
from django_pgjobs.management.database import database_alias
from django_pgjobs.stats import snapshot


def default_by() -> str:
    """Who paused it, for ``paused_by``: the operator's login on this host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (a container with a random uid)
        user = "unknown"
    return f"{user}@{socket.gethostname()} (manage.py jobqueues)"


class Command(BaseCommand):
    help = "Pause or resume queues (workers stop or restart claiming from them), or list them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--database", default=None, help="Database alias (default: PGJOBS DATABASE).")
        actions = parser.add_subparsers(dest="action", required=True, metavar="{pause,resume,list}")
        pause = actions.add_parser("pause", help="Stop workers claiming from these queues.")
        pause.add_argument("names", nargs="+", metavar="NAME")
        pause.add_argument("--by", default=None, help="Recorded as paused_by (default: user@host).")
        resume = actions.add_parser("resume", help="Let workers claim from these queues again.")
        resume.add_argument("names", nargs="+", metavar="NAME")
        listing = actions.add_parser("list", help="Paused queues, and every queue with jobs.")
        listing.add_argument("--json", action="store_true", help="One JSON object.")

    def handle(self, *args: Any, **options: Any) -> None:
        using = database_alias(options["database"])
        action = options["action"]
        if action == "list":
            self.list(using, as_json=options["json"])
            return
        names = list(dict.fromkeys(options["names"]))  # each once, in the order given
        by = options.get("by") or default_by()
        lines = []
        try:
            with transaction.atomic(using=using):
                for name in names:
                    if action == "pause":
                        changed = queue_control.pause(name, by=by, using=using)
                        lines.append(f"paused {name}" if changed else f"{name} was already paused")
                    else:
                        changed = queue_control.resume(name, using=using)
                        lines.append(f"resumed {name}" if changed else f"{name} was not paused")
        except ValueError as exc:
            raise CommandError(f"{exc}; nothing changed") from exc
        for line in lines:
            self.stdout.write(line)

    def list(self, using: str, *, as_json: bool) -> None:
        snap = snapshot(using)
        pauses = [
            {"queue": p.queue, "paused_at": p.paused_at.isoformat(), "paused_by": p.paused_by}
            for p in snap.pauses
        ]
        queues = [
            {
                "queue": q.queue,
                "paused": q.paused,
                "scheduled": q.counts["scheduled"],
                "ready": q.counts["ready"],
                "running": q.counts["running"],
                "live_workers": q.live_workers,
            }
            for q in snap.queues
        ]
        if as_json:
            self.stdout.write(json.dumps({"paused": pauses, "queues": queues}, indent=2))
            return
        if pauses:
            self.stdout.write(f"Paused queues: {len(pauses)}")
            for line in table(
                ["queue", "paused at", "paused by"],
                ([p["queue"], p["paused_at"], p["paused_by"] or "-"] for p in pauses),
            ):
                self.stdout.write(line)
        else:
            self.stdout.write("Paused queues: none")
        self.stdout.write("")
        self.stdout.write("Queues (with waiting or running jobs, recent outcomes, a pause or a worker):")
        if queues:
            for line in table(
                ["queue", "paused", "scheduled", "ready", "running", "workers"],
                (
                    [
                        q["queue"],
                        "PAUSED" if q["paused"] else "-",
                        q["scheduled"],
                        q["ready"],
                        q["running"],
                        q["live_workers"],
                    ]
                    for q in queues
                ),
            ):
                self.stdout.write(line)
        else:
            self.stdout.write("  (none)")
