"""Bulk plumbing for admin actions: keyset batches over a queryset, fast counts, log entries.

Nothing here changes a job: batches of ids are handed to the JobManager methods, each call one short
statement (its own transaction outside ``ATOMIC_REQUESTS``), so 100,000 rows never become one giant
UPDATE or one long-held lock set.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import Model, QuerySet

from ..conf import get_settings
from ..models import Status

#: Ids listed by name in a log entry's change message before "... and N more".
LOG_IDS_SHOWN = 50


def id_batches(queryset: QuerySet, size: int | None = None) -> Iterator[list[tuple[int, str]]]:
    """``(id, status)`` pairs of ``queryset`` in ascending id batches of ``size`` (keyset pagination).

    Each batch is a fresh ``WHERE id > last ORDER BY id LIMIT size`` query, so rows that leave the
    filter while we work (a retried dead letter) neither shift nor repeat later batches.
    """
    size = size or get_settings().BATCH_SIZE
    base = queryset.order_by("pk").values_list("pk", "status")
    # A search across related lookups may make the changelist queryset DISTINCT; ids stay unique.
    last: int | None = None
    while True:
        page = base if last is None else base.filter(pk__gt=last)
        rows = list(page[:size])
        if not rows:
            return
        yield rows
        last = rows[-1][0]


@dataclass
class BulkOutcome:
    changed: list[int] = field(default_factory=list)
    running: int = 0  # selected jobs skipped because a worker holds them
    other: int = 0  # selected jobs in a state the action does not apply to
    total: int = 0
    #: Running jobs the operation did act on (Cancel asks them to stop); also in ``changed``.
    running_changed: int = 0


def run_in_batches(
    queryset: QuerySet, operation: Callable[[list[int]], list[int]], *, size: int | None = None
) -> BulkOutcome:
    """Apply a manager ``operation(ids) -> changed ids`` to every job of ``queryset``, batch by batch."""
    outcome = BulkOutcome()
    for rows in id_batches(queryset, size):
        ids = [pk for pk, _ in rows]
        running_ids = {pk for pk, status in rows if status == Status.RUNNING}
        changed = operation(ids)
        acted_on_running = len(running_ids.intersection(changed))
        outcome.total += len(ids)
        outcome.running += len(running_ids) - acted_on_running
        outcome.running_changed += acted_on_running
        outcome.other += len(ids) - len(changed) - (len(running_ids) - acted_on_running)
        outcome.changed.extend(changed)
    # A job can turn running between our read and the manager's write: it counts as running then.
    outcome.other = max(outcome.other, 0)
    return outcome


def describe_ids(ids: list[int]) -> str:
    shown = ", ".join(f"#{i}" for i in ids[:LOG_IDS_SHOWN])
    more = len(ids) - LOG_IDS_SHOWN
    return f"{shown} and {more} more" if more > 0 else shown


def log_bulk_action(
    user_id: Any, model: type[Model], action_flag: int, verb: str, ids: list[int]
) -> LogEntry | None:
    """One admin LogEntry per action: who (user), what (verb + ids) and how many.

    Written directly (not ``log_action``, deprecated in 5.1 and gone in 6.0; not ``log_actions``,
    which would need one row per job) so a 100,000-job retry costs one row.
    """
    if not ids:
        return None
    noun = "job" if len(ids) == 1 else "jobs"
    message = f"{verb} {len(ids)} {noun}: {describe_ids(ids)}"
    return LogEntry.objects.create(
        user_id=user_id,
        content_type=ContentType.objects.get_for_model(model, for_concrete_model=False),
        object_id=str(ids[0]) if len(ids) == 1 else None,
        object_repr=(f"job #{ids[0]}" if len(ids) == 1 else f"{len(ids)} jobs")[:200],
        action_flag=action_flag,
        # A plain-text change message (not the JSON form): LogEntry shows it verbatim.
        change_message=message,
    )


class FastCountPaginator(Paginator):
    """Counts exactly up to ``exact_limit`` rows, then uses PostgreSQL's planner estimate.

    The changelist never runs a full ``COUNT(*)`` over a million rows: ``SELECT count(*) FROM
    (SELECT ... LIMIT 10001)`` stops early, and past it ``EXPLAIN`` gives the estimated row count.
    Bulk actions on "all N" re-count exactly on their confirmation page.
    """

    exact_limit = 10_000
    estimated = False

    @cached_property
    def count(self) -> int:
        qs = self.object_list
        if not isinstance(qs, QuerySet):
            return super().count
        exact = qs.order_by()[: self.exact_limit + 1].count()
        if exact <= self.exact_limit:
            return exact
        self.estimated = True
        return max(exact, planner_estimate(qs))


def planner_estimate(queryset: QuerySet) -> int:
    """PostgreSQL's estimated row count for ``queryset`` (cheap: no rows are read)."""
    compiler = queryset.order_by().values("pk").query.get_compiler(using=queryset.db)
    statement, params = compiler.as_sql()
    with connections[queryset.db].cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + statement, params)
        plan: Any = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])
