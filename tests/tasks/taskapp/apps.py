from __future__ import annotations

import os
from typing import Any

from django.apps import AppConfig


class TaskAppConfig(AppConfig):
    """The @task functions of the backend tests (tasks.py, autodiscovered like a user's app).

    With ``PGJOBS_TEST_TASK_SIGNALS=1`` in the environment (set for the worker processes of the
    signal tests) every task signal is written to the ``test_executions`` table, so a test can read
    what a worker process sent."""

    name = "tests.tasks.taskapp"
    label = "tasks_taskapp"

    def ready(self) -> None:
        if os.environ.get("PGJOBS_TEST_TASK_SIGNALS") != "1":
            return
        from django_pgjobs.tasks.compat import task_enqueued, task_finished, task_started

        def recorder(name: str) -> Any:
            def receive(sender: type, task_result: Any, **kwargs: Any) -> None:
                import sys

                from tests.tasks.taskapp.tasks import record_row

                exc = sys.exc_info()[1]
                value = (
                    f"{name}|{sender.__name__}|{task_result.task.name}|{task_result.status}|"
                    f"{task_result.attempts}|{len(task_result.errors)}|{type(exc).__name__ if exc else ''}"
                )
                record_row("signal", int(task_result.id), value)
                if name == "finished" and task_result.task.name == "breaks_finished_receiver":
                    raise RuntimeError("a task_finished receiver that raises")

            return receive

        # weak=False: the closures would otherwise be collected at once.
        task_enqueued.connect(recorder("enqueued"), weak=False)
        task_started.connect(recorder("started"), weak=False)
        task_finished.connect(recorder("finished"), weak=False)
