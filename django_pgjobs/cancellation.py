"""How a running handler learns that its job was asked to stop.

``Job.objects.cancel`` (the admin's Cancel) marks a running job's row; its worker reads the mark at
the next heartbeat, or at once when the cancel notification arrives, and sets the job's
:class:`CancelSignal`. Python cannot stop a thread, so a synchronous handler cooperates: it reads
``context.cancel_requested`` or calls ``context.check_cancelled()`` (which raises
:class:`~django_pgjobs.JobCancelled`) between steps, or waits with ``context.sleep()``, which returns
early. An ``async def`` handler's task is cancelled for it. Whatever the run ends with, the job ends
``cancelled`` (never retried): the row says it was asked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

#: Guards the lazy creation of events (rare: a job asked to stop, or a handler that waits).
_creating = threading.Lock()


class CancelSignal:
    """Set once, from the worker's heartbeat thread; read from the handler's thread.

    One is made per job, so it is cheap until used: the ``threading.Event`` behind ``wait()`` is
    created only when a handler waits or the job is asked to stop (an Event per job was a visible
    share of a no-op job's CPU).
    """

    __slots__ = ("_callbacks", "_event", "by", "requested")

    def __init__(self) -> None:
        self.requested = False
        self.by: str | None = None
        self._event: threading.Event | None = None
        self._callbacks: list[Callable[[], None]] = []

    def is_set(self) -> bool:
        return self.requested

    def _the_event(self) -> threading.Event:
        with _creating:
            if self._event is None:
                self._event = threading.Event()
                if self.requested:
                    self._event.set()
            return self._event

    def set(self, by: str | None = None) -> None:
        with _creating:
            if self.requested:
                return
            self.by = by
            self.requested = True
            if self._event is not None:
                self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def wait(self, timeout: float | None) -> bool:
        """Sleep up to ``timeout`` seconds; True (early) once the job is asked to stop."""
        if self.requested:
            return True
        return self._the_event().wait(timeout)

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from the setting thread) once set, at once if already set; returns a
        function that forgets it."""
        with _creating:
            if not self.requested:
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        callback()
        return lambda: None

    def _forget(self, callback: Callable[[], None]) -> None:
        with _creating:
            if callback in self._callbacks:
                self._callbacks.remove(callback)
