"""SIGTERM and SIGINT turned into stop requests without taking a lock inside the signal handler.

Python runs a signal handler in the main thread between two bytecodes, possibly while that thread
holds a lock: an ``Event``'s (a claim loop waiting on it), the logging module's. A handler that
takes the same lock (``Event.set()``, a log line) waits for itself for ever: a supervisor did,
with both its children stopped and itself never exiting. Here the handler only writes the signal
number to a pipe (async-signal-safe, no Python lock); a thread of its own reads it and does the
work in ordinary code.

A process forked by the supervisor starts with the stop signals blocked (:func:`stop_signals_held`
around the fork) and :func:`relay_signals` unblocks them once its handlers are in place, so a stop
that arrives in between waits for them instead of killing the new worker.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class SignalPipe:
    """A self-pipe: ``poke()`` from a signal handler, ``wait()`` or ``read()`` elsewhere."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)
        os.set_blocking(self.read_fd, False)

    def poke(self, byte: int = 0) -> None:
        try:
            os.write(self.write_fd, bytes([byte % 256]))
        except (BlockingIOError, OSError):  # full (wake-ups pending anyway) or closed
            pass

    def wait(self, timeout: float | None) -> bytes:
        """Block until poked or ``timeout``; returns (and drains) what was written."""
        ready, _, _ = select.select([self.read_fd], [], [], timeout)
        return self.drain() if ready else b""

    def drain(self) -> bytes:
        chunks = []
        while True:
            try:
                chunk = os.read(self.read_fd, 4096)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def relay_signals(on_signal: Callable[[int], None], signals: Iterable[int] = STOP_SIGNALS) -> SignalPipe:
    """Install handlers for ``signals`` that call ``on_signal(signum)`` from a thread of its own."""
    pipe = SignalPipe()

    def handler(signum: int, frame: object) -> None:
        pipe.poke(signum)

    def relay() -> None:
        while True:
            for signum in pipe.wait(None):
                on_signal(signum)

    threading.Thread(target=relay, name="pgjobs-signals", daemon=True).start()
    for signum in signals:
        signal.signal(signum, handler)
    # Held since the fork when the supervisor started this process (see stop_signals_held): what
    # arrived meanwhile is delivered now, to the handlers just installed. Elsewhere a no-op.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)
    return pipe


@contextmanager
def stop_signals_held(signals: Iterable[int] = STOP_SIGNALS) -> Iterator[None]:
    """Block ``signals`` in this thread for the block; they stay pending and arrive at its end.

    The supervisor forks its workers inside this block: the child inherits the blocked mask and
    keeps it until :func:`relay_signals` has installed the worker's handlers. Without it a new
    worker had the default action (terminate) until then, so a stop forwarded in that window (the
    service stopped just after a child was replaced) killed it, and the supervisor exited 1 for a
    child that ended badly."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
