"""System checks: configuration mistakes that would otherwise surface as lost or doubled jobs."""

from __future__ import annotations

import importlib.util
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.urls import NoReverseMatch, reverse

from .conf import PgJobsSettings, get_settings

#: The oldest psycopg the worker works with: ``Connection.notifies(timeout=...)`` arrived in 3.2;
#: with 3.1 the listener fell back to reconnecting every 0.2 s.
MIN_PSYCOPG = (3, 2)


def psycopg_problem() -> str | None:
    try:
        import psycopg
    except ImportError:
        return "django-pgjobs needs psycopg 3 (psycopg2 is not supported)"
    version = tuple(int(p) for p in psycopg.__version__.split(".")[:2] if p.isdigit())
    if version < MIN_PSYCOPG:
        return f"django-pgjobs needs psycopg >= 3.2; this is psycopg {psycopg.__version__}"
    return None


def metrics_problems(s: PgJobsSettings) -> list[CheckMessage]:
    """The metrics endpoint: a token scheme with no token would refuse every scrape, and the
    endpoint without ``prometheus_client`` answers only 501."""
    messages: list[CheckMessage] = []
    if s.METRICS_AUTH in ("token", "staff_or_token") and not s.METRICS_TOKEN:
        messages.append(
            Error(
                f"PGJOBS METRICS_AUTH is {s.METRICS_AUTH!r} but METRICS_TOKEN is empty",
                hint="Set PGJOBS['METRICS_TOKEN'] (e.g. from an environment variable) to the bearer "
                "token your Prometheus sends, or METRICS_AUTH = 'staff'.",
                id="django_pgjobs.E008",
            )
        )
    if importlib.util.find_spec("prometheus_client") is None and _metrics_url_included():
        messages.append(
            Error(
                "django_pgjobs.urls is included (it serves /metrics) but prometheus_client is not installed",
                hint="pip install 'django-pgjobs[metrics]'",
                id="django_pgjobs.E009",
            )
        )
    return messages


def _metrics_url_included() -> bool:
    """Whether the project's URLconf serves our metrics. A project without a URLconf (a worker-only
    settings module) does not; a URLconf that fails to load is Django's own check's to report."""
    if not getattr(settings, "ROOT_URLCONF", None):
        return False
    try:
        reverse("django_pgjobs:metrics")
    except NoReverseMatch:
        return False
    except Exception:
        return False
    return True


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

    # A negative limit sliced the traceback from the wrong end (and 0 used to keep it whole).
    if s.TRACEBACK_LIMIT < 0:
        messages.append(
            Error(
                f"PGJOBS TRACEBACK_LIMIT ({s.TRACEBACK_LIMIT}) must be >= 0",
                hint="Characters of each traceback kept in a job's history; 0 keeps none.",
                id="django_pgjobs.E011",
            )
        )
    # A negative age makes every finished job "older than" it: the next sweep would prune them all.
    for name in ("RETENTION_DONE_SECONDS", "RETENTION_DEAD_SECONDS"):
        value = getattr(s, name)
        if value is not None and value < 0:
            messages.append(
                Error(
                    f"PGJOBS {name} ({value}) must be >= 0 or None",
                    hint="An age in seconds after which finished jobs are pruned; None keeps them.",
                    id="django_pgjobs.E012",
                )
            )

    if s.DATABASE != "default" and s.DATABASE in settings.DATABASES:
        messages.append(
            Warning(
                f"jobs live on the database {s.DATABASE!r}, not 'default': an enqueue joins a "
                f"transaction only when it is opened on that alias",
                hint=f"Enqueue inside transaction.atomic(using={s.DATABASE!r}) to make a job commit or roll "
                "back with your data; transaction.atomic() alone opens one on 'default', and the job "
                "commits on its own at once.",
                id="django_pgjobs.W002",
            )
        )
    problem = psycopg_problem()
    if problem:
        messages.append(Error(problem, hint="pip install 'psycopg[binary]>=3.2'", id="django_pgjobs.E007"))

    messages += metrics_problems(s)

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


@register()
def check_periodic(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every periodic schedule can be built (``PGJOBS["PERIODIC"]`` entries name registered
    handlers with valid arguments); ``@job(cron=...)`` already failed at import if it could not."""
    from .periodic import InvalidSchedule, schedules

    try:
        schedules()
    except InvalidSchedule as exc:
        return [Error(str(exc), id="django_pgjobs.E021")]
    except Exception:  # an invalid PGJOBS is check_pgjobs's to report
        return []
    return []
