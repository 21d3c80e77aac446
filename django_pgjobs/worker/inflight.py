"""The jobs this process holds, each in one explicit state, behind one lock.

A claimed job is ``running`` in its row from the claim until its outcome is written; in here it
moves through these states (one enum, not a set of flags that can contradict each other):

``BUFFERED``   claimed ahead, waiting for a free executor (its lease is heartbeated like the rest);
               if its lease is found lost meanwhile it leaves the table and never runs
``RUNNING``    its handler runs in an executor thread
``FINISHED``   the handler returned; the outcome waits for the acknowledger
``ABANDONED``  it overran its ``timeout``: no longer heartbeated (the sweeper takes it back), its
               thread is stuck in the handler; if the handler ever returns, the late outcome goes
               to the acknowledger and the fence decides whether it still counts
``RELEASING``  being handed back without charging its attempt (shutdown, a lost claim reply)

Entries are keyed by claim token: an abandoned run and the rerun of the same job can both be here.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..cancellation import CancelSignal
from ..registry import JobHandler
from ..store import Claim


class JobState(enum.Enum):
    BUFFERED = "buffered"
    RUNNING = "running"
    FINISHED = "finished"
    ABANDONED = "abandoned"
    RELEASING = "releasing"


#: States whose lease this process still extends.
HEARTBEATED = frozenset({JobState.BUFFERED, JobState.RUNNING, JobState.FINISHED})
#: States a per-queue limit counts.
_HELD = frozenset({JobState.BUFFERED, JobState.RUNNING})


@dataclass(eq=False)
class InFlight:
    claim: Claim
    handler: JobHandler[Any, Any] | None
    lease: float
    #: Monotonic time by which the lease has surely lapsed, measured from when the statement that
    #: set it was *sent* (the database's clock started the lease no earlier).
    lease_valid_until: float
    state: JobState = JobState.BUFFERED
    started: float | None = None
    #: The fence refused a heartbeat: the job is someone else's now; never beat it again.
    lost: bool = False
    #: Set when the job is asked to stop; the handler's context reads it.
    cancel_signal: CancelSignal = field(default_factory=CancelSignal)
    order: tuple[int, float, int] = field(default=(0, 0.0, 0))

    @property
    def token(self) -> int:
        return self.claim.token

    @property
    def id(self) -> int:
        return self.claim.id


@dataclass
class Lost:
    """What :meth:`InFlightTable.lose` did: buffered entries dropped (never to run), running ones
    newly marked lost."""

    dropped: list[InFlight] = field(default_factory=list)
    running: list[InFlight] = field(default_factory=list)


class InFlightTable:
    """Thread-safe. Executors wait here for work; the claim loop asks how much room is left."""

    def __init__(self, on_room: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._has_work = threading.Condition(self._lock)
        self._items: dict[int, InFlight] = {}  # claim token -> entry
        self._buffer: list[tuple[tuple[int, float, int], int, InFlight]] = []  # heap, claim order
        self._sequence = itertools.count()
        self._closed = False
        self._on_room = on_room  # wakes the claim loop when capacity frees
        self.claimed_total = 0
        # Kept as states change, so the claim loop's sizing reads them without a scan per job.
        self._counts = dict.fromkeys(JobState, 0)
        self._held_by_queue: dict[str, int] = {}

    def _move(self, entry: InFlight, new: JobState | None) -> None:
        """Change ``entry``'s state (None: it leaves the table); lock held."""
        old = entry.state
        if new is old:
            return
        self._counts[old] -= 1
        if old in _HELD:
            self._held_by_queue[entry.claim.queue] -= 1
        if new is None:
            return
        self._counts[new] += 1
        if new in _HELD:
            self._held_by_queue[entry.claim.queue] = self._held_by_queue.get(entry.claim.queue, 0) + 1
        entry.state = new

    # -- arrivals ---------------------------------------------------------------------------------
    def add(self, entries: Iterable[InFlight]) -> None:
        added = 0
        with self._lock:
            for entry in entries:
                entry.order = (-entry.claim.priority, entry.claim.run_at, entry.claim.id)
                self._items[entry.token] = entry
                self._counts[entry.state] += 1
                if entry.state in _HELD:
                    queue = entry.claim.queue
                    self._held_by_queue[queue] = self._held_by_queue.get(queue, 0) + 1
                heapq.heappush(self._buffer, (entry.order, next(self._sequence), entry))
                self.claimed_total += 1
                added += 1
            self._has_work.notify(added)  # as many idle executors as jobs, not the whole pool

    # -- executors --------------------------------------------------------------------------------
    def next_to_run(self, timeout: float | None = None) -> InFlight | None:
        """The best buffered job, now RUNNING; None when closed (or after ``timeout``)."""
        with self._lock:
            while True:
                while self._buffer:
                    _, _, entry = heapq.heappop(self._buffer)
                    # Else released, or dropped as lost, meanwhile.
                    if entry.state is JobState.BUFFERED and self._items.get(entry.token) is entry:
                        self._move(entry, JobState.RUNNING)
                        entry.started = time.monotonic()
                        return entry
                if self._closed or not self._has_work.wait(timeout):
                    return None

    def finish(self, entry: InFlight) -> bool:
        """The handler returned. False when the run had been abandoned (a late outcome)."""
        with self._lock:
            was_running = entry.state is JobState.RUNNING
            if was_running:
                self._move(entry, JobState.FINISHED)
        if was_running:
            self._on_room()
        return was_running

    def close(self) -> None:
        """Executors stop taking work (shutdown)."""
        with self._lock:
            self._closed = True
            self._has_work.notify_all()

    # -- state changes ----------------------------------------------------------------------------
    def abandon_overdue(self, now: float) -> list[InFlight]:
        """RUNNING jobs past their handler's ``timeout`` become ABANDONED; returns them."""
        overdue = []
        with self._lock:
            for entry in self._items.values():
                timeout = entry.handler.timeout if entry.handler else None
                if (
                    entry.state is JobState.RUNNING
                    and timeout
                    and entry.started is not None
                    and now - entry.started > timeout
                ):
                    self._move(entry, JobState.ABANDONED)
                    overdue.append(entry)
        if overdue:
            self._on_room()
        return overdue

    def mark_releasing(self, which: Callable[[InFlight], bool]) -> list[InFlight]:
        with self._lock:
            chosen = [e for e in self._items.values() if e.state is not JobState.RELEASING and which(e)]
            for entry in chosen:
                self._move(entry, JobState.RELEASING)
        return chosen

    def forget(self, entries: Iterable[InFlight]) -> None:
        """Written or released: no longer held (an entry replaced by a rerun is left alone)."""
        with self._lock:
            for entry in entries:
                if self._items.get(entry.token) is entry:
                    del self._items[entry.token]
                    self._move(entry, None)
        self._on_room()

    def extended(self, until: dict[int, float]) -> None:
        """Leases extended: ``until`` maps claim tokens to their new (monotonic) lapse time."""
        with self._lock:
            for token, when in until.items():
                entry = self._items.get(token)
                if entry is not None:
                    entry.lease_valid_until = max(entry.lease_valid_until, when)

    def lose(self, tokens: set[int]) -> Lost:
        """The fence refused these tokens' heartbeat: the jobs are someone else's now. A buffered
        one leaves the table at once (it must never start: another worker has it); a running one
        is marked lost (once) and its outcome will be refused; a finished one is being written,
        which is what refused it."""
        lost = Lost()
        with self._lock:
            for token in tokens:
                entry = self._items.get(token)
                if entry is None or entry.lost:
                    continue
                entry.lost = True
                if entry.state is JobState.BUFFERED:
                    del self._items[token]
                    self._move(entry, None)
                    lost.dropped.append(entry)
                elif entry.state is JobState.RUNNING:
                    lost.running.append(entry)
        if lost.dropped:
            self._on_room()
        return lost

    def request_cancel(self, requests: dict[int, str | None]) -> list[InFlight]:
        """Heartbeat found these claim tokens' jobs asked to stop: signal their handlers (once);
        returns the entries newly signalled."""
        signalled = []
        with self._lock:
            entries = [(self._items.get(t), by) for t, by in requests.items()]
        for entry, by in entries:
            if entry is not None and not entry.cancel_signal.is_set():
                entry.cancel_signal.set(by)
                signalled.append(entry)
        return signalled

    # -- reading ----------------------------------------------------------------------------------
    def to_heartbeat(self) -> list[InFlight]:
        with self._lock:
            return [e for e in self._items.values() if e.state in HEARTBEATED and not e.lost]

    def snapshot(self) -> list[InFlight]:
        with self._lock:
            return list(self._items.values())

    def tokens(self) -> set[int]:
        with self._lock:
            return set(self._items)

    def counts(self) -> dict[JobState, int]:
        with self._lock:
            return dict(self._counts)

    def held_by_queue(self) -> dict[str, int]:
        """Buffered and running jobs per queue (what per-queue limits count)."""
        with self._lock:
            return dict(self._held_by_queue)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
