"""System checks (django_pgjobs.checks): settings that would lose or double-run jobs."""

from __future__ import annotations

import datetime as dt
import sys
import types

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_pgjobs.checks import check_pgjobs
from django_pgjobs.conf import get_settings
from tests import settings as test_settings

BASE_APPS = [app for app in test_settings.INSTALLED_APPS if app.startswith("django.")]


def ids(messages) -> list[str]:
    return [m.id for m in messages]


def test_the_test_settings_pass():
    assert check_pgjobs() == []


@pytest.mark.parametrize(
    "pgjobs",
    [
        {"LEASE_SECONDS": 30, "HEARTBEAT_SECONDS": 20},
        {"LEASE_SECONDS": 30, "HEARTBEAT_SECONDS": 10.01},
        {"LEASE_SECONDS": 60, "HEARTBEAT_SECONDS": 0},
        {"LEASE_SECONDS": 60, "HEARTBEAT_SECONDS": -1},
    ],
)
def test_heartbeat_too_close_to_the_lease_is_an_error(pgjobs):
    with override_settings(PGJOBS=pgjobs):
        messages = check_pgjobs()
    assert ids(messages) == ["django_pgjobs.E004"]
    assert messages[0].is_serious()
    assert "HEARTBEAT_SECONDS" in messages[0].msg


def test_heartbeat_of_a_third_of_the_lease_is_fine():
    with override_settings(PGJOBS={"LEASE_SECONDS": 30, "HEARTBEAT_SECONDS": 10}):
        assert check_pgjobs() == []


def test_unknown_setting_is_an_error():
    with override_settings(PGJOBS={"LEASE_SECONDZ": 30}):
        messages = check_pgjobs()
    assert ids(messages) == ["django_pgjobs.E001"]
    assert "LEASE_SECONDZ" in messages[0].msg


def test_database_alias_must_exist():
    with override_settings(PGJOBS={"DATABASE": "nope"}):
        assert ids(check_pgjobs()) == ["django_pgjobs.E002"]


@pytest.mark.parametrize(
    "pgjobs, expected",
    [
        ({"POLL_INTERVAL_SECONDS": 0}, ["django_pgjobs.E005"]),
        ({"SWEEP_INTERVAL_SECONDS": -1}, ["django_pgjobs.E005"]),
        ({"DEFAULT_MAX_ATTEMPTS": 0}, ["django_pgjobs.E006"]),
        ({"BATCH_SIZE": 0}, ["django_pgjobs.E006"]),
        ({"HISTORY_LIMIT": 0}, ["django_pgjobs.E006"]),
        ({"TRACEBACK_LIMIT": -1}, ["django_pgjobs.E011"]),
        ({"RETENTION_DONE_SECONDS": -1}, ["django_pgjobs.E012"]),
        ({"RETENTION_DEAD_SECONDS": -0.5}, ["django_pgjobs.E012"]),
        (
            {"RETENTION_DONE_SECONDS": -3600, "RETENTION_DEAD_SECONDS": -1},
            ["django_pgjobs.E012", "django_pgjobs.E012"],
        ),
    ],
)
def test_other_bad_values(pgjobs, expected):
    with override_settings(PGJOBS=pgjobs):
        assert ids(check_pgjobs()) == expected


@pytest.mark.parametrize(
    "pgjobs",
    [
        {"TRACEBACK_LIMIT": 0},
        {"RETENTION_DONE_SECONDS": 0, "RETENTION_DEAD_SECONDS": 0},
        {"RETENTION_DONE_SECONDS": None, "RETENTION_DEAD_SECONDS": 86400},
    ],
)
def test_limits_at_the_edge_of_their_range_are_fine(pgjobs):
    with override_settings(PGJOBS=pgjobs):
        assert check_pgjobs() == []


