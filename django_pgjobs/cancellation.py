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


class CancelSignal:
    """Set once, from the worker's heartbeat thread; read from the handler's thread."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self.by: str | None = None
        self._callbacks: list[Callable[[], None]] = []

    def is_set(self) -> bool:
        return self._event.is_set()

    def set(self, by: str | None = None) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.by = by
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def wait(self, timeout: float | None) -> bool:
        """Sleep up to ``timeout`` seconds; True (early) once the job is asked to stop."""
        return self._event.wait(timeout)

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from the setting thread) once set, at once if already set; returns a
        function that forgets it."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        callback()
        return lambda: None

    def _forget(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)
