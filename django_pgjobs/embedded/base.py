"""The ``django_pgjobs.embedded`` database engine: Django's PostgreSQL backend plus a server.

Nothing happens at import or settings time. The server is found or started in
:meth:`DatabaseWrapper.get_connection_params`, i.e. on the first real connection, so commands
that never connect (``check``, ``showmigrations --plan`` without a database...) never start one.
``makemigrations`` only connects for its optional migration-history consistency check; when the
server is not already running we let that check be skipped (as Django does for an unreachable
database) instead of starting a server for it.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError
from django.db.backends.postgresql import base as postgresql_base
from django.db.backends.postgresql.client import DatabaseClient as PostgresClient

from django_pgjobs.embedded import server

_NOT_STARTED = "embedded PostgreSQL server not started for makemigrations' history check"
warnings.filterwarnings(
    "ignore",
    message=rf"Got an error checking a consistent migration history.*{_NOT_STARTED}",
    category=RuntimeWarning,
)


def _in_history_check() -> bool:
    """Whether we are called from ``MigrationLoader.check_consistent_history``."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "check_consistent_history" and "migrations" in code.co_filename:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class DatabaseClient(PostgresClient):
    """``dbshell`` against the embedded server, with the ``psql`` shipped next to it."""

    connection: DatabaseWrapper

    @classmethod
    def settings_to_cmd_args_env(
        cls, settings_dict: dict[str, Any], parameters: Iterable[str]
    ) -> tuple[list[str], dict[str, str] | None]:
        """Django's psql command line, with the ``psql`` shipped next to the server (there may be
        none on ``$PATH``)."""
        args, env = super().settings_to_cmd_args_env(settings_dict, parameters)
        psql = server.find_binaries((settings_dict.get("EMBEDDED") or {}).get("BIN_DIR")).path("psql")
        if psql.exists():
            args[0] = str(psql)
        return args, env

    def runshell(self, parameters: Iterable[str]) -> None:
        """Start the server first; Django's own runshell keeps its Ctrl-C handling for psql."""
        self.connection.ensure_embedded_server()
        super().runshell(parameters)


class DatabaseWrapper(postgresql_base.DatabaseWrapper):
    """Django's PostgreSQL wrapper, pointed at the embedded server's socket on every connect."""

    client_class = DatabaseClient

    @property
    def embedded_options(self) -> dict[str, Any]:
        """The ``EMBEDDED`` block of this database's settings (see ``django_pgjobs.embedded``)."""
        return dict(self.settings_dict.get("EMBEDDED") or {})

    def ensure_embedded_server(self) -> server.ServerInfo:
        """Find or start the server and record its socket as HOST/PORT (for dbshell and logs).

        Checked on every new connection, not cached: a development server stopped with
        ``pgembedded stop`` is simply started again by the next connection.
        """
        options = self.embedded_options
        try:
            info = server.current_server(options)
            if info is None:
                if _in_history_check():
                    raise OperationalError(_NOT_STARTED)
                info = server.server_for(options)
        except server.BinariesNotFound as exc:
            raise ImproperlyConfigured(str(exc)) from exc
        except server.EmbeddedPostgresError as exc:
            raise OperationalError(str(exc)) from exc
        self.settings_dict["HOST"] = str(info.socket_dir)
        self.settings_dict["PORT"] = str(info.port)
        if not self.settings_dict.get("USER"):
            self.settings_dict["USER"] = "postgres"
        return info

    def get_connection_params(self) -> dict[str, Any]:
        """Connection parameters for the running server (started here on first use)."""
        self.ensure_embedded_server()
        return super().get_connection_params()
