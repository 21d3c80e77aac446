"""Database settings helpers: a real server from ``DATABASE_URL``, else the embedded one.

(Placeholder: the embedded engine is built in its own issue; for now only URLs are supported.)
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit


def database_from_url(url: str) -> dict[str, Any]:
    """Turn ``postgres://user:pass@host:port/name?opt=v`` into a Django DATABASES entry."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql", "pgsql"}:
        raise ValueError(f"DATABASE_URL must be a postgres:// URL, got scheme {parts.scheme!r}")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")) or "postgres",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": unquote(parts.hostname or ""),
        "PORT": str(parts.port or ""),
        "OPTIONS": dict(parse_qsl(parts.query)),
    }


def database_settings(env_var: str = "DATABASE_URL", **_: Any) -> dict[str, Any]:
    """The ``DATABASES['default']`` entry: the server named by ``$DATABASE_URL``."""
    url = os.environ.get(env_var)
    if not url:
        raise RuntimeError(f"set {env_var} (e.g. postgres://postgres@127.0.0.1:5432/postgres)")
    return database_from_url(url)
