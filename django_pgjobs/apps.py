from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class PgJobsConfig(AppConfig):
    name = "django_pgjobs"
    verbose_name = "Background jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers system checks)

        # Like admin autodiscovery: every installed app's jobs.py registers its handlers, so a
        # worker knows every task name before it claims anything. tasks.py is where Django's
        # tasks framework puts @task functions; importing it registers those that use
        # django_pgjobs.tasks.PgJobsBackend (the backend records each Task it validates).
        autodiscover_modules("jobs", "tasks")
