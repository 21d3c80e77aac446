"""The quickstart demo (``example_project``) as CI runs it: output into a pipe, not a terminal.

It runs on a throwaway embedded server of its own (the example project's development settings,
pointed at that server's data directory), so it never touches the suite's database or a server
named by ``DATABASE_URL``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from django_pgjobs.embedded import server
from tests.processes import ROOT

PROGRESS = re.compile(r"^  scheduled: +(\d+)  ready: +(\d+)  running: +(\d+)  done: +(\d+)  dead: +(\d+)$")
ROW = re.compile(r"^  (shop\.(?:jobs|tasks)\.\w+) +(\d+) +(\d+) +(\d+) +(\d+) +(\d+)$")


def run(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "example_project/manage.py", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,  # a pipe, like CI's log
        stderr=subprocess.STDOUT,
        timeout=300,
        check=False,
    )
    out = result.stdout.decode()  # bytes: text mode would turn "\r" into "\n"
    assert result.returncode == 0, out
    return out


def test_the_demo_writes_plain_lines_into_a_pipe_and_its_last_progress_agrees_with_the_table():
    with server.throwaway_server() as config:
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        env.pop("DJANGO_SETTINGS_MODULE", None)  # manage.py sets the example project's
        env[server.ENV_DATA_DIR] = str(config.data_dir)
        run(env, "migrate", "--noinput", "-v", "0")
        out = run(env, "demo", "--webhooks", "14", "--documents", "12", "--receipts", "2")
    assert "\r" not in out, "carriage returns in a pipe"
    lines = out.splitlines()
    progress = [tuple(map(int, m.groups())) for line in lines if (m := PROGRESS.match(line))]
    rows = [tuple(map(int, m.groups()[1:])) for line in lines if (m := ROW.match(line))]
    assert progress, out
    reports = 1 if "shop.tasks.sales_report" in out else 0  # the django.tasks example, when available
    assert len(rows) == 3 + reports, out
    scheduled, ready, running, done, dead = progress[-1]
    jobs, done_in_table, dead_in_table, left, _attempts = (sum(column) for column in zip(*rows, strict=True))
    assert (done, dead, scheduled + ready + running) == (done_in_table, dead_in_table, left), out
    assert scheduled + ready + running + done + dead == jobs == 14 + 12 + 2 + reports, out
    assert dead > 0 and left == 0, out  # documents over 40 pages end dead; nothing is left over
