"""Settings: the ``PGJOBS`` dict in Django settings, merged over these defaults.

Read through :func:`get_settings`, which caches the validated result until Django says ``PGJOBS``
changed (``override_settings`` sends ``setting_changed``): building and validating it on every call
showed up in a busy worker's profile, once per claim and per acknowledgement.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver


@dataclass(frozen=True)
class PgJobsSettings:
    #: Database alias whose connection enqueues (so enqueue joins the caller's transaction).
    DATABASE: str = "default"
    #: How long a claim stays valid without a heartbeat.
    LEASE_SECONDS: float = 60.0
    #: How often a worker extends the leases of its running jobs; must be well under the lease.
    HEARTBEAT_SECONDS: float = 10.0
    #: How often each worker process tries to run the lease sweep (one process wins the lock).
    SWEEP_INTERVAL_SECONDS: float = 15.0
    #: Poll interval: the backstop for lost notifications and for delayed jobs.
    POLL_INTERVAL_SECONDS: float = 1.0
    #: LISTEN/NOTIFY wake-ups. Turn off behind PgBouncer in transaction pooling mode.
    LISTEN: bool = True
    NOTIFY_CHANNEL: str = "django_pgjobs"
    DEFAULT_QUEUE: str = "default"
    DEFAULT_PRIORITY: int = 0
    DEFAULT_MAX_ATTEMPTS: int = 5
    #: Default backoff: min(cap, base ** attempt) seconds, scaled by a random factor in [1-j, 1+j].
    BACKOFF_BASE: float = 2.0
    BACKOFF_CAP_SECONDS: float = 300.0
    BACKOFF_JITTER: float = 0.2
    #: Attempt history bound: entries kept per job and characters kept per traceback.
    HISTORY_LIMIT: int = 25
    TRACEBACK_LIMIT: int = 8000
    #: Retention: done jobs older than this are pruned (None keeps them forever). Pruning also
    #: ends a job's idempotency protection, so the default is generous.
    RETENTION_DONE_SECONDS: float | None = 14 * 24 * 3600.0
    #: Dead jobs are kept for staff by default (None); set an age to prune them too.
    RETENTION_DEAD_SECONDS: float | None = None
    #: Rows per statement for retention pruning and bulk admin actions.
    BATCH_SIZE: int = 1000
    #: Largest payload (and handler result) accepted, in bytes of JSON. A job is a message, not
    #: a blob store: a 50 MB payload is written on every state change and rendered by the admin.
    MAX_PAYLOAD_BYTES: int = 1024 * 1024
    #: Prepare the queue's statements on each connection (planning them cost about as much as
    #: running them). None: only on a direct connection to the server (not through a pooler such
    #: as PgBouncer, whose transaction mode before 1.21 loses prepared statements); True: always
    #: (PgBouncer >= 1.21 with max_prepared_statements, or a port-mapped direct connection).
    PREPARED_STATEMENTS: bool | None = None
    #: A job snoozed (``raise Snooze(seconds)``) more times than this goes dead: a snooze spends no
    #: attempt, so without a bound a bug could snooze for ever.
    MAX_SNOOZES: int = 100
    #: Periodic jobs for handlers defined elsewhere: a list of dicts with ``task`` (a registered
    #: handler's name), ``cron`` (with an optional ``timezone``) or ``every`` (seconds or a
    #: timedelta), and optional ``args``, ``kwargs``, ``name`` and ``missed`` ("latest" or "skip").
    PERIODIC: list = field(default_factory=list)
    #: Who may read ``/pgjobs/metrics`` (``django_pgjobs.urls``): ``"staff"`` (a logged-in, active
    #: staff user's session), ``"token"`` (``Authorization: Bearer <METRICS_TOKEN>``, what a
    #: Prometheus server sends) or ``"staff_or_token"``. Queue names and worker hosts are not for
    #: the public, so there is no open setting: anyone else gets 403.
    METRICS_AUTH: str = "staff"
    #: The bearer token for ``METRICS_AUTH = "token"`` / ``"staff_or_token"``; empty never matches
    #: (system check ``django_pgjobs.E008``). Read it from the environment, not from the code.
    METRICS_TOKEN: str = ""

    def __post_init__(self) -> None:
        """Reject a value of the wrong kind here, where it is read, rather than as a traceback in
        a worker's claim loop or in every enqueue. Ranges that depend on each other (heartbeat
        against lease) are the system check's job."""
        problems = [p for p in (_kind_problem(f.name, getattr(self, f.name)) for f in fields(self)) if p]
        if isinstance(self.MAX_SNOOZES, int) and self.MAX_SNOOZES < 0:
            problems.append(f"MAX_SNOOZES must be >= 0, not {self.MAX_SNOOZES}")
        channel = self.NOTIFY_CHANNEL
        if isinstance(channel, str) and not (0 < len(channel.encode()) < 64 and '"' not in channel):
            problems.append(
                f"NOTIFY_CHANNEL must be 1-63 bytes without double quotes (a LISTEN channel); got {channel!r}"
            )
        if isinstance(self.METRICS_AUTH, str) and self.METRICS_AUTH not in METRICS_AUTH_CHOICES:
            problems.append(
                f"METRICS_AUTH must be one of {', '.join(repr(c) for c in METRICS_AUTH_CHOICES)}; "
                f"got {self.METRICS_AUTH!r}"
            )
        if not problems:
            from .retry import ExponentialBackoff

            try:
                ExponentialBackoff(self.BACKOFF_BASE, self.BACKOFF_CAP_SECONDS, self.BACKOFF_JITTER)
            except ValueError as exc:
                problems.append(f"BACKOFF_*: {exc}")
        if problems:
            raise ImproperlyConfigured("invalid PGJOBS setting(s): " + "; ".join(problems))


