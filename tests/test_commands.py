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
