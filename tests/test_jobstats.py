"""``manage.py jobstats`` (JSON, text, the periodic handlers, --watch) and ``manage.py jobqueues``."""

from __future__ import annotations

import datetime as dt
import io
import json
import signal
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from django_pgjobs.management.commands import jobstats
from django_pgjobs.models import QueuePause, Status
from tests.factories import JobFactory
from tests.processes import ROOT, wait_for, worker_env
from tests.test_stats import ago, worker

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def stats_json(*args: str) -> dict:
    return json.loads(run("jobstats", "--json", *args))


@pytest.fixture
def fleet() -> None:
    JobFactory(queue="mail", run_at=ago(90))
    JobFactory(queue="mail", delayed=True)
    JobFactory(queue="mail", running=True)
    JobFactory(queue="mail", done=True, finished_at=ago(10))
    JobFactory(queue="mail", done=True, finished_at=ago(600))
    JobFactory(queue="mail", dead=True, finished_at=ago(20))
    JobFactory(queue="mail", done=True, finished_at=ago(3 * 3600))
    JobFactory(queue="reports", cancelled=True, finished_at=ago(60 * 5))
    worker("all", [], in_flight=2)
    worker("mailer", ["mail"])
    worker("gone", ["mail"], live=False)


def test_json_has_every_field(fleet):
    from django_pgjobs import queue_control

    queue_control.pause("reports", by="tester")
    data = stats_json()
    assert set(data) == {"generated_at", "exact", "queues", "workers", "periodic"}
    assert data["exact"] is False
    assert data["periodic"] == []  # no schedules in the test settings
    generated = dt.datetime.fromisoformat(data["generated_at"])
    assert abs((generated - timezone.now()).total_seconds()) < 60

    queues = {q["queue"]: q for q in data["queues"]}
    assert list(queues) == ["mail", "reports"]
    mail = queues["mail"]
    assert set(mail) == {
        "queue",
        "counts",
        "final_window_seconds",
        "oldest_due_wait_seconds",
        "done_last_minute",
        "failed_last_minute",
        "done_last_hour",
        "failed_last_hour",
        "live_workers",
        "paused",
    }
    assert mail["counts"] == {"scheduled": 1, "ready": 1, "running": 1, "done": 2, "dead": 1, "cancelled": 0}
    assert mail["final_window_seconds"] == 3600.0
    assert 85 < mail["oldest_due_wait_seconds"] < 150
    assert (mail["done_last_minute"], mail["failed_last_minute"]) == (1, 1)
    assert (mail["done_last_hour"], mail["failed_last_hour"]) == (2, 1)
    assert (mail["live_workers"], mail["paused"]) == (2, False)
    reports = queues["reports"]
    assert reports["counts"]["cancelled"] == 1
    assert reports["oldest_due_wait_seconds"] is None
    assert (reports["live_workers"], reports["paused"]) == (1, True)

    workers = {w["worker_id"]: w for w in data["workers"]}
    assert list(workers) == ["all", "mailer"]  # the expired one is not live
    assert set(workers["all"]) == {
        "name",
        "worker_id",
        "host",
        "pid",
        "queues",
        "queue_limits",
        "concurrency",
        "in_flight",
        "version",
        "started_at",
        "heartbeat_at",
        "expires_at",
    }
    assert workers["all"]["name"] == "all#1"
    assert (workers["all"]["queues"], workers["all"]["in_flight"]) == ([], 2)
    assert workers["mailer"]["queues"] == ["mail"]
    dt.datetime.fromisoformat(workers["mailer"]["heartbeat_at"])


def test_exact_counts_the_whole_table(fleet):
    data = stats_json("--exact")
    assert data["exact"] is True
    mail = next(q for q in data["queues"] if q["queue"] == "mail")
    assert mail["final_window_seconds"] is None
    assert mail["counts"]["done"] == 3