#: ``METRICS_AUTH`` values: who may read the metrics.
METRICS_AUTH_CHOICES = ("staff", "token", "staff_or_token")

_NAMES = {f.name for f in fields(PgJobsSettings)}

_NUMBER = (int, float)
#: What each setting accepts, beyond its default's own type.
_KINDS: dict[str, tuple[type, ...]] = {
    "RETENTION_DONE_SECONDS": (*_NUMBER, type(None)),
    "RETENTION_DEAD_SECONDS": (*_NUMBER, type(None)),
    "PREPARED_STATEMENTS": (bool, type(None)),
}


def _kind_problem(name: str, value: Any) -> str | None:
    spec = next(f for f in fields(PgJobsSettings) if f.name == name)
    default = spec.default_factory() if spec.default is MISSING else spec.default  # type: ignore[operator]
    allowed = _KINDS.get(name) or (_NUMBER if isinstance(default, float) else (type(default),))
    if isinstance(value, bool) and bool not in allowed:
        return f"{name} must be {_describe(allowed)}, not {value!r}"
    if not isinstance(value, allowed):
        return f"{name} must be {_describe(allowed)}, not {type(value).__name__} {value!r}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{name} must be finite, not {value!r}"
    return None


def _describe(kinds: tuple[type, ...]) -> str:
    return " or ".join("None" if k is type(None) else k.__name__ for k in kinds)


_cached: PgJobsSettings | None = None


def get_settings() -> PgJobsSettings:
    """The effective settings, validated; unknown keys are an error rather than silently ignored."""
    global _cached
    if _cached is None:
        user: dict[str, Any] = getattr(django_settings, "PGJOBS", {}) or {}
        unknown = set(user) - _NAMES
        if unknown:
            raise ImproperlyConfigured(
                f"unknown PGJOBS setting(s): {', '.join(sorted(unknown))}; known: {', '.join(sorted(_NAMES))}"
            )
        _cached = PgJobsSettings(**user)
    return _cached


@receiver(setting_changed)
def _forget_settings(*, setting: str, **kwargs: Any) -> None:
    global _cached
    if setting == "PGJOBS":
        _cached = None
