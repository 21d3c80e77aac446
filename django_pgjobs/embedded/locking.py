"""The start lock: an exclusive ``flock`` next to the data directory.

It serialises initdb and start, so two processes starting at once share one server, and the
test watchdog holds it while it stops and removes a test server, so an attached child cannot
restart the server in between. The kernel releases it when its holder dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import DATA_DIR_HINT, EmbeddedPostgresError

#: How often waiting loops (lock, start, stop) look again.
POLL_SECONDS = 0.02


@contextlib.contextmanager
def file_lock(path: Path, timeout: float) -> Iterator[None]:
    """Exclusive ``flock`` with a bounded wait; released by the kernel if we die holding it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        raise EmbeddedPostgresError(f"{path.parent} does not exist (any more)") from None
    except OSError as exc:
        raise EmbeddedPostgresError(f"cannot create the lock file {path}: {exc}; {DATA_DIR_HINT}") from exc
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise EmbeddedPostgresError(
                        f"timed out after {timeout:.0f}s waiting for {path} (another process is "
                        "starting the embedded server)"
                    ) from None
                time.sleep(POLL_SECONDS)
        yield
    finally:
        os.close(fd)
