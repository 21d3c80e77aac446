"""Which server a database entry means: its ``EMBEDDED`` options, the environment and defaults.

Development data lives in ``$PGJOBS_EMBEDDED_DATA_DIR`` or ``${XDG_DATA_HOME:-~/.local/share}/
django-pgjobs/<project>/pg<major>``: one directory per user (it is under their home) and per
project (``project.py``: two checkouts never share a server), and per major version (a data
directory only works with one). Reused across runs, the server left running so ``runserver`` and
``runjobs`` share it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .binaries import find_binaries
from .cluster import ServerConfig
from .defaults import (
    DEFAULT_PORT,
    DEFAULT_START_TIMEOUT,
    ENV_BIN_DIR,
    ENV_DATA_DIR,
    ENV_RUN_AS,
    ENV_SHARED_DIR,
)
from .project import ENV_SETTINGS, Project, current_project
from .users import ServerUser, server_user, shared_base_dir, user_can


def default_data_dir(major: int, user: ServerUser | None = None, project: Project | None = None) -> Path:
    """``${XDG_DATA_HOME:-~/.local/share}/django-pgjobs/<project key>/pg<major>``.

    As root, when the server user cannot reach that (``/root`` is 0700), the shared base
    (``/var/tmp/django-pgjobs-0``) instead, keyed by the project all the same: we must not loosen
    permissions of the home directory.
    """
    key = (project or current_project()).key
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "share"
    data_dir = base / "django-pgjobs" / key / f"pg{major}"
    if user is not None:
        nearest = data_dir
        while not nearest.exists():
            nearest = nearest.parent
        if not user_can(user, ("x", nearest)):
            return shared_base_dir() / key / f"pg{major}"
    return data_dir


def option(options: Mapping[str, Any], key: str, env: str | None = None) -> Any:
    """``options[key]``, else ``$env``: an empty value counts as unset, so one settings file with
    ``"DATA_DIR": os.environ.get(...)`` works on every machine."""
    value = options.get(key)
    if value in (None, "") and env:
        value = os.environ.get(env) or None
    return value


_config_cache: dict[tuple[Any, ...], ServerConfig] = {}


def resolve_config(options: Mapping[str, Any]) -> ServerConfig:
    """The development-mode config for the ``EMBEDDED`` settings block.

    Memoised: it runs on every new connection, and as root finding the default data directory
    asks the kernel as the server user (a subprocess).
    """
    env = (ENV_DATA_DIR, ENV_BIN_DIR, ENV_RUN_AS, ENV_SHARED_DIR, "XDG_DATA_HOME", "HOME")
    settings_key = tuple(sorted((k, str(v)) for k, v in options.items()))
    key = (settings_key, *(os.environ.get(name) for name in env), os.environ.get(ENV_SETTINGS), os.getcwd())
    if key not in _config_cache:
        _config_cache[key] = _resolve_config(options)
    return _config_cache[key]


def _resolve_config(options: Mapping[str, Any]) -> ServerConfig:
    project = current_project()
    data_dir = option(options, "DATA_DIR", ENV_DATA_DIR)
    if data_dir is None:
        major = find_binaries(option(options, "BIN_DIR")).major
        data_dir = default_data_dir(major, server_user(option(options, "RUN_AS")), project)
    return make_config(options, Path(data_dir).expanduser().absolute(), durable=True, project=str(project))


def make_config(options: Mapping[str, Any], data_dir: Path, **kw: Any) -> ServerConfig:
    """The ``ServerConfig`` for ``data_dir`` with the remaining options (test mode picks its own
    data directory and passes ownership details in ``kw``)."""
    return ServerConfig(
        data_dir=data_dir,
        bin_dir=option(options, "BIN_DIR"),
        port=int(options.get("PORT") or DEFAULT_PORT),
        run_as=option(options, "RUN_AS"),
        start_timeout=float(options.get("START_TIMEOUT") or DEFAULT_START_TIMEOUT),
        **kw,
    )
