"""``runjobs --processes P``: fork P worker processes, restart any that dies, stop them all on a signal.

The supervisor itself holds no database connection and starts no threads before forking, so each
child starts from a clean state (Django connections are per process and opened lazily).

Its signal handlers only count and write a byte to a pipe (see :mod:`django_pgjobs.stop_signals`):
the main loop sleeps on that pipe, reaps children and forwards stop requests itself. A handler that
set an ``Event`` deadlocked when a signal arrived while the main thread held that Event's lock.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import time
from collections.abc import Callable
from types import FrameType

from django.db import connections

from .stop_signals import SignalPipe, stop_signals_held

logger = logging.getLogger("django_pgjobs")

#: A child that dies sooner than this after starting is restarted with a growing delay, so a worker
#: that cannot start (bad settings, database down) does not fork in a hot loop.
QUICK_DEATH_SECONDS = 5.0


class Supervisor:
    def __init__(
        self,
        processes: int,
        run_child: Callable[[int], int],
        shutdown_timeout: float,
        *,
        restart_clean_exits: bool = True,
    ) -> None:
        if processes < 1:
            raise ValueError("processes must be >= 1")
        self.processes = processes
        # Only the caller knows whether a clean exit is the plan (--burst drained, --max-jobs
        # reached) or a child stopped by someone else (``kill -TERM <child>`` to recycle it).
        self.restart_clean_exits = restart_clean_exits
        self.run_child = run_child  # called in the child with its slot number; returns an exit code
        self.shutdown_timeout = shutdown_timeout
        self.children: dict[int, tuple[int, float]] = {}  # pid -> (slot, started)
        self.restarts = 0
        self._signals = 0  # stop signals received (written only by the handler)
        self._forwarded = 0  # of which forwarded to the children
        self._pipe = SignalPipe()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGCHLD, lambda *_: self._pipe.poke())

    def run(self) -> int:
        self.install_signal_handlers()
        connections.close_all()
        quick_deaths = dict.fromkeys(range(self.processes), 0)
        for slot in range(self.processes):
            self._spawn(slot)
        logger.info("supervisor %d started %d worker processes", os.getpid(), self.processes)
        while self._signals == 0 and self.children:
            for pid, status in self._reap():
                slot, started = self.children.pop(pid)
                if self._signals:
                    continue  # stopping: reaped children are simply gone
                if os.waitstatus_to_exitcode(status) == 0 and not self.restart_clean_exits:
                    logger.info("worker process %d (slot %d) finished", pid, slot)
                    continue
                quick = time.monotonic() - started < QUICK_DEATH_SECONDS
                quick_deaths[slot] = quick_deaths[slot] + 1 if quick else 0
                delay = min(30.0, 0.5 * 2 ** quick_deaths[slot]) if quick else 0.0
                logger.warning(
                    "worker process %d (slot %d) exited with %s; restarting%s",
                    pid,
                    slot,
                    _describe(status),
                    f" in {delay:.1f}s" if delay else "",
                )
                if delay and self._sleep(delay):
                    continue
                self.restarts += 1
                self._spawn(slot)
            if self.children:
                self._sleep(1.0)
        return self._stop_children()

    def _spawn(self, slot: int) -> None:
        # The child keeps SIGTERM/SIGINT blocked until the worker's own handlers are installed
        # (relay_signals unblocks them): a stop arriving before then waits for them.
        with stop_signals_held():
            pid = os.fork()
            if pid == 0:  # child
                code = 1
                try:
                    self._pipe.close()  # the supervisor's, not this worker's
                    _detach_from_supervisor(os.getppid())
                    code = self.run_child(slot)
                except BaseException:
                    logger.exception("worker process crashed")
                finally:
                    logging.shutdown()
                    os._exit(code)
        self.children[pid] = (slot, time.monotonic())

    def _reap(self) -> list[tuple[int, int]]:
        reaped = []
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in self.children:
                reaped.append((pid, status))
        return reaped

    def _sleep(self, seconds: float) -> bool:
        """Sleep until a child exits or a signal arrives; True if a stop was requested."""
        self._pipe.wait(seconds)
        self._forward()
        return self._signals > 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # A signal handler: no lock, no log line, no iteration over state the loop changes.
        self._signals += 1
        self._pipe.poke()

    def _forward(self) -> None:
        """Each child runs the same two-step shutdown: the first signal drains, the second forces.
        So every stop signal the supervisor got becomes one SIGTERM to each child."""
        while self._forwarded < self._signals:
            self._forwarded += 1
            for pid in list(self.children):
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def _stop_children(self) -> int:
        self._forward()
        deadline = time.monotonic() + self.shutdown_timeout + 15
        worst = 0
        while self.children and time.monotonic() < deadline:
            for pid, status in self._reap():
                self.children.pop(pid, None)
                worst = worst or int(os.waitstatus_to_exitcode(status) != 0)  # killed by a signal too
            if self.children:
                self._sleep(0.1)
        for pid in list(self.children):  # did not stop in time: a last, forceful request
            logger.error("worker process %d did not stop in time; killing it", pid)
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            worst = 1
        logger.info("supervisor stopped (%d restarts)", self.restarts)
        return 0 if worst == 0 else 1


def _detach_from_supervisor(supervisor: int) -> None:
    """In a new child: its own process group, so a terminal's Ctrl-C or systemd's stop (sent to
    the whole group) reaches only the supervisor, which forwards exactly one SIGTERM. Without
    this every child got the signal twice (directly, then forwarded) and the second one forces
    an immediate release instead of a drain. The supervisor's handlers are reset (the stop
    signals stay blocked until the worker installs its own, see ``_spawn``), and the child asks for
    SIGTERM if the supervisor dies (Linux)."""
    os.setpgid(0, 0)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the supervisor's own stop still reaches us
        pass
    if os.getppid() != supervisor:  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


_PR_SET_PDEATHSIG = 1


def _describe(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"code {code}"
