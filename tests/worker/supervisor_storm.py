"""``python -m tests.worker.supervisor_storm``: the supervisor's sleep loop, with its own signal
handlers installed, under a storm of real SIGCHLDs and SIGTERMs-to-self; prints "survived" when
done. A handler that takes a lock the main thread may hold deadlocks this within seconds."""

from __future__ import annotations

import os
import signal
import threading
import time

import django
from django.conf import settings

settings.configure(DATABASES={}, INSTALLED_APPS=[])
django.setup()

from django_pgjobs.supervisor import Supervisor  # noqa: E402


def main() -> None:
    supervisor = Supervisor(1, lambda slot: 0, shutdown_timeout=1.0)
    supervisor.install_signal_handlers()

    def storm() -> None:  # children that exit at once: a SIGCHLD each
        while True:
            if os.fork() == 0:
                os._exit(0)
            time.sleep(0.0005)

    threading.Thread(target=storm, daemon=True).start()
    for i in range(5000):
        if i % 500 == 0:
            os.kill(os.getpid(), signal.SIGTERM)  # counted, not acted on by the handler itself
        supervisor._sleep(0.001)
        supervisor._reap()
    print(f"survived with {supervisor._signals} stop signals", flush=True)


if __name__ == "__main__":
    main()
