"""``python -m tests.worker.breaking_claim_loop runjobs ARGS...``: ``runjobs`` whose claim loop
raises ``RuntimeError`` once the file named by ``PGJOBS_TEST_BREAK_CLAIM_LOOP`` exists, standing
for a bug in the claim loop (the exit-code-4 test). Test code only: nothing in django_pgjobs
knows of it; the claim loop's ``_watchdog`` (run on every turn of the loop) is wrapped here."""

from __future__ import annotations

import os
import sys


def main() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    from django.core.management import execute_from_command_line

    from django_pgjobs.worker.claimer import ClaimLoop

    trigger = os.environ["PGJOBS_TEST_BREAK_CLAIM_LOOP"]
    watchdog = ClaimLoop._watchdog

    def breaking_watchdog(self: ClaimLoop) -> bool:
        if os.path.exists(trigger):
            raise RuntimeError("the claim loop broke (test)")
        return watchdog(self)

    ClaimLoop._watchdog = breaking_watchdog  # type: ignore[method-assign]
    execute_from_command_line(["manage.py", *sys.argv[1:]])


if __name__ == "__main__":
    main()
