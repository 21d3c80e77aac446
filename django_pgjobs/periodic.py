"""Periodic jobs: ``@job(cron="*/5 * * * *", timezone="Europe/Paris")``, ``@job(every=30)``, and
``PGJOBS["PERIODIC"]`` entries for handlers defined elsewhere.

Exactly one job per scheduled time, however many workers run, with no leader and no extra process:
every worker's claim loop enqueues each due tick itself, with an idempotency key made of the
schedule's name and the tick's time (``pgjobs:periodic:<name>:<UTC time>``), so the unique index
makes all inserts but the first a no-op. Ticks are computed from the database's clock (each worker
measures its offset from ``statement_timestamp()``), not from the hosts' clocks, which may disagree.

After downtime (no worker was running), the default ``missed="latest"`` enqueues the latest missed
tick once when a worker starts (no storm of backfills); ``missed="skip"`` enqueues only ticks that
fall while a worker runs. A schedule is read when a worker starts: a changed or removed schedule
takes effect when the workers restart (jobs already enqueued stay).

Cron expressions are parsed by cronsim (one small, typed module with no dependencies; it follows
Debian cron on daylight-saving changes: a time skipped in spring runs once at the jump, a time
repeated in autumn runs once). Ticks are compared in UTC, so the repeated hour cannot confuse the
order of ticks.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .exceptions import IdempotencyConflict, InvalidJob, PgJobsError

if TYPE_CHECKING:
    from .registry import JobHandler
    from .store import Store

logger = logging.getLogger("django_pgjobs")

UTC = dt.UTC
KEY_PREFIX = "pgjobs:periodic:"
MISSED_CHOICES = ("latest", "skip")
#: The claim loop looks for due ticks at most this often.
CHECK_SECONDS = 1.0
#: How often a worker re-measures its clock's offset from the database's.
CLOCK_SECONDS = 60.0


class InvalidSchedule(PgJobsError, ValueError):
    """A periodic schedule that cannot work (bad cron expression, unknown time zone, ...); raised
    at import (``@job``) or by the system check (``PGJOBS["PERIODIC"]``), naming the handler."""


@dataclass(frozen=True)
class Schedule:
    name: str
    task: str
    cron: str | None = None
    timezone: str = "UTC"
    every: float | None = None
    missed: str = "latest"
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        task: str,
        *,
        cron: str | None = None,
        every: float | dt.timedelta | None = None,
        timezone: str | None = None,
        missed: str = "latest",
        name: str | None = None,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Schedule:
        who = name or task
        if (cron is None) == (every is None):
            raise InvalidSchedule(f"periodic job {who!r}: give cron or every, not both or neither")
        if missed not in MISSED_CHOICES:
            raise InvalidSchedule(f"periodic job {who!r}: missed must be 'latest' or 'skip', not {missed!r}")
        seconds: float | None = None
        if every is not None:
            seconds = every.total_seconds() if isinstance(every, dt.timedelta) else every
            if (
                isinstance(seconds, bool)
                or not isinstance(seconds, int | float)
                or not math.isfinite(seconds)
                or seconds < 1
            ):
                raise InvalidSchedule(
                    f"periodic job {who!r}: every must be at least 1 second (a number or a timedelta), "
                    f"not {every!r}"
                )
            if timezone is not None:
                raise InvalidSchedule(f"periodic job {who!r}: timezone applies to cron schedules only")
        zone = timezone or "UTC"
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            raise InvalidSchedule(f"periodic job {who!r}: unknown time zone {zone!r}") from None
        if cron is not None:
            _check_cron(who, cron)
        return cls(
            name=who,
            task=task,
            cron=cron,
            timezone=zone,
            every=float(seconds) if seconds is not None else None,
            missed=missed,
            args=tuple(args),
            kwargs=dict(kwargs or {}),
        )

    def describe(self) -> str:
        if self.every is not None:
            return f"every {_seconds_text(self.every)}"
        return f"cron {self.cron!r}" + ("" if self.timezone == "UTC" else f" ({self.timezone})")

    # -- ticks (aware datetimes in, UTC datetimes out) ------------------------------------------------
    def latest_tick(self, now: dt.datetime) -> dt.datetime:
        """The latest scheduled time at or before ``now``."""
        if self.every is not None:
            epoch = math.floor(now.timestamp() / self.every) * self.every
            return dt.datetime.fromtimestamp(epoch, UTC)
        from cronsim import CronSim

        zone = ZoneInfo(self.timezone)
        # cronsim's reverse iteration starts strictly before its start: start a minute later and
        # skip what is after now.
        for tick in CronSim(self.cron or "", (now + dt.timedelta(minutes=1)).astimezone(zone), reverse=True):
            if tick.astimezone(UTC) <= now:
                latest = tick.astimezone(UTC)
                break
        else:  # pragma: no cover
            raise AssertionError("unreachable")
        # The reverse search walks wall-clock time: in the repeated autumn hour (01:10 GMT, after
        # 01:30 BST already ran) it goes back to yesterday's 01:30. Step forward through the ticks
        # next_tick() (the ticker's own order, in UTC) gives while they are still due.
        while (following := self.next_tick(latest)) <= now:
            latest = following
        return latest

    def next_tick(self, now: dt.datetime) -> dt.datetime:
        """The first scheduled time after ``now``."""
        if self.every is not None:
            epoch = (math.floor(now.timestamp() / self.every) + 1) * self.every
            return dt.datetime.fromtimestamp(epoch, UTC)
        from cronsim import CronSim

        for tick in CronSim(self.cron or "", now.astimezone(ZoneInfo(self.timezone))):
            if tick.astimezone(UTC) > now:  # compared in UTC: the repeated autumn hour
                return tick.astimezone(UTC)
        raise AssertionError("unreachable")  # pragma: no cover

    def key(self, tick: dt.datetime) -> str:
        """The idempotency key of this schedule's job for ``tick``."""
        return f"{KEY_PREFIX}{self.name}:{tick.astimezone(UTC).isoformat()}"