def test_text_output(fleet):
    from django_pgjobs import queue_control

    queue_control.pause("reports")
    text = run("jobstats")
    lines = text.splitlines()
    assert lines[0].startswith("Queues at ")
    header = lines[1].split()
    assert header[:7] == ["queue", *(s.value for s in Status)]
    mail = next(line.split() for line in lines if line.startswith("mail "))
    # queue, 6 states, oldest due, done 1m, failed 1m, done 1h, failed 1h, workers, paused
    assert mail[:7] == ["mail", "1", "1", "1", "2", "1", "0"]
    assert mail[7].startswith("1m")  # the ready job has waited about 90 s
    assert mail[8:] == ["1", "1", "2", "1", "2", "-"]
    reports = next(line.split() for line in lines if line.startswith("reports "))
    assert reports[-1] == "PAUSED"
    assert "Workers: 2 live, 2 of 8 slots in flight" in text
    assert "all#1" in text and "mailer#1" in text and "gone#1" not in text
    assert lines[-1] == "Periodic handlers: 0"


def test_no_queues_says_so():
    assert "(no queues" in run("jobstats")


PERIODIC = [
    {"task": "tests.tick", "cron": "0 3 * * *", "timezone": "Europe/Paris", "name": "nightly-report"},
    {"task": "tests.tick", "every": 300, "name": "cleanup"},
]


@override_settings(PGJOBS={"PERIODIC": PERIODIC})
def test_periodic_handlers_are_listed_with_their_last_run():
    from django_pgjobs.periodic import schedules

    nightly, _cleanup = schedules()
    now = timezone.now()
    # The last tick of the nightly report ran (enqueued as the ticker does, by its key).
    tick = nightly.latest_tick(now)
    ran = JobFactory(task="tests.tick", done=True, run_at=tick, idempotency_key=nightly.key(tick))
    data = stats_json()
    rows = {r["name"]: r for r in data["periodic"]}
    assert list(rows) == ["nightly-report", "cleanup"]
    assert rows["nightly-report"] == {
        "name": "nightly-report",
        "schedule": "cron '0 3 * * *' (Europe/Paris)",
        "next_run": nightly.next_tick(dt.datetime.fromisoformat(data["generated_at"])).isoformat(),
        "last_run": ran.run_at.isoformat(),
        "last_status": "done",
    }
    assert (rows["cleanup"]["schedule"], rows["cleanup"]["last_run"], rows["cleanup"]["last_status"]) == (
        "every 5min",
        None,
        None,
    )
    assert dt.datetime.fromisoformat(rows["cleanup"]["next_run"]) > now
    text = run("jobstats")
    assert "Periodic handlers: 2" in text
    assert "nightly-report" in text and "every 5min" in text and "done" in text


#: ``manage.py jobstats --watch 0.2`` in a child process (run in the repository root).
WATCH = (
    # A shell that starts a suite in the background (``cmd &``) leaves SIGINT ignored, and Python
    # then installs no KeyboardInterrupt: give the child the Ctrl-C a terminal would.
    "import signal\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "from django.core.management import execute_from_command_line\n"
    "execute_from_command_line(['manage.py', 'jobstats', '--watch', '0.2'])\n"
)


def test_watch_refreshes_until_ctrl_c_and_exits_0(tmp_path):
    log = tmp_path / "watch.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-c", WATCH],
            cwd=ROOT,
            env=worker_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(
            lambda: log.read_text().count("Queues at") >= 2 or proc.poll() is not None, 60, "two refreshes"
        )
        assert proc.poll() is None, log.read_text()
        assert jobstats.CLEAR in log.read_text()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0, log.read_text()
        assert "Traceback" not in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_watch_rides_out_a_database_outage(tmp_path):
    """Left open during an incident, the watch says the database is away and resumes after."""
    from tests.proxy import database_proxy, proxied_env

    log = tmp_path / "watch.log"
    with database_proxy() as proxy, log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-c", WATCH],
            cwd=ROOT,
            env=proxied_env(proxy),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            refreshes = lambda: log.read_text().count("Queues at")  # noqa: E731
            wait_for(lambda: refreshes() >= 1 or proc.poll() is not None, 60, "a first refresh")
            proxy.down()
            wait_for(
                lambda: "database unavailable since" in log.read_text() or proc.poll() is not None,
                30,
                "the outage to be reported",
            )
            before = refreshes()
            proxy.up()
            wait_for(lambda: refreshes() > before or proc.poll() is not None, 30, "a refresh after")
            assert proc.poll() is None, log.read_text()
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 0, log.read_text()
            assert "Traceback" not in log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_watch_rejects_a_non_positive_interval():
    with pytest.raises(CommandError, match="--watch"):
        run("jobstats", "--watch", "0")


