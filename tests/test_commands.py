"""Every management command of the app refuses an unknown database alias with a CommandError that
names it and the configured ones (it used to be ConnectionDoesNotExist's traceback)."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

pytestmark = pytest.mark.django_db

MESSAGE = r"no database 'nope' in DATABASES \(--database\); configured: 'default'"


@pytest.mark.parametrize(
    "args",
    [
        ["jobstats"],
        ["jobstats", "--json"],
        ["jobstats", "--watch", "1"],
        ["jobqueues", "list"],
        ["jobqueues", "pause", "mail"],
        ["jobqueues", "resume", "mail"],
        ["pgembedded", "status"],
    ],
)
def test_an_unknown_database_option_is_a_command_error(args):
    with pytest.raises(CommandError, match=MESSAGE):
        call_command(*args[:1], "--database", "nope", *args[1:], stdout=io.StringIO())


@pytest.mark.parametrize("args", [["runjobs", "--burst"], ["sweepjobs"], ["jobstats"], ["jobqueues", "list"]])
def test_an_unknown_pgjobs_database_is_a_command_error_without_the_system_checks(args):
    # call_command() skips the system checks (django_pgjobs.E002), as --skip-checks does.
    expected = r"no database 'nope' in DATABASES \(PGJOBS\['DATABASE'\]\); configured: 'default'"
    with override_settings(PGJOBS={"DATABASE": "nope"}), pytest.raises(CommandError, match=expected):
        call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())


def test_the_default_alias_still_works():
    out = io.StringIO()
    call_command("jobstats", "--database", "default", stdout=out)
    assert "(no queues" in out.getvalue()


@pytest.mark.parametrize("queue", ["pgjobs:cancel", "pgjobs:queues", "pgjobs:queues:2"])
def test_runjobs_refuses_a_queue_in_the_reserved_namespace(queue):
    # --max-jobs 0 is refused too, after the queues: code that accepted the name fails on that
    # instead of starting a worker (whose exit would end the test process).
    with pytest.raises(CommandError, match=r"queue name 'pgjobs:(cancel|queues)' is reserved"):
        call_command("runjobs", "-q", "mail", "-q", queue, "--burst", "--max-jobs", "0", stdout=io.StringIO())
