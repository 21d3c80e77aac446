"""Signal handlers take no lock: a supervisor (or worker) whose handler set an Event while its
main thread held that Event's lock waited for itself for ever (found by a full-suite run)."""

from __future__ import annotations

import subprocess
import sys

from tests.processes import ROOT


def test_the_supervisors_handlers_survive_a_storm_of_signals():
    done = subprocess.run(
        [sys.executable, "-m", "tests.worker.supervisor_storm"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,  # a deadlock would hang it: the timeout turns that into a failure
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("survived with 10 stop signals"), done.stdout + done.stderr


def test_a_child_stopped_before_its_handlers_exist_drains_instead_of_dying():
    """A stop that reaches a new worker process before it installed its handlers (systemd stopping
    the service just after a child was replaced) waits for them: the worker drains and exits 0,
    and so does the supervisor (it failed once so in a full-suite run under load)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.worker.early_stop"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "supervisor exited 0; handler saw ['SIGTERM']", done.stdout + done.stderr
