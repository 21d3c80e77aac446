"""What one ``runjobs`` process was asked to do: queues (with per-queue limits), slots, exits."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..validation import queue_name


@dataclass(frozen=True)
class QueueSpec:
    """``-q mail`` (no limit of its own) or ``-q mail:4`` (at most 4 of its jobs at once here)."""

    name: str
    limit: int | None = None

    @classmethod
    def parse(cls, text: str) -> QueueSpec:
        """A trailing ``:N`` of digits is the limit; any other colon is part of the name."""
        head, sep, tail = text.rpartition(":")
        name, limit = (head, int(tail)) if sep and tail.isdigit() else (text, None)
        queue_name(name)  # the enqueue side's rule (its InvalidJob is a ValueError): no such queue can exist
        if limit is not None and limit < 1:
            raise ValueError(f"queue {name!r}: the limit after ':' must be at least 1, got {limit}")
        return cls(name, limit)


@dataclass(frozen=True)
class WorkerOptions:
    queues: tuple[str, ...] | None = None  # None: every queue
    #: Per-queue limits, for queues given as ``name:N``.
    queue_limits: dict[str, int] = field(default_factory=dict)
    concurrency: int = 1
    burst: bool = False
    max_jobs: int | None = None
    worker_id: str | None = None
    poll_interval: float | None = None
    listen: bool | None = None
    shutdown_timeout: float = 30.0
    lease: float | None = None
    heartbeat_interval: float | None = None
    sweep_interval: float | None = None
    #: Enqueue the periodic jobs' ticks (never in a ``burst`` run, which drains and exits).
    periodic: bool = True

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if self.max_jobs is not None and self.max_jobs < 1:
            raise ValueError("max_jobs must be >= 1")
        if not self.shutdown_timeout >= 0:  # NaN too (it would release running jobs at once)
            raise ValueError(
                "--shutdown-timeout must be a number of seconds >= 0 (inf: wait for running jobs "
                f"however long they take), not {self.shutdown_timeout!r}"
            )
        if self.poll_interval is not None and not (
            math.isfinite(self.poll_interval) and self.poll_interval > 0
        ):
            raise ValueError(
                f"--poll-interval must be a finite number of seconds > 0, not {self.poll_interval!r}"
            )
        unknown = set(self.queue_limits) - set(self.queues or ())
        if unknown:
            raise ValueError(f"queue limits for queues not worked on: {sorted(unknown)}")

    @classmethod
    def from_queue_args(cls, queues: list[str] | None, **options: object) -> WorkerOptions:
        """Options from ``-q`` arguments (``mail``, ``mail:4``); a queue named twice is an error."""
        specs = [QueueSpec.parse(q) for q in queues or ()]
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"a queue is named twice: {names}")
        limits = {s.name: s.limit for s in specs if s.limit is not None}
        return cls(queues=tuple(names) or None, queue_limits=limits, **options)  # type: ignore[arg-type]