# -- jobqueues ----------------------------------------------------------------------------------------


def paused_rows() -> dict[str, str]:
    return dict(QueuePause.objects.values_list("queue", "paused_by"))


def test_pause_resume_and_what_they_say():
    out = run("jobqueues", "pause", "mail", "reports", "--by", "alice")
    assert out.splitlines() == ["paused mail", "paused reports"]
    assert paused_rows() == {"mail": "alice", "reports": "alice"}

    out = run("jobqueues", "pause", "mail")
    assert out.splitlines() == ["mail was already paused"]
    assert paused_rows()["mail"] == "alice"  # unchanged

    out = run("jobqueues", "resume", "mail", "nowhere")
    assert out.splitlines() == ["resumed mail", "nowhere was not paused"]
    assert paused_rows() == {"reports": "alice"}


def test_pause_records_who_by_default():
    run("jobqueues", "pause", "mail")
    assert "(manage.py jobqueues)" in paused_rows()["mail"]


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("", "must be a non-empty string"),
        ("   ", "must be a non-empty string"),
        ("x" * 101, "is 101 characters long; the limit is 100"),
        ("a\x00b", "may not contain NUL"),
        ("pgjobs:cancel", "is reserved"),
    ],
)
def test_a_bad_name_changes_nothing(bad, why):
    """The names enqueue refuses (``validation.queue_name``): no job can be in such a queue."""
    run("jobqueues", "pause", "reports")
    with pytest.raises(CommandError, match=why):
        run("jobqueues", "pause", "mail", bad)
    with pytest.raises(CommandError, match="nothing changed"):
        run("jobqueues", "resume", "reports", bad)
    assert paused_rows() == {"reports": paused_rows()["reports"]}


def test_an_action_is_required():
    with pytest.raises(CommandError):
        run("jobqueues")


def test_list_text_and_json(fleet):
    run("jobqueues", "pause", "reports", "idle", "--by", "bob")
    text = run("jobqueues", "list")
    assert "Paused queues: 2" in text
    idle = next(line.split() for line in text.splitlines() if line.startswith("idle "))
    assert idle[-1] == "bob"
    mail = next(line.split() for line in text.splitlines() if line.startswith("mail "))
    assert mail == ["mail", "-", "1", "1", "1", "2"]

    data = json.loads(run("jobqueues", "list", "--json"))
    assert [(p["queue"], p["paused_by"]) for p in data["paused"]] == [("idle", "bob"), ("reports", "bob")]
    dt.datetime.fromisoformat(data["paused"][0]["paused_at"])
    assert data["queues"] == [
        {"queue": "idle", "paused": True, "scheduled": 0, "ready": 0, "running": 0, "live_workers": 1},
        {"queue": "mail", "paused": False, "scheduled": 1, "ready": 1, "running": 1, "live_workers": 2},
        {"queue": "reports", "paused": True, "scheduled": 0, "ready": 0, "running": 0, "live_workers": 1},
    ]


def test_list_with_nothing_paused():
    assert "Paused queues: none" in run("jobqueues", "list")
    assert json.loads(run("jobqueues", "list", "--json")) == {"paused": [], "queues": []}
