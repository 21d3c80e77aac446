"""``manage.py jobstats``: the queues, the live workers and the periodic handlers at a glance.

Text for a person (``--watch`` refreshes it like ``top``), ``--json`` for scripts. The figures are
:func:`django_pgjobs.stats.snapshot`'s (read that module for what is counted and why the final
states are windowed unless ``--exact``). The JSON object is stable; see :func:`report`.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, InterfaceError, connections

from django_pgjobs.management.database import database_alias
from django_pgjobs.models import Status, WorkerProcess
from django_pgjobs.periodic import overview
from django_pgjobs.stats import Snapshot, snapshot

#: ANSI: cursor home, clear screen (what ``top`` and ``watch`` do).
CLEAR = "\x1b[H\x1b[2J"
#: Fields of a periodic handler's row (:class:`django_pgjobs.periodic.PeriodicRow`) that are shown.
PERIODIC_FIELDS = ("name", "schedule", "next_run", "last_run", "last_status")


def periodic_overview(using: str) -> list[dict[str, Any]]:
    """The periodic handlers' rows (:func:`django_pgjobs.periodic.overview`) as JSON values; an
    empty list when there are no schedules."""
    return [{key: _plain(getattr(row, key)) for key in PERIODIC_FIELDS} for row in overview(using)]


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def worker_dict(w: WorkerProcess) -> dict[str, Any]:
    return {
        "name": w.name,
        "worker_id": w.worker_id,
        "host": w.host,
        "pid": w.pid,
        "queues": list(w.queues or []),
        "queue_limits": dict(w.queue_limits or {}),
        "concurrency": w.concurrency,
        "in_flight": w.in_flight,
        "version": w.version,
        "started_at": w.started_at.isoformat(),
        "heartbeat_at": w.heartbeat_at.isoformat(),
        "expires_at": w.expires_at.isoformat(),
    }


def report(snap: Snapshot, periodic: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``--json`` object. Keys are only ever added, never renamed:

    * ``generated_at``: the database's time the figures were read at (ISO 8601);
    * ``exact``: whether the final states' counts cover the whole table (``--exact``) or only the
      last ``final_window_seconds`` of each queue;
    * ``queues``: one object per queue (:meth:`QueueStats.as_dict`), by name;
    * ``workers``: the live workers, by worker id;
    * ``periodic``: the periodic handlers' rows (name, schedule, next_run, last_run, last_status),
      a list (empty without schedules).
    """
    return {
        "generated_at": snap.generated_at.isoformat(),
        "exact": snap.exact,
        "queues": [q.as_dict() for q in snap.queues],
        "workers": [worker_dict(w) for w in snap.workers],
        "periodic": periodic,
    }


def duration(seconds: float | None) -> str:
    """``95`` -> ``1m35s``: short enough for a table column."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """Columns sized to their widest cell; the first left-aligned, the others right-aligned."""
    cells = [[str(c) for c in headers], *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return "  ".join(
            (c.ljust(w) if i == 0 else c.rjust(w)) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    return [line(cells[0]), line(["-" * w for w in widths]), *(line(r) for r in cells[1:])]


def render_text(snap: Snapshot, periodic: list[dict[str, Any]]) -> str:
    when = snap.generated_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    scope = "whole table" if snap.exact else "finished in the last hour"
    out = [f"Queues at {when} (done/dead/cancelled: {scope}; failed = dead)"]
    if snap.queues:
        out += table(
            [
                "queue",
                *(s.value for s in Status),
                "oldest due",
                "done 1m",
                "failed 1m",
                "done 1h",
                "failed 1h",
                "workers",
                "paused",
            ],
            (
                [
                    q.queue,
                    *(q.counts[s.value] for s in Status),
                    duration(q.oldest_due_wait_seconds),
                    q.done_last_minute,
                    q.failed_last_minute,
                    q.done_last_hour,
                    q.failed_last_hour,
                    q.live_workers,
                    "PAUSED" if q.paused else "-",
                ]
                for q in snap.queues
            ),
        )
    else:
        out.append("  (no queues: no jobs, no paused queue, no live worker)")
    busy = sum(w.in_flight for w in snap.workers)
    slots = sum(w.concurrency for w in snap.workers)
    out += ["", f"Workers: {len(snap.workers)} live, {busy} of {slots} slots in flight"]
    if snap.workers:
        out += table(
            ["name", "host", "pid", "queues", "concurrency", "in flight", "last beat", "up"],
            (
                [
                    w.name,
                    w.host,
                    w.pid,
                    ",".join(w.queues or []) or "(all)",
                    w.concurrency,
                    w.in_flight,
                    duration((snap.generated_at - w.heartbeat_at).total_seconds()) + " ago",
                    duration((snap.generated_at - w.started_at).total_seconds()),
                ]
                for w in snap.workers
            ),
        )
    out += ["", f"Periodic handlers: {len(periodic)}"]
    if periodic:
        out += table(
            ["name", "schedule", "next run", "last run", "last status"],
            ([r[k] if r[k] is not None else "-" for k in PERIODIC_FIELDS] for r in periodic),
        )
    return "\n".join(out) + "\n"


class Command(BaseCommand):
    help = (
        "Show each queue's jobs by state, the oldest due job's wait, jobs done and failed in the last "
        "minute and hour, live workers and paused queues; the live workers; the periodic handlers."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="One JSON object (see the README).")
        parser.add_argument(
            "--watch",
            nargs="?",
            type=float,
            const=2.0,
            default=None,
            metavar="SECONDS",
            help="Refresh every SECONDS (default 2) until Ctrl-C; with --json, one object per line.",
        )
        parser.add_argument(
            "--exact",
            action="store_true",
            help="Count done/dead/cancelled over the whole table (reads every row: about 0.3 s per "
            "million jobs) instead of the last hour.",
        )
        parser.add_argument("--database", default=None, help="Database alias (default: PGJOBS DATABASE).")

    def handle(self, *args: Any, **options: Any) -> None:
        using = database_alias(options["database"])
        interval = options["watch"]
        if interval is not None and not interval > 0:
            raise CommandError("--watch SECONDS must be > 0")

        def once() -> str:
            snap = snapshot(using, exact=options["exact"])
            periodic = periodic_overview(using)
            if options["json"]:
                return json.dumps(report(snap, periodic), indent=None if interval else 2) + "\n"
            return render_text(snap, periodic)

        if interval is None:
            self.stdout.write(once(), ending="")
            return
        down_since: str | None = None
        try:
            while True:
                try:
                    text = once()
                    down_since = None
                except (DatabaseError, InterfaceError) as exc:
                    # A watch is what you leave open during an incident: it rides out a restart
                    # or a failover and picks up again, like the workers do.
                    connections[using].close()
                    down_since = down_since or time.strftime("%H:%M:%S")
                    problem = f"database unavailable since {down_since}: {str(exc).strip()[:300]}"
                    self.stderr.write(f"{problem}; retrying every {interval:g}s")
                    text = "" if options["json"] else problem + "\n"
                if text:
                    self.stdout.write(text if options["json"] else CLEAR + text, ending="")
                self.stdout.flush()
                time.sleep(interval)
        except KeyboardInterrupt:
            # Ctrl-C is how a watch ends: not an error.
            self.stdout.write("")
