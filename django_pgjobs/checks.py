"""System checks: configuration mistakes that would otherwise surface as lost or doubled jobs."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from .conf import get_settings


@register()
def check_pgjobs(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    try:
        s = get_settings()
    except (ImproperlyConfigured, TypeError) as exc:
        return [Error(str(exc), id="django_pgjobs.E001")]

    if s.DATABASE not in settings.DATABASES:
        messages.append(
            Error(
                f"PGJOBS['DATABASE'] names {s.DATABASE!r}, which is not in DATABASES",
                id="django_pgjobs.E002",
            )
        )
    elif connections[s.DATABASE].vendor != "postgresql":
        messages.append(
            Error(
                f"django-pgjobs needs PostgreSQL; database {s.DATABASE!r} is "
                f"{connections[s.DATABASE].vendor}",
                hint="Use django.db.backends.postgresql (or django_pgjobs.embedded for development).",
                id="django_pgjobs.E003",
            )
        )

    # A heartbeat close to the lease lets a briefly slow worker lose its job to the sweeper while it
    # still runs it: a known cause of double execution in other queues.
    if not s.HEARTBEAT_SECONDS > 0 or s.HEARTBEAT_SECONDS > s.LEASE_SECONDS / 3:
        messages.append(
            Error(
                f"PGJOBS HEARTBEAT_SECONDS ({s.HEARTBEAT_SECONDS}) must be positive and at most a "
                f"third of LEASE_SECONDS ({s.LEASE_SECONDS})",
                hint="Several heartbeats must fit in one lease so one slow beat does not lose the job.",
                id="django_pgjobs.E004",
            )
        )
    for name in ("POLL_INTERVAL_SECONDS", "SWEEP_INTERVAL_SECONDS", "LEASE_SECONDS"):
        if not getattr(s, name) > 0:
            messages.append(Error(f"PGJOBS {name} must be positive", id="django_pgjobs.E005"))
    if s.DEFAULT_MAX_ATTEMPTS < 1 or s.BATCH_SIZE < 1 or s.HISTORY_LIMIT < 1:
        messages.append(
            Error(
                "PGJOBS DEFAULT_MAX_ATTEMPTS, BATCH_SIZE and HISTORY_LIMIT must be >= 1",
                id="django_pgjobs.E006",
            )
        )

    apps = list(settings.INSTALLED_APPS)
    ours = next((i for i, a in enumerate(apps) if a.startswith("django_pgjobs")), None)
    theirs = next((i for i, a in enumerate(apps) if a.startswith("django_extensions")), None)
    if ours is not None and theirs is not None and theirs < ours:
        messages.append(
            Warning(
                "django_extensions is listed before django_pgjobs in INSTALLED_APPS, so its own "
                "'runjobs' command hides ours",
                hint="Move 'django_pgjobs' above 'django_extensions'.",
                id="django_pgjobs.W001",
            )
        )
    return messages
