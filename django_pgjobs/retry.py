"""Backoff policies: how long a failed job waits before its next attempt.

The delay is computed by the worker from the handler's policy but *stored in the row* (``run_at``),
so a restart never forgets a retry schedule (seed invariant 4).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

#: ``(attempt, exception) -> seconds``, or ``None`` to give up now (the job goes dead).
BackoffPolicy = Callable[[int, BaseException | None], "float | None"]


@dataclass(frozen=True)
class ExponentialBackoff:
    """Capped exponential backoff with jitter: ``min(cap, base ** attempt) * U(1-j, 1+j)``, capped.

    The seed's ``min(300, 2 ** attempts)`` is the shape; jitter spreads out jobs that failed
    together (a downstream outage) so they do not retry in lock-step.
    """

    base: float = 2.0
    cap: float = 300.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.base < 1:
            raise ValueError("backoff base must be >= 1")
        if self.cap < 0:
            raise ValueError("backoff cap must be >= 0")
        if not 0 <= self.jitter < 1:
            raise ValueError("backoff jitter must be in [0, 1)")

    def _raw(self, attempt: int) -> float:
        try:
            return min(self.cap, self.base ** max(attempt, 0))
        except OverflowError:  # attempt in the thousands: the cap has long been reached
            return self.cap

    def bounds(self, attempt: int) -> tuple[float, float]:
        """The range a delay for this attempt falls in (used by tests and docs)."""
        raw = self._raw(attempt)
        return raw * (1 - self.jitter), min(self.cap, raw * (1 + self.jitter))

    def __call__(self, attempt: int, exc: BaseException | None = None) -> float:
        raw = self._raw(attempt)
        return min(self.cap, raw * random.uniform(1 - self.jitter, 1 + self.jitter))


def default_backoff() -> ExponentialBackoff:
    from .conf import get_settings

    s = get_settings()
    return ExponentialBackoff(s.BACKOFF_BASE, s.BACKOFF_CAP_SECONDS, s.BACKOFF_JITTER)
