"""``python -m tests.worker.early_stop``: a real :class:`Supervisor` with one child that is stopped
before it has installed a worker's signal handlers, as when a service is stopped just after the
supervisor replaced a child. The child asks the supervisor to stop (which forwards SIGTERM to it),
waits until that SIGTERM has reached it, and only then installs handlers the way a worker does
(``relay_signals``). Prints the supervisor's exit code and what the child's handler saw.

Before the stop signals were held across the fork the child died of that SIGTERM (the default
action) and the supervisor exited 1 for a child that ended badly."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time

import django
from django.conf import settings

settings.configure(DATABASES={}, INSTALLED_APPS=[])
django.setup()

from django_pgjobs.stop_signals import relay_signals  # noqa: E402
from django_pgjobs.supervisor import Supervisor  # noqa: E402

REPORT = os.path.join(tempfile.mkdtemp(prefix="pgjobs-early-stop-"), "child")


def child(slot: int) -> int:
    os.kill(os.getppid(), signal.SIGTERM)  # the service is stopped: the supervisor forwards it
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if signal.SIGTERM in signal.sigpending():  # it reached us, held
            break
        time.sleep(0.01)
    else:
        with open(REPORT, "w") as f:
            f.write("the forwarded SIGTERM never arrived")
        return 2
    seen: list[int] = []
    relay_signals(seen.append)  # what Worker.run does first
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    with open(REPORT, "w") as f:
        f.write(f"handler saw {[signal.Signals(s).name for s in seen]}")
    return 0 if seen == [signal.SIGTERM] else 3


def main() -> int:
    code = Supervisor(1, child, shutdown_timeout=5.0).run()
    try:
        with open(REPORT) as f:
            seen = f.read()
    except FileNotFoundError:
        seen = "no report: the child died before installing its handlers"
    print(f"supervisor exited {code}; {seen}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