def _check_cron(who: str, expression: str) -> None:
    from cronsim import CronSim, CronSimError

    if not isinstance(expression, str) or not expression.strip():
        raise InvalidSchedule(f"periodic job {who!r}: cron must be a non-empty string, not {expression!r}")
    try:
        next(CronSim(expression, dt.datetime(2026, 1, 1, tzinfo=UTC)))
    except (CronSimError, StopIteration) as exc:
        raise InvalidSchedule(f"periodic job {who!r}: bad cron expression {expression!r}: {exc}") from None


def _seconds_text(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


# -- the schedules in force ----------------------------------------------------------------------
def schedules() -> list[Schedule]:
    """Every schedule: ``@job(cron=/every=)`` handlers, then ``PGJOBS["PERIODIC"]`` entries.
    Raises :class:`InvalidSchedule` for a bad entry (the system check reports it at startup)."""
    from .conf import get_settings
    from .registry import get_handler, registered

    found = [h.schedule for h in registered().values() if h.schedule is not None]
    for index, entry in enumerate(get_settings().PERIODIC):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("task"), str):
            raise InvalidSchedule(
                f"PGJOBS['PERIODIC'][{index}] must be a dict with a 'task' name, not {entry!r}"
            )
        options = dict(entry)
        task = options.pop("task")
        unknown = set(options) - {"cron", "every", "timezone", "missed", "name", "args", "kwargs"}
        if unknown:
            raise InvalidSchedule(f"PGJOBS['PERIODIC'][{index}] ({task}): unknown keys {sorted(unknown)}")
        try:
            handler = get_handler(task)
        except PgJobsError:
            raise InvalidSchedule(
                f"PGJOBS['PERIODIC'][{index}]: no handler registered as {task!r} (is its module imported?)"
            ) from None
        schedule = Schedule.build(task, **options)
        try:
            handler.payload_for(tuple(schedule.args), dict(schedule.kwargs))
        except InvalidJob as exc:
            raise InvalidSchedule(f"PGJOBS['PERIODIC'][{index}]: {exc}") from None
        found.append(schedule)
    names = [s.name for s in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidSchedule(f"periodic schedules named twice: {twice}; give one an explicit name")
    return found


# -- enqueueing ticks (the claim loop) ------------------------------------------------------------
class Ticker:
    """Owned by one worker's claim loop; enqueues each schedule's due ticks on its connection."""

    def __init__(self, schedules: list[Schedule]) -> None:
        self.schedules = schedules
        self._next: dict[str, dt.datetime] = {}
        self._offset: float | None = None  # database clock minus this host's, in seconds
        self._offset_at = -1e9
        self._checked_at = -1e9
        self.enqueued = 0

    def db_now(self, store: Store) -> dt.datetime:
        mono = time.monotonic()
        if self._offset is None or mono - self._offset_at > CLOCK_SECONDS:
            (row,) = store.run("SELECT extract(epoch FROM statement_timestamp())::float8", {})
            self._offset, self._offset_at = row[0] - time.time(), mono
        return dt.datetime.fromtimestamp(time.time() + self._offset, UTC)

    def tick(self, store: Store) -> int:
        """Enqueue what is due (at most once per CHECK_SECONDS); returns jobs created here."""
        if not self.schedules or time.monotonic() - self._checked_at < CHECK_SECONDS:
            return 0
        self._checked_at = time.monotonic()
        now = self.db_now(store)
        created = 0
        for schedule in self.schedules:
            due = self._next.get(schedule.name)
            if due is None:  # this worker's first look: the latest missed tick, or the next one
                latest = schedule.latest_tick(now)
                due = latest if schedule.missed == "latest" else schedule.next_tick(now)
            if due <= now:
                # Several ticks passed (a frozen worker): only the latest runs, as after downtime.
                created += self._enqueue(store, schedule, schedule.latest_tick(now))
                due = schedule.next_tick(now)
            self._next[schedule.name] = due
        self.enqueued += created
        return created

    def _enqueue(self, store: Store, schedule: Schedule, tick: dt.datetime) -> int:
        from .registry import get_handler
        from .validation import NewJob

        handler: JobHandler[Any, Any] = get_handler(schedule.task)
        new = NewJob(
            schedule.task,
            handler.payload_for(tuple(schedule.args), dict(schedule.kwargs)),
            queue=handler.queue,
            priority=handler.priority,
            max_attempts=handler.max_attempts,
            run_at=tick,
            idempotency_key=schedule.key(tick),
        )
        try:
            _, created = store.enqueue(new, checked=True)
        except IdempotencyConflict:
            logger.warning(
                "periodic job %s: the tick %s was already enqueued with other arguments (a schedule "
                "changed between deployments); kept the first",
                schedule.name,
                tick.isoformat(),
            )
            return 0
        if created:
            logger.info("periodic job %s: enqueued the tick of %s", schedule.name, tick.isoformat())
        return int(created)


# -- reading (admin, jobstats) -------------------------------------------------------------------
@dataclass(frozen=True)
class PeriodicRow:
    name: str
    task: str
    schedule: str
    next_run: dt.datetime
    last_run: dt.datetime | None
    last_status: str | None
    last_job_id: int | None


#: Ticks looked up for "last run" (by exact idempotency key: one index probe each).
LAST_TICKS = 3


def overview(using: str | None = None) -> list[PeriodicRow]:
    """Each schedule with its next tick and its latest enqueued run among the last few ticks."""
    from django.db import connections

    from .conf import get_settings
    from .models import Job

    alias = using or get_settings().DATABASE
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        now = cursor.fetchone()[0]
    rows = []
    found = schedules()
    keys: dict[str, Schedule] = {}
    for schedule in found:
        tick = schedule.latest_tick(now)
        for _ in range(LAST_TICKS):
            keys[schedule.key(tick)] = schedule
            tick = schedule.latest_tick(tick - dt.timedelta(microseconds=1))
    jobs = {
        j.idempotency_key: j
        for j in Job.objects.using(alias)
        .filter(idempotency_key__in=list(keys))
        .only("id", "status", "run_at", "idempotency_key")
    }
    for schedule in found:
        mine = [j for k, j in jobs.items() if keys[k] is schedule]
        last = max(mine, key=lambda j: j.run_at, default=None)
        rows.append(
            PeriodicRow(
                name=schedule.name,
                task=schedule.task,
                schedule=schedule.describe(),
                next_run=schedule.next_tick(now),
                last_run=last.run_at if last else None,
                last_status=last.status if last else None,
                last_job_id=last.id if last else None,
            )
        )
    return rows
