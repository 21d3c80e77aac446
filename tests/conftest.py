from __future__ import annotations

import pytest
from django.db import connection


@pytest.fixture
def jobs_table_is_empty() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pgjobs_job")
        assert cursor.fetchone()[0] == 0
