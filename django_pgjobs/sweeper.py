"""One sweep pass: recover abandoned leases, then apply retention.

Used by ``manage.py sweepjobs`` and by every worker's periodic sweep, so both do exactly the same
thing. Nothing here writes a job row itself: the state changes are :meth:`JobManager.sweep` and
:meth:`JobManager.prune` (the manager owns the state machine); this module decides how many
batches to run and reports what happened.

Why batches: a pass must never hold many row locks or build one huge transaction, whatever the
backlog (after an outage thousands of leases can lapse at once; after retention is first enabled
millions of rows can be due for deletion). Each batch is its own short transaction of at most
``BATCH_SIZE`` rows; a pass stops after ``max_batches`` and the next pass carries on.

Why a lock for leases only: the lease sweep takes a transaction-level advisory lock per batch so
one process does the work at a time (others return at once instead of queueing on the same rows).
The UPDATE itself is safe without it (``FOR UPDATE SKIP LOCKED`` and a re-checked ``WHERE``), so
the lock is an efficiency measure, never a correctness one. When another sweeper holds it, this
pass leaves retention to that sweeper too.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

from django.utils import timezone

from . import fleet
from .conf import get_settings
from .models import Job
from .store import Store

logger = logging.getLogger("django_pgjobs")


@dataclass
class SweepReport:
    """What one pass did (or, with ``dry_run``, would do)."""

    dry_run: bool = False
    #: Another process held the sweep lock, so this pass left leases and retention to it.
    locked_out: bool = False
    to_ready: list[int] = field(default_factory=list)
    to_dead: list[int] = field(default_factory=list)
    #: Counts for a dry run (the ids lists stay empty: nothing was touched).
    would_ready: int = 0
    would_dead: int = 0
    would_cancelled: int = 0
    #: Asked to stop while their worker was gone: cancelled, not run again.
    to_cancelled: list[int] = field(default_factory=list)
    pruned_done: int = 0
    pruned_dead: int = 0
    #: True when a batch limit stopped the pass with work left (the next pass continues).
    more: bool = False
    retention_done: float | None = None
    retention_dead: float | None = None
    #: False when the pass was asked to skip retention (``--no-prune``).
    pruning: bool = True
    #: Workers registry rows of processes gone for a while, deleted (see fleet.prune).
    gone_workers: list[str] = field(default_factory=list)

    @property
    def ready(self) -> int:
        return self.would_ready if self.dry_run else len(self.to_ready)

    @property
    def dead(self) -> int:
        return self.would_dead if self.dry_run else len(self.to_dead)

    def summary(self) -> str:
        """One line with the counts per outcome (what ``sweepjobs`` prints)."""
        back, dead, pruned = (
            ("would go back to ready", "would go dead", "would be pruned")
            if self.dry_run
            else ("back to ready", "dead", "pruned")
        )
        line = f"{'dry run: ' if self.dry_run else ''}expired leases: {self.ready} {back}, {self.dead} {dead}"
        cancelled = self.would_cancelled if self.dry_run else len(self.to_cancelled)
        if cancelled:
            line += f", {cancelled} {'would be ' if self.dry_run else ''}cancelled (asked to stop)"
        if self.pruning:
            line += (
                f"; retention: {self.pruned_done} done {pruned} "
                f"({_retention('done', self.retention_done)}), {self.pruned_dead} dead {pruned} "
                f"({_retention('dead', self.retention_dead)})"
            )
        else:
            line += "; retention skipped"
        if self.gone_workers:
            line += f"; {len(self.gone_workers)} gone worker(s) removed from the registry"
        if self.locked_out:
            line += "; another sweeper holds the sweep lock, the rest of this pass is left to it"
        return line + ("; more left for the next pass" if self.more else "")


def _retention(status: str, seconds: float | None) -> str:
    if seconds is None:
        return f"{status} retention off"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"older than {seconds / size:g}{unit}"
    return f"older than {seconds:g}s"


def run_sweep(
    *,
    dry_run: bool = False,
    prune: bool = True,
    lock: bool = True,
    batch_size: int | None = None,
    max_batches: int = 100,
    store: Store | None = None,
) -> SweepReport:
    """Run one pass: expired leases back to ``ready`` (or ``dead`` when their attempts are spent),
    then delete ``done``/``dead`` jobs past their retention age.

    ``dry_run`` only counts (no locks, no writes). ``prune=False`` skips retention. ``lock=False``
    sweeps even while another process holds the sweep lock (correct, just duplicated effort).
    ``max_batches`` bounds each of the three steps, so a worker's periodic sweep never stalls its
    claim loop for long; anything left is picked up by the next pass. ``store``: the connection to
    write on (a worker's own); by default the calling thread's Django connection.
    """
    s = get_settings()
    manager = Job.objects.db_manager(s.DATABASE)
    writer = store or manager.store  # a worker passes its own bounded connection
    batch = batch_size or s.BATCH_SIZE
    report = SweepReport(
        dry_run=dry_run,
        retention_done=s.RETENTION_DONE_SECONDS if prune else None,
        retention_dead=s.RETENTION_DEAD_SECONDS if prune else None,
        pruning=prune,
    )

    if dry_run:
        report.would_ready, report.would_dead, report.would_cancelled = manager.sweep_preview()
        now = timezone.now()
        for status, age in _retention_steps(report):
            if age is not None:
                count = manager.filter(status=status, finished_at__lt=now - dt.timedelta(seconds=age)).count()
                setattr(report, _pruned_field(status), getattr(report, _pruned_field(status)) + count)
        return report

    for _ in range(max_batches):
        result = writer.sweep(limit=batch, lock=lock)
        if not result.ran:
            # Another sweeper holds the lock (maybe it took over mid-pass): it does the rest.
            report.locked_out = True
            return report
        report.to_ready.extend(result.to_ready)
        report.to_dead.extend(result.to_dead)
        report.to_cancelled.extend(result.to_cancelled)
        if len(result.to_ready) + len(result.to_dead) + len(result.to_cancelled) < batch:
            break
    else:
        report.more = True
    report.gone_workers = fleet.prune(writer)

    for status, age in _retention_steps(report):
        if age is None:
            continue
        total = 0
        for _ in range(max_batches):
            # Each prune is one autocommit statement: its own short transaction.
            deleted = writer.prune(status, age, limit=batch)
            total += deleted
            if deleted < batch:
                break
        else:
            report.more = True
        setattr(report, _pruned_field(status), getattr(report, _pruned_field(status)) + total)
    return report


def _retention_steps(report: SweepReport) -> tuple[tuple[str, float | None], ...]:
    """Done jobs by the done retention; dead and cancelled ones (work that did not succeed, kept
    for staff) by the dead retention."""
    return (
        ("done", report.retention_done),
        ("dead", report.retention_dead),
        ("cancelled", report.retention_dead),
    )


def _pruned_field(status: str) -> str:
    return "pruned_done" if status == "done" else "pruned_dead"


def log_report(report: SweepReport) -> None:
    """Log a pass that changed something: lease recoveries are warnings (a worker died or froze)."""
    if report.to_cancelled:
        logger.warning(
            "swept expired leases of jobs asked to stop: %d cancelled %s",
            len(report.to_cancelled),
            report.to_cancelled[:20],
        )
    if report.to_ready or report.to_dead:
        logger.warning(
            "swept expired leases: %d back to ready %s, %d dead %s",
            len(report.to_ready),
            report.to_ready[:20],
            len(report.to_dead),
            report.to_dead[:20],
        )
    if report.pruned_done or report.pruned_dead:
        logger.info("retention: pruned %d done and %d dead job(s)", report.pruned_done, report.pruned_dead)
