"""The database alias a management command works on, checked before anything connects."""

from __future__ import annotations

from django.core.management.base import CommandError
from django.db import connections

from django_pgjobs.conf import get_settings


def database_alias(given: str | None = None) -> str:
    """``given`` (a command's ``--database``) or, when None, ``PGJOBS["DATABASE"]``; a
    :class:`CommandError` naming the alias and the configured ones when ``DATABASES`` has no such
    alias, rather than ``ConnectionDoesNotExist``'s traceback at the first query.

    ``PGJOBS["DATABASE"]`` is also system check ``django_pgjobs.E002``, but ``call_command()`` and
    ``--skip-checks`` run a command without the checks."""
    alias = get_settings().DATABASE if given is None else given
    if alias not in connections.settings:
        source = "--database" if given is not None else "PGJOBS['DATABASE']"
        configured = ", ".join(repr(a) for a in connections.settings) or "none"
        raise CommandError(f"no database {alias!r} in DATABASES ({source}); configured: {configured}")
    return alias