def test_the_new_check_messages_name_the_setting_and_value():
    with override_settings(PGJOBS={"TRACEBACK_LIMIT": -5, "RETENTION_DEAD_SECONDS": -1}):
        messages = check_pgjobs()
    assert [m.msg for m in messages] == [
        "PGJOBS TRACEBACK_LIMIT (-5) must be >= 0",
        "PGJOBS RETENTION_DEAD_SECONDS (-1) must be >= 0 or None",
    ]
    assert all(m.is_serious() for m in messages)


@pytest.fixture
def fake_django_extensions(monkeypatch, tmp_path):
    """An importable stand-in for django_extensions (not installed here): the check only looks at
    the order of INSTALLED_APPS, but overriding INSTALLED_APPS imports every app listed."""
    module = types.ModuleType("django_extensions")
    module.__file__ = str(tmp_path / "__init__.py")
    monkeypatch.setitem(sys.modules, "django_extensions", module)


@pytest.mark.usefixtures("fake_django_extensions")
def test_django_extensions_listed_first_is_a_warning():
    with override_settings(INSTALLED_APPS=[*BASE_APPS, "django_extensions", "django_pgjobs"]):
        messages = check_pgjobs()
    assert ids(messages) == ["django_pgjobs.W001"]
    assert not messages[0].is_serious()
    assert "runjobs" in messages[0].msg


@pytest.mark.usefixtures("fake_django_extensions")
def test_django_extensions_listed_after_is_fine():
    with override_settings(INSTALLED_APPS=[*BASE_APPS, "django_pgjobs", "django_extensions"]):
        assert check_pgjobs() == []


def test_the_check_is_registered():
    from django.core import checks

    assert check_pgjobs in checks.registry.registry.get_checks()


@pytest.mark.parametrize(
    ("pgjobs", "message"),
    [
        (
            {"RETENTION_DONE_SECONDS": dt.timedelta(days=14)},
            "RETENTION_DONE_SECONDS must be int or float or None",
        ),
        ({"NOTIFY_CHANNEL": ""}, "NOTIFY_CHANNEL must be 1-63 bytes"),
        ({"NOTIFY_CHANNEL": "x" * 64}, "NOTIFY_CHANNEL must be 1-63 bytes"),
        ({"TRACEBACK_LIMIT": None}, "TRACEBACK_LIMIT must be int, not NoneType"),
        ({"BACKOFF_JITTER": 1.0}, "backoff jitter must be in"),
        ({"LISTEN": 1}, "LISTEN must be bool"),
        ({"LEASE_SECONDS": float("nan")}, "LEASE_SECONDS must be finite"),
    ],
)
def test_settings_of_the_wrong_kind_are_a_check_error_not_a_worker_crash(pgjobs, message):
    with override_settings(PGJOBS=pgjobs):
        errors = [m for m in check_pgjobs() if m.id == "django_pgjobs.E001"]
        assert len(errors) == 1 and message in errors[0].msg
        with pytest.raises(ImproperlyConfigured, match="invalid PGJOBS setting"):
            get_settings()


def test_jobs_on_another_alias_warn_that_atomic_needs_using():
    from django_pgjobs.checks import check_pgjobs

    with override_settings(PGJOBS={"DATABASE": "jobs"}):
        (warning,) = [m for m in check_pgjobs() if m.id == "django_pgjobs.W002"]
    assert "transaction.atomic(using='jobs')" in warning.hint
    assert not [m for m in check_pgjobs() if m.id == "django_pgjobs.W002"]


def test_an_old_psycopg_is_refused_by_the_system_check(monkeypatch):
    import psycopg

    from django_pgjobs.checks import check_pgjobs, psycopg_problem

    assert psycopg_problem() is None  # the installed one is new enough
    monkeypatch.setattr(psycopg, "__version__", "3.1.19")
    (error,) = [m for m in check_pgjobs() if m.id == "django_pgjobs.E007"]
    assert "psycopg >= 3.2" in error.msg and "3.1.19" in error.msg
