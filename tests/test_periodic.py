"""Periodic schedules: tick arithmetic (cron across DST, every), validation, and the ticker's
one-job-per-tick insert against the real database."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import override_settings

from django_pgjobs import job
from django_pgjobs.checks import check_periodic
from django_pgjobs.models import Job
from django_pgjobs.periodic import InvalidSchedule, Schedule, Ticker, overview, schedules
from django_pgjobs.registry import unregister

UTC = dt.UTC


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).astimezone(UTC)


def test_every_ticks_on_multiples_of_the_period_since_the_epoch():
    s = Schedule.build("t", every=30)
    now = at("2026-12-01T10:00:47+00:00")
    assert s.latest_tick(now) == at("2026-12-01T10:00:30+00:00")
    assert s.next_tick(now) == at("2026-12-01T10:01:00+00:00")
    assert s.latest_tick(at("2026-12-01T10:01:00+00:00")) == at("2026-12-01T10:01:00+00:00")
    assert Schedule.build("t", every=dt.timedelta(minutes=5)).every == 300
    assert s.describe() == "every 30s" and Schedule.build("t", every=3600).describe() == "every 1h"


def test_cron_in_a_time_zone_across_the_spring_dst_jump():
    # Europe/Paris, 2026-03-29: 02:00 local does not exist (01:59 CET -> 03:00 CEST).
    s = Schedule.build("t", cron="30 2 * * *", timezone="Europe/Paris")
    before = at("2026-03-29T00:00:00+00:00")  # 01:00 CET
    tick = s.next_tick(before)
    # Debian cron semantics: a skipped time runs once, at the jump.
    assert tick == at("2026-03-29T03:00:00+02:00")
    assert s.latest_tick(tick) == tick
    assert s.next_tick(tick) == at("2026-03-30T02:30:00+02:00")


def test_cron_across_the_autumn_dst_fold_runs_the_repeated_hour_once():
    # 2026-10-25: 02:00-03:00 local happens twice (CEST then CET).
    s = Schedule.build("t", cron="30 2 * * *", timezone="Europe/Paris")
    first = s.next_tick(at("2026-10-24T23:00:00+00:00"))
    assert first == at("2026-10-25T02:30:00+02:00")
    assert s.next_tick(first) == at("2026-10-26T02:30:00+01:00")  # not again at 02:30 CET
    every_half_hour = Schedule.build("t", cron="*/30 * * * *", timezone="Europe/Paris")
    ticks, now = [], at("2026-10-24T23:45:00+00:00")
    for _ in range(6):
        now = every_half_hour.next_tick(now)
        ticks.append(now)
    assert ticks == sorted(ticks) and len(set(ticks)) == 6  # strictly increasing in UTC
    assert every_half_hour.latest_tick(ticks[-1]) == ticks[-1]


def test_cron_latest_tick_at_and_between_ticks():
    s = Schedule.build("t", cron="0 0 * * *")
    assert s.latest_tick(at("2026-01-01T00:00:00+00:00")) == at("2026-01-01T00:00:00+00:00")
    assert s.latest_tick(at("2026-01-01T13:00:00+00:00")) == at("2026-01-01T00:00:00+00:00")
    assert s.key(at("2026-01-01T00:00:00+00:00")) == "pgjobs:periodic:t:2026-01-01T00:00:00+00:00"
    assert s.describe() == "cron '0 0 * * *'"


#: Daylight-saving changes, as UTC instants: spring gaps and autumn repeats, north and south, a
#: 30-minute shift (Lord Howe).
DST_CHANGES = [
    ("Europe/London", "2025-03-30T01:00:00+00:00"),
    ("Europe/London", "2025-10-26T01:00:00+00:00"),
    ("Europe/Paris", "2025-03-30T01:00:00+00:00"),
    ("Europe/Paris", "2025-10-26T01:00:00+00:00"),
    ("America/New_York", "2025-03-09T07:00:00+00:00"),
    ("America/New_York", "2025-11-02T06:00:00+00:00"),
    ("Australia/Sydney", "2025-04-05T16:00:00+00:00"),
    ("Australia/Sydney", "2025-10-04T16:00:00+00:00"),
    ("Australia/Lord_Howe", "2025-04-05T15:00:00+00:00"),
    ("Australia/Lord_Howe", "2025-10-04T15:30:00+00:00"),
]
CRONS = ["30 1 * * *", "30 2 * * *", "15,45 1-3 * * *", "*/20 * * * *", "0 3 * * *"]


def forward_ticks(schedule: Schedule, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    """Every tick in (start, end], by next_tick() alone: the order the ticker enqueues them in."""
    ticks, tick = [], schedule.next_tick(start)
    while tick <= end:
        ticks.append(tick)
        tick = schedule.next_tick(tick)
    return ticks


def check_latest_against_forward(schedule: Schedule, change: dt.datetime) -> int:
    start, end = change - dt.timedelta(days=2), change + dt.timedelta(hours=5)
    ticks = forward_ticks(schedule, start, end)
    assert ticks == sorted(set(ticks))
    moments = [change + dt.timedelta(minutes=m) for m in range(-240, 300, 5)]
    for tick in ticks:
        if tick >= change - dt.timedelta(hours=4):
            moments += [tick - dt.timedelta(microseconds=1), tick, tick + dt.timedelta(minutes=1)]
    for now in (m for m in moments if m <= end):
        expected = max(t for t in ticks if t <= now)
        got = schedule.latest_tick(now)
        assert got == expected, f"{schedule.describe()} at {now.isoformat()}: {got} != {expected}"
        assert schedule.next_tick(got) > now
    return len(moments)


@pytest.mark.parametrize(("zone", "change"), DST_CHANGES)
def test_cron_latest_tick_agrees_with_forward_iteration_around_dst_changes(zone, change):
    for cron in CRONS:
        check_latest_against_forward(Schedule.build("t", cron=cron, timezone=zone), at(change))


@pytest.mark.parametrize("every", [60, 900, 3600, 5400, 86400])
def test_every_latest_tick_agrees_with_forward_iteration_around_dst_changes(every):
    for _zone, change in DST_CHANGES[:2]:
        check_latest_against_forward(Schedule.build("t", every=every), at(change))


@pytest.mark.parametrize(
    ("zone", "cron", "now", "latest"),
    [
        # The repeated hour: 01:30 BST (00:30 UTC) ran; it is now 01:10 GMT, wall time before 01:30.
        ("Europe/London", "30 1 * * *", "2025-10-26T01:10:00+00:00", "2025-10-26T00:30:00+00:00"),
        ("Europe/Paris", "30 2 * * *", "2025-10-26T01:00:00+00:00", "2025-10-26T00:30:00+00:00"),
        ("Europe/Paris", "30 2 * * *", "2025-10-26T01:29:59+00:00", "2025-10-26T00:30:00+00:00"),
    ],
)
def test_latest_tick_in_the_repeated_autumn_hour_is_today(zone, cron, now, latest):
    assert Schedule.build("t", cron=cron, timezone=zone).latest_tick(at(now)) == at(latest)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "61 * * * *"}, "bad cron expression '61 * * * *'"),
        ({"cron": "not cron"}, "bad cron expression"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"every": 0.5}, "every must be at least 1 second"),
        ({"every": True}, "every must be at least 1 second"),
        ({"cron": "* * * * *", "every": 5}, "give cron or every, not both"),
        ({"every": 5, "missed": "all"}, "missed must be 'latest' or 'skip'"),
        ({"every": 5, "timezone": "UTC"}, "timezone applies to cron schedules only"),
    ],
)
def test_a_bad_schedule_fails_at_import_naming_the_handler(options, message):
    with pytest.raises(InvalidSchedule, match=r"periodic job 'tests\.bad_schedule'") as raised:

        @job(name="tests.bad_schedule", **options)
        def bad() -> None: ...

    assert message in str(raised.value)
    unregister("tests.bad_schedule")


def test_a_periodic_handler_must_be_callable_without_arguments():
    with pytest.raises(InvalidSchedule, match=r"'tests\.needs_args' is enqueued with no arguments"):

        @job(name="tests.needs_args", every=60)
        def needs_args(x: int) -> None: ...

    unregister("tests.needs_args")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"task": "tests.nope", "every": 5}, "no handler registered as 'tests.nope'"),
        ({"task": "tests.tick", "every": 5, "color": "red"}, "unknown keys ['color']"),
        ({"task": "tests.tick", "every": 5, "args": [1]}, "too many positional arguments"),
        ("tests.tick", "must be a dict with a 'task' name"),
    ],
)
def test_bad_periodic_settings_are_a_system_check_error(entry, message):
    with override_settings(PGJOBS={"PERIODIC": [entry]}):
        (error,) = check_periodic()
    assert error.id == "django_pgjobs.E021" and message in error.msg


def test_settings_entries_join_the_decorated_handlers():
    with override_settings(
        PGJOBS={"PERIODIC": [{"task": "tests.tick", "cron": "*/5 * * * *", "name": "t5"}]}
    ):
        assert check_periodic() == []
        (mine,) = [s for s in schedules() if s.name == "t5"]
    assert (mine.task, mine.cron, mine.missed) == ("tests.tick", "*/5 * * * *", "latest")


@pytest.mark.django_db(transaction=True)
def test_tickers_of_several_workers_enqueue_one_job_per_tick():
    from django_pgjobs.models import Job as JobModel

    schedule = Schedule.build("tests.tick", every=3600, name="hourly")
    store = JobModel.objects.store
    tickers = [Ticker([schedule]) for _ in range(3)]
    created = [t.tick(store) for t in tickers]
    assert sorted(created) == [0, 0, 1]  # one insert won, two were no-ops
    (only,) = Job.objects.filter(task="tests.tick")
    now = tickers[0].db_now(store)
    assert only.run_at == schedule.latest_tick(now) and only.status == "ready"
    assert only.idempotency_key == schedule.key(only.run_at)
    # The next look (a second later) finds nothing new due.
    for t in tickers:
        t._checked_at = -1e9
    assert sum(t.tick(store) for t in tickers) == 0
    with override_settings(PGJOBS={"PERIODIC": [{"task": "tests.tick", "every": 3600, "name": "hourly"}]}):
        (row,) = [r for r in overview() if r.name == "hourly"]
    assert (row.last_job_id, row.last_status, row.schedule) == (only.id, "ready", "every 1h")
    assert row.next_run == schedule.next_tick(now)


@pytest.mark.django_db(transaction=True)
def test_skip_waits_for_the_next_tick():
    schedule = Schedule.build("tests.tick", every=3600, missed="skip", name="skipper")
    ticker = Ticker([schedule])
    assert ticker.tick(Job.objects.store) == 0
    assert not Job.objects.filter(task="tests.tick").exists()


@pytest.mark.django_db(transaction=True)
def test_a_worker_starting_in_the_repeated_hour_enqueues_todays_missed_tick():
    # Downtime over 01:30 BST (00:30 UTC); the worker starts at 01:10 GMT. It used to re-enqueue
    # yesterday's tick (a no-op) and wait for tomorrow's: today's run was lost.
    schedule = Schedule.build("tests.tick", cron="30 1 * * *", timezone="Europe/London", name="london")
    ticker = Ticker([schedule])
    now = at("2025-10-26T01:10:00+00:00")
    ticker.db_now = lambda store: now  # type: ignore[method-assign]  # the clock, not the database
    assert ticker.tick(Job.objects.store) == 1
    (only,) = Job.objects.filter(task="tests.tick")
    assert only.run_at == at("2025-10-26T00:30:00+00:00")
    assert only.idempotency_key == "pgjobs:periodic:london:2025-10-26T00:30:00+00:00"
    assert ticker._next["london"] == at("2025-10-27T01:30:00+00:00")
