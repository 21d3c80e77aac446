"""``manage.py pgembedded status|start|stop``: look after the embedded development server.

In development the server deliberately outlives ``runserver`` and ``runjobs`` (they share it), so
something has to show where it is and stop it. It is this project's server only: the data
directory is keyed by the project, so another checkout's server is never shown or stopped. Test
servers stop themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections

from django_pgjobs.management.database import database_alias

if TYPE_CHECKING:
    from django_pgjobs.embedded.server import ServerInfo


class Command(BaseCommand):
    help = "Show, start or stop the embedded PostgreSQL server (ENGINE django_pgjobs.embedded)."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["status", "start", "stop"], nargs="?")
        parser.add_argument(
            "--database",
            default=DEFAULT_DB_ALIAS,
            help="Database alias whose embedded server to manage (default: %(default)s).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from django_pgjobs.embedded import ENGINE, server

        alias = database_alias(options["database"])
        settings_dict = connections.settings[alias]
        if settings_dict.get("ENGINE") != ENGINE:
            raise CommandError(
                f"database {alias!r} uses {settings_dict.get('ENGINE')!r}, not the embedded "
                f"engine {ENGINE!r} (is DATABASE_URL set?)"
            )
        embedded = dict(settings_dict.get("EMBEDDED") or {})
        action = options["action"] or "status"
        try:
            if action == "start" and embedded.get("MODE") == "test":
                raise CommandError(
                    "test servers belong to a test run and are removed when it ends; nothing to start here"
                )
            if action == "start":
                started = server.server_for(embedded)
                self.stdout.write(f"running (pid {started.pid})")
                self._describe(started)
                return
            if embedded.get("MODE") == "test":
                info = server.current_server(embedded)
                if action == "stop":
                    raise CommandError("test servers stop when the test process that owns them exits")
                if info is None:
                    self.stdout.write("stopped (test servers live only as long as a test run)")
                else:
                    self.stdout.write(f"running (pid {info.pid}, test mode)")
                    self._describe(info)
                return
            # This project's server only (its data directory is keyed by the project): another
            # checkout's server is neither shown nor stopped.
            config = server.resolve_config(embedded)
            info = server.running_server(config.data_dir)
            if action == "stop":
                stopped = server.stop_server(config.data_dir)
                pid = f"pid {info.pid}, " if info is not None else ""
                whose = f"the embedded server of {config.project}"
                self.stdout.write(
                    f"stopped {whose} ({pid}data directory {config.data_dir})"
                    if stopped
                    else f"not running: {whose} (data directory {config.data_dir})"
                )
                return
            if info is None:
                self.stdout.write("stopped")
                self.stdout.write(f"project: {config.project}")
                self.stdout.write(f"data directory: {config.data_dir}")
            else:
                self.stdout.write(f"running (pid {info.pid})")
                self.stdout.write(f"project: {config.project}")
                self._describe(info)
        except server.EmbeddedPostgresError as exc:
            raise CommandError(str(exc)) from exc

    def _describe(self, info: ServerInfo) -> None:
        from django_pgjobs.embedded import server

        self.stdout.write(f"data directory: {info.data_dir}")
        self.stdout.write(f"socket: {info.socket_path}")
        self.stdout.write(f"log: {info.data_dir / server.LOG_NAME}")
        self.stdout.write("connect: python manage.py dbshell (the psql shipped with the server)")
        self.stdout.write(f"url: {info.url()}")
