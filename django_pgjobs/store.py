"""The only writer of job rows: every statement that changes a job's state, and the code that runs it.

``Job.objects`` (:mod:`django_pgjobs.managers`) is the Python face of this module; the worker, the
sweeper, the admin and the public ``enqueue`` API all come through it. ORM writes on jobs refuse
(:class:`~django_pgjobs.exceptions.DirectWriteRefused`), so what is written here is all that is
ever written. ``docs/architecture.md`` draws the states and transitions.

The fence. Every claim writes a fresh ``claim_token`` from the sequence
``pgjobs_job_claim_token_seq``; a token is never handed out twice, whatever happens to attempt
numbers or worker ids (an operator retry, two processes both started as ``--worker-id pod-0``).
Every write after the claim (complete, fail, heartbeat, release) matches only a row that is still
``running`` *with that token*. A worker that lost its lease (frozen, partitioned, presumed dead)
therefore cannot overwrite the outcome of whoever holds the job now: its write matches nothing,
and it learns that from the empty ``RETURNING``.

How statements run. Each is one round trip on the Django connection of ``PGJOBS["DATABASE"]``: in
autocommit it is its own short transaction; inside the caller's ``transaction.atomic()`` it joins
it (an enqueue commits or rolls back with the data it is about). They use psycopg's server-side
binding and, from their second run on a connection, prepared statements where that is safe (see
:class:`_Preparing`): parsing and planning these statements cost about as much as running them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import weakref
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import psycopg
from django.db import connections, transaction
from django.db.backends.postgresql.psycopg_any import register_tzloader
from psycopg.pq import Format

from .conf import get_settings
from .exceptions import IdempotencyConflict, InvalidJob, PgJobsError
from .notify import notifier
from .validation import MAX_DELAY_SECONDS, MAX_INT, MAX_LAST_ERROR, NewJob, job_parameters

if TYPE_CHECKING:
    from .models import Job

#: An enqueue wakes no worker while a ready job of its queue has waited this long (see ENQUEUE).
BACKLOG_SECONDS = 0.1
#: Advisory lock key for "one sweeper at a time" (a stable 32-bit hash of the name).
SWEEP_LOCK_KEY = zlib.crc32(b"django_pgjobs.sweep")
CLAIM_TOKEN_SEQUENCE = "pgjobs_job_claim_token_seq"
_TIMESTAMPTZ_OID = psycopg.adapters.types["timestamptz"].oid

#: Every column, in model order, for statements that hand back a whole row (edit, a duplicate).
JOB_COLUMNS = (
    "id",
    "task",
    "queue",
    "payload",
    "status",
    "priority",
    "attempts",
    "max_attempts",
    "run_at",
    "claim_token",
    "locked_at",
    "locked_by",
    "lease_expires_at",
    "idempotency_key",
    "last_error",
    "result",
    "history",
    "started_at",
    "finished_at",
    "cancel_requested_at",
    "cancel_requested_by",
    "snoozes",
    "created_at",
    "updated_at",
)
_RETURNING = ", ".join(f"j.{c}" for c in JOB_COLUMNS)
_JSON_COLUMNS = frozenset({"payload", "result", "history"})


# -- the attempt history ------------------------------------------------------------------------
# An entry for the attempt that is ending, built from the row's own (pre-update) values: which
# attempt, which worker, when it started, when and how it ended. At HISTORY_LIMIT entries the
# oldest is dropped (jsonb ``- 0``) before appending, so the list stays bounded.
def history_append(
    outcome: str, error_class: str = "NULL", message: str = "NULL", traceback: str = "NULL"
) -> str:
    return f"""
    CASE WHEN jsonb_array_length(j.history) >= %(history_limit)s::int THEN j.history - 0
         ELSE j.history END
    || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
        'attempt', j.attempts,
        'worker', j.locked_by,
        'started_at', j.started_at,
        'finished_at', now(),
        'outcome', {outcome}::text,
        'error_class', {error_class}::text,
        'message', {message}::text,
        'traceback', {traceback}::text)))"""


_NOTE = history_append("%(outcome)s", message="%(message)s")  # operator actions and recoveries
_UNLEASED = "locked_by = NULL, locked_at = NULL, lease_expires_at = NULL"
# The fence's "still running" for statements that look rows up by id (complete, fail, heartbeat,
# release), which also say ``j.id = ANY(ids)``: one primary-key probe per row is what they need.
# Spelt so that the running index cannot serve it: with statistics from before a backlog was
# claimed (zero running jobs estimated) the planner otherwise scanned every running job of the
# fleet and hash-joined them, per statement (5,000 running jobs: 2 ms per 100 completions, against
# 0.9 ms by primary key).
_STILL_RUNNING = "(j.status = 'running') IS TRUE"

# -- enqueue ------------------------------------------------------------------------------------
# Invariant 5: one idempotency key, one row, and its payload never silently changes. ON CONFLICT
# against the unique index is race-free under concurrency (no check-then-insert). DO NOTHING, not
# DO UPDATE: an update would row-lock the *existing* job until the caller's transaction ends, and a
# view that re-enqueued a running job's key and then took 6 s held up that worker's heartbeat
# long enough for an unrelated lease to lapse. A duplicate is read back instead (ENQUEUE_EXISTING).
# A job due now is ``ready``; one due later is ``scheduled`` and out of the claim index until
# PROMOTE moves it. Times come from statement_timestamp(): now() is the start of the caller's
# transaction, which may be long before this statement.
#
# The last column says whether to wake the queue's workers: not when a ready job of the queue has
# already waited BACKLOG_SECONDS (its workers are all busy, paused or absent, and will claim without
# being told; a notification would only cost a transaction on PostgreSQL's notification queue lock,
# which 16 enqueuing processes felt as a third of their speed). An idle worker is still woken by
# the first job of a quiet queue. One probe of the queue's claim index, oldest due first within a
# priority.
ENQUEUE = """
INSERT INTO pgjobs_job AS j
    (task, queue, payload, status, priority, attempts, max_attempts, run_at, idempotency_key,
     history, created_at, updated_at)
SELECT %(task)s::text, %(queue)s::text, %(payload)s::jsonb,
       CASE WHEN t.due <= statement_timestamp() THEN 'ready' ELSE 'scheduled' END,
       %(priority)s::smallint, 0, %(max_attempts)s::int, t.due, %(idempotency_key)s::text,
       '[]'::jsonb, statement_timestamp(), statement_timestamp()
FROM (SELECT COALESCE(%(run_at)s::timestamptz,
                      statement_timestamp() + make_interval(secs => %(delay)s::float8)) AS due) AS t
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING j.id, j.status, j.run_at, j.created_at,
          j.status = 'ready' AND NOT EXISTS (
              SELECT 1 FROM pgjobs_job AS o
              WHERE o.status = 'ready' AND o.queue = j.queue
                AND o.run_at < statement_timestamp() - make_interval(secs => %(backlog)s::float8))
"""

# The job that holds a key, and whether it is the same task and payload (jsonb equality: object
# key order does not matter). Reads, never locks.
ENQUEUE_EXISTING = f"""
SELECT j.task = %(task)s::text AND j.payload = %(payload)s::jsonb, {_RETURNING}
FROM pgjobs_job AS j WHERE j.idempotency_key = %(idempotency_key)s::text
"""

# Bulk enqueue: one statement per batch. Ids are drawn up front in input order (volatile functions
# in a select list run after its ORDER BY), so the key-less rows' ids map back to input positions;
# keyed rows map back by key. Duplicate keys inside one batch are folded by the caller first.
ENQUEUE_MANY = """
WITH input AS (
    SELECT nextval((SELECT pg_get_serial_sequence('pgjobs_job', 'id'))::regclass) AS new_id,
           t.*, COALESCE(t.at, statement_timestamp() + make_interval(secs => t.delay)) AS due
    FROM unnest(%(tasks)s::text[], %(queues)s::text[], %(payloads)s::jsonb[],
                %(priorities)s::smallint[], %(max_attempts)s::int[], %(run_ats)s::timestamptz[],
                %(delays)s::float8[], %(keys)s::text[])
         WITH ORDINALITY AS t(task, queue, payload, priority, max_attempts, at, delay,
                              idempotency_key, ord)
    ORDER BY t.ord
)
INSERT INTO pgjobs_job AS j
    (id, task, queue, payload, status, priority, attempts, max_attempts, run_at,
     idempotency_key, history, created_at, updated_at)
SELECT new_id, task, queue, payload,
       CASE WHEN due <= statement_timestamp() THEN 'ready' ELSE 'scheduled' END,
       priority, 0, max_attempts, due, idempotency_key, '[]'::jsonb,
       statement_timestamp(), statement_timestamp()
FROM input ORDER BY ord
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING j.id, j.idempotency_key, j.queue, j.status
"""

# The jobs already holding some of a batch's keys, each compared with what the batch asked for.
ENQUEUE_MANY_EXISTING = """
SELECT e.idempotency_key, j.id, j.task = e.task AND j.payload = e.payload
FROM unnest(%(keys)s::text[], %(tasks)s::text[], %(payloads)s::jsonb[])
     AS e(idempotency_key, task, payload)
JOIN pgjobs_job AS j ON j.idempotency_key = e.idempotency_key
"""

# -- promotion ----------------------------------------------------------------------------------
# Scheduled jobs that fell due become ready, oldest due first, in bounded batches. Until then they
# are in no claim index, so an empty claim reads a handful of buffers however many jobs wait for
# tomorrow. Workers run this every poll interval (and as soon as a job they know of falls due);
# concurrent promoters split the work (SKIP LOCKED). It also answers when the next job is due,
# unless the batch was full (then more are due now, and finding "the next" would walk them all).
PROMOTE = """
WITH due AS MATERIALIZED (
    SELECT id FROM pgjobs_job
    WHERE status = 'scheduled' AND run_at <= now()
    ORDER BY run_at
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
), promoted AS (
    UPDATE pgjobs_job AS j SET status = 'ready', updated_at = now()
    FROM due WHERE j.id = due.id AND j.status = 'scheduled'
    RETURNING j.queue
)
SELECT (SELECT count(*) FROM promoted),
       (SELECT coalesce(array_agg(DISTINCT queue), '{}') FROM promoted),
       CASE WHEN (SELECT count(*) FROM promoted) < %(limit)s::int THEN
           (SELECT run_at FROM pgjobs_job WHERE status = 'scheduled' AND run_at > now()
            ORDER BY run_at LIMIT 1)
       END
"""

# -- claim --------------------------------------------------------------------------------------
# Invariants 1 and 2. SKIP LOCKED makes concurrent workers take different rows instead of queueing
# on one; the candidate CTE is MATERIALIZED so the LIMIT really bounds the rows locked (an inlined
# sub-select can become a join that locks and updates more than asked). The statement runs in
# autocommit: the row lock lives only for this statement, and from then on the ``running`` status,
# the claim token and the lease protect the job. Priority runs higher first (as in django.tasks),
# then oldest due first. Three forms, each walking a partial index in its exact order.
_CLAIM = f"""
WITH candidate AS MATERIALIZED (
    {{candidates}}
)
UPDATE pgjobs_job AS j
SET status = 'running',
    attempts = j.attempts + 1,
    claim_token = nextval('{CLAIM_TOKEN_SEQUENCE}'),
    locked_by = %(worker)s::text,
    locked_at = now(),
    lease_expires_at = now() + make_interval(secs => %(lease)s::float8),
    started_at = now(),
    finished_at = NULL,
    updated_at = now()
FROM candidate
WHERE j.id = candidate.id
RETURNING j.id, j.claim_token, j.task, j.queue, j.priority, extract(epoch FROM j.run_at)::float8,
          j.attempts, j.max_attempts, j.idempotency_key, j.payload
"""
CLAIM_ANY = _CLAIM.format(
    candidates="""SELECT id FROM pgjobs_job
    WHERE status = 'ready'
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED"""
)
CLAIM_QUEUE = _CLAIM.format(
    candidates="""SELECT id FROM pgjobs_job
    WHERE status = 'ready' AND queue = %(queue)s::text
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED"""
)
# Several queues, each with its own quota (``runjobs -q mail:4 -q webhooks:8``): the best
# ``quota`` of each queue, merged by priority across queues, the best ``limit`` of those taken. Rows
# a queue's branch locked but the merge left out are unlocked when the statement ends.
CLAIM_QUEUES = _CLAIM.format(
    candidates="""SELECT c.id
    FROM unnest(%(queues)s::text[], %(quotas)s::int[]) AS q(name, quota)
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at FROM pgjobs_job
        WHERE status = 'ready' AND queue = q.name
        ORDER BY priority DESC, run_at, id
        LIMIT q.quota
        FOR UPDATE SKIP LOCKED
    ) AS c
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT %(limit)s::int"""
)

# The queues that have ready jobs, less the paused ones, by a loose scan of the claim index (one
# probe per queue): what a worker serving every queue claims from while some queue is paused
# (CLAIM_ANY cannot skip a paused queue's jobs without walking them).
READY_QUEUES = """
WITH RECURSIVE t(q) AS (
    (SELECT queue FROM pgjobs_job WHERE status = 'ready' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT queue FROM pgjobs_job WHERE status = 'ready' AND queue > t.q ORDER BY queue LIMIT 1)
    FROM t WHERE t.q IS NOT NULL
)
SELECT q FROM t WHERE q IS NOT NULL AND NOT (q = ANY(%(paused)s::text[]))
"""

# -- outcomes -----------------------------------------------------------------------------------
# Written in batches (one statement for every outcome a worker has ready). The fence per row is
# ``claim_token = ANY(tokens)``: a token is written into the row of the one job it was drawn for,
# by the one claim that drew it, so a row holding one of the batch's tokens is exactly that claim's.
# Per-row values are found by the row's token (``_BY_TOKEN``), not by joining the arrays, and the
# rows by primary key (``j.id = ANY(ids)``): a join let the planner pick a scan of every running
# job of the fleet per statement.
_FENCED = f"j.id = ANY(%(ids)s::bigint[]) AND j.claim_token = ANY(%(tokens)s::bigint[]) AND {_STILL_RUNNING}"


def _by_token(array: str) -> str:
    return f"({array})[array_position(%(tokens)s::bigint[], j.claim_token)]"


# A job asked to stop (``cancel_requested_at``) whose handler ran to its end anyway is recorded as
# cancelled after finishing (its result kept): it is never retried, and the row, not the worker's
# memory, says whether the request came (a request that reached the row after the worker's last
# heartbeat still counts).
_CANCEL_ASKED = "j.cancel_requested_at IS NOT NULL"
_CANCELLED_BY = "'cancelled by ' || coalesce(j.cancel_requested_by, 'an operator')"
COMPLETE = f"""
UPDATE pgjobs_job AS j
SET status = CASE WHEN {_CANCEL_ASKED} THEN 'cancelled' ELSE 'done' END,
    result = {_by_token("%(results)s::jsonb[]")},
    finished_at = now(),
    last_error = CASE WHEN {_CANCEL_ASKED} THEN {_CANCELLED_BY} || ' (after finishing)' ELSE j.last_error END,
    history = {
    history_append(
        f"CASE WHEN {_CANCEL_ASKED} THEN 'cancelled after finishing' ELSE 'done' END",
        message=f"CASE WHEN {_CANCEL_ASKED} THEN {_CANCELLED_BY} END",
    )
},
    {_UNLEASED},
    updated_at = now()
WHERE {_FENCED}
RETURNING j.claim_token, j.status
"""

# Invariant 4: the next run time is written into the row. A NULL delay means the backoff policy gave
# up; attempts >= max_attempts means the budget is spent: either way the job goes dead. A retry due
# now goes to the back of the ready line (so a job failing in a tight loop cannot starve others);
# one due later waits as ``scheduled``.
# A failure of a job asked to stop, or one that raised JobCancelled (``cancels``), ends cancelled:
# never retried.
_DELAY = _by_token("%(delays)s::float8[]")
_CANCELS = f"({_CANCEL_ASKED} OR {_by_token('%(cancels)s::bool[]')})"
_GIVE_UP = f"({_DELAY} IS NULL OR j.attempts >= j.max_attempts)"
FAIL = f"""
UPDATE pgjobs_job AS j
SET status = CASE WHEN {_CANCELS} THEN 'cancelled' WHEN {_GIVE_UP} THEN 'dead'
                  WHEN {_DELAY} <= 0 THEN 'ready' ELSE 'scheduled' END,
    run_at = CASE WHEN {_CANCELS} OR {_GIVE_UP} THEN j.run_at
                  ELSE now() + make_interval(secs => {_DELAY}) END,
    finished_at = CASE WHEN {_CANCELS} OR {_GIVE_UP} THEN now() END,
    last_error = CASE WHEN {_CANCEL_ASKED} THEN {_CANCELLED_BY} || ': ' ELSE '' END
                 || {_by_token("%(summaries)s::text[]")},
    history = {
    history_append(
        f"CASE WHEN {_CANCELS} THEN 'cancelled' ELSE 'failed' END",
        _by_token("%(error_classes)s::text[]"),
        _by_token("%(messages)s::text[]"),
        _by_token("%(tracebacks)s::text[]"),
    )
},
    {_UNLEASED},
    updated_at = now()
WHERE {_FENCED}
RETURNING j.claim_token, j.status, j.run_at, j.queue
"""

# A handler raised Snooze(seconds): run again later without spending the attempt. As a release,
# the attempt number stays used and the budget grows by one, so attempt numbers never repeat; the
# snooze count grows too, and past ``max_snoozes`` the job goes dead (a bug that always snoozes must
# not loop for ever). A job asked to stop is cancelled instead.
_SNOOZE_DELAY = _by_token("%(delays)s::float8[]")
_TOO_MANY_SNOOZES = "j.snoozes >= %(max_snoozes)s::int"
SNOOZE = f"""
UPDATE pgjobs_job AS j
SET status = CASE WHEN {_CANCEL_ASKED} THEN 'cancelled' WHEN {_TOO_MANY_SNOOZES} THEN 'dead'
                  WHEN {_SNOOZE_DELAY} <= 0 THEN 'ready' ELSE 'scheduled' END,
    run_at = CASE WHEN {_CANCEL_ASKED} OR {_TOO_MANY_SNOOZES} THEN j.run_at
                  ELSE now() + make_interval(secs => {_SNOOZE_DELAY}) END,
    finished_at = CASE WHEN {_CANCEL_ASKED} OR {_TOO_MANY_SNOOZES} THEN now() END,
    max_attempts = CASE WHEN {_CANCEL_ASKED} OR {_TOO_MANY_SNOOZES} OR j.max_attempts >= {MAX_INT}
                        THEN j.max_attempts ELSE j.max_attempts + 1 END,
    snoozes = j.snoozes + 1,
    last_error = CASE WHEN {_CANCEL_ASKED} THEN {_CANCELLED_BY}
                      WHEN {_TOO_MANY_SNOOZES} THEN 'snoozed more than ' || %(max_snoozes)s::int
                           || ' times (PGJOBS[''MAX_SNOOZES'']): a handler that always snoozes is a bug'
                      ELSE j.last_error END,
    history = {
    history_append(
        f"CASE WHEN {_CANCEL_ASKED} THEN 'cancelled' WHEN {_TOO_MANY_SNOOZES} THEN 'dead' ELSE 'snoozed' END",
        message="'snoozed for ' || " + _SNOOZE_DELAY + " || 's'",
    )
},
    {_UNLEASED},
    updated_at = now()
WHERE {_FENCED}
RETURNING j.claim_token, j.status, j.queue
"""

# Invariant 3, live side: a worker that is alive keeps its jobs by pushing their leases forward.
# Only lease_expires_at changes, and it is in no index or index predicate: a heartbeat is a HOT
# update that writes no index entry. Rows another session has locked are skipped rather than
# waited for (one locked row must not hold up the leases of every other job of the worker); they
# come back as ``held`` but not ``extended``, and the next beat tries them again. A token missing
# from ``held`` is no longer its claim's: lost. Each beat also says which held jobs were asked to
# stop (how a running job's worker learns of a cancel).
HEARTBEAT = f"""
WITH held AS (
    SELECT j.claim_token AS token, j.cancel_requested_by AS cancel_by, {_CANCEL_ASKED} AS cancel
    FROM pgjobs_job AS j WHERE {_FENCED}
), locked AS MATERIALIZED (
    SELECT j.id FROM pgjobs_job AS j WHERE {_FENCED}
    FOR UPDATE OF j SKIP LOCKED
), extended AS (
    UPDATE pgjobs_job AS j
    SET lease_expires_at = now() + make_interval(secs => {_by_token("%(leases)s::float8[]")})
    FROM locked WHERE j.id = locked.id
    RETURNING j.claim_token AS token
)
SELECT held.token, extended.token IS NOT NULL, held.cancel, held.cancel_by
FROM held LEFT JOIN extended USING (token)
"""

# Hand claimed jobs back without charging their attempt (graceful shutdown, a claim whose reply
# was lost): the attempt number stays used, the budget grows by one instead, so attempt numbers
# never repeat. run_at is kept, so the job keeps its place in line.
_RELEASED = f"""
SET status = CASE WHEN {_CANCEL_ASKED} THEN 'cancelled' ELSE 'ready' END,
    finished_at = CASE WHEN {_CANCEL_ASKED} THEN now() END,
    max_attempts = CASE WHEN j.max_attempts < {MAX_INT} THEN j.max_attempts + 1 ELSE j.max_attempts END,
    history = {_NOTE},
    {_UNLEASED}, started_at = NULL,
    updated_at = now()"""
RELEASE = f"""
UPDATE pgjobs_job AS j {_RELEASED}
WHERE {_FENCED}
RETURNING j.id, j.queue, j.status
"""
# After a claim statement failed in flight (it may have committed while its reply was lost): the
# rows this worker holds whose tokens it does not know. ``worker`` names one process incarnation
# (see Worker.name), never another process that shares its --worker-id.
RELEASE_UNKNOWN = f"""
UPDATE pgjobs_job AS j {_RELEASED}
WHERE j.status = 'running' AND j.locked_by = %(worker)s::text
  AND NOT (j.claim_token = ANY(%(known)s::bigint[]))
RETURNING j.id, j.queue, j.status
"""

# -- recovery -----------------------------------------------------------------------------------
# Invariant 3, dead side: a running job whose lease lapsed belongs to nobody. Back to ready, keeping
# its run_at and so its place in line (it does not queue behind everything enqueued since), or dead
# when its attempts are spent: the expired attempt counts, so a job that kills its worker every
# time ends dead instead of looping; one asked to stop (its worker died before it could) ends
# cancelled and does not go back to ready. SKIP LOCKED leaves rows a worker is finishing right now alone;
# the WHERE is re-checked under the row lock, so concurrent sweepers are harmless.
#
# One sweeper at a time, per database: a *transaction*-level advisory lock, taken by the statement
# itself and released when it ends, so it is safe behind PgBouncer's transaction pooling (a session
# lock could outlive its owner there). Efficiency only: the UPDATE is safe concurrently. The answer
# always has a row saying whether this statement got the lock.
SWEEP = f"""
WITH got AS MATERIALIZED (
    SELECT CASE WHEN %(use_lock)s::bool THEN pg_try_advisory_xact_lock(%(key)s::bigint) ELSE true END
           AS locked
), expired AS MATERIALIZED (
    SELECT id FROM pgjobs_job
    WHERE (SELECT locked FROM got) AND status = 'running' AND lease_expires_at < now()
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
), swept AS (
UPDATE pgjobs_job AS j
SET status = CASE WHEN {_CANCEL_ASKED} THEN 'cancelled'
                  WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'ready' END,
    finished_at = CASE WHEN {_CANCEL_ASKED} OR j.attempts >= j.max_attempts THEN now() END,
    last_error = CASE WHEN {_CANCEL_ASKED} THEN {_CANCELLED_BY} || ': ' ELSE '' END
                 || %(message)s::text || ' (worker ' || coalesce(j.locked_by, '?') || ', attempt '
                 || j.attempts || ')',
    history = {_NOTE},
    {_UNLEASED},
    updated_at = now()
FROM expired
WHERE j.id = expired.id AND j.status = 'running' AND j.lease_expires_at < now()
RETURNING j.id, j.status, j.queue
)
SELECT got.locked, swept.id, swept.status, swept.queue FROM got LEFT JOIN swept ON true
"""

# What a dry run of the sweep would touch, without locking or changing anything.
SWEEP_PREVIEW = """
SELECT count(*) FILTER (WHERE attempts < max_attempts AND cancel_requested_at IS NULL),
       count(*) FILTER (WHERE attempts >= max_attempts AND cancel_requested_at IS NULL),
       count(*) FILTER (WHERE cancel_requested_at IS NOT NULL)
FROM pgjobs_job
WHERE status = 'running' AND lease_expires_at < now()
"""

# The sweep's lock, for tests and tools that want to hold it.
TRY_SWEEP_LOCK = "SELECT pg_try_advisory_xact_lock(%(key)s::bigint)"

# Retention: delete finished jobs in bounded batches; each batch is its own short transaction. The
# literal IN list lets the planner prove the finished index's predicate even for a prepared
# (generic) plan, where ``status = $1`` alone proves nothing.
PRUNE = """
WITH doomed AS MATERIALIZED (
    SELECT id FROM pgjobs_job
    WHERE status = %(status)s::text AND status IN ('done', 'dead', 'cancelled')
      AND finished_at < now() - make_interval(secs => %(age)s::float8)
    ORDER BY finished_at
    LIMIT %(limit)s::int
    FOR UPDATE SKIP LOCKED
)
DELETE FROM pgjobs_job AS j USING doomed WHERE j.id = doomed.id AND j.status = %(status)s::text
RETURNING j.id
"""

# -- operator actions (admin) -------------------------------------------------------------------
# Each matches only the states the action makes sense for; a running job is never touched, so an
# operator can never double-run live work.
#
# Retry keeps the attempt count and the history and grants a fresh budget on top of the attempts
# already made (max_attempts grows), so attempt numbers never repeat. The budget is the handler's
# own max_attempts (``budgets`` by task), else the default.
RETRY = f"""
UPDATE pgjobs_job AS j
SET status = 'ready', run_at = now(), finished_at = NULL, result = NULL,
    cancel_requested_at = NULL, cancel_requested_by = NULL, snoozes = 0,
    max_attempts = LEAST(
        j.attempts::bigint + COALESCE(
            (SELECT b.budget FROM unnest(%(tasks)s::text[], %(budgets)s::int[]) AS b(task, budget)
             WHERE b.task = j.task),
            %(budget)s::int),
        {MAX_INT})::int,
    history = {_NOTE},
    updated_at = now()
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status IN ('dead', 'cancelled')
RETURNING j.id, j.queue
"""

CANCEL = f"""
UPDATE pgjobs_job AS j
SET status = 'cancelled', finished_at = now(), last_error = %(message)s::text,
    history = {_NOTE},
    updated_at = now()
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status IN ('scheduled', 'ready')
RETURNING j.id
"""

# A running job cannot be stopped from here (its handler runs in some worker): it is *asked* to.
# The mark is in no index (a HOT update); its worker reads it at the next heartbeat, or at once on
# the CANCEL_REQUESTED notification, and whatever the run ends with then ends cancelled.
REQUEST_CANCEL = """
UPDATE pgjobs_job AS j
SET cancel_requested_at = now(), cancel_requested_by = %(by)s::text
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status = 'running' AND j.cancel_requested_at IS NULL
RETURNING j.id
"""
#: The payload, on the NOTIFY channel, that makes workers heartbeat at once to learn of a cancel.
CANCEL_REQUESTED = "pgjobs:cancel"

RUN_NOW = """
UPDATE pgjobs_job AS j
SET status = 'ready', run_at = now(), updated_at = now()
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status = 'scheduled'
RETURNING j.id, j.queue
"""

DISCARD = """
DELETE FROM pgjobs_job AS j
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status <> 'running'
RETURNING j.id
"""

# Edit a job that is waiting or failed: never a running one (a worker holds it) nor a done one (what
# ran is history). NULL parameters keep the stored value. A waiting job's state follows its run_at.
EDIT = f"""
UPDATE pgjobs_job AS j
SET payload = COALESCE(%(payload)s::jsonb, j.payload),
    run_at = COALESCE(%(run_at)s::timestamptz, j.run_at),
    priority = COALESCE(%(priority)s::smallint, j.priority),
    max_attempts = COALESCE(%(max_attempts)s::int, j.max_attempts),
    queue = COALESCE(%(queue)s::text, j.queue),
    status = CASE WHEN j.status IN ('scheduled', 'ready') THEN
                      CASE WHEN COALESCE(%(run_at)s::timestamptz, j.run_at) <= now()
                           THEN 'ready' ELSE 'scheduled' END
                  ELSE j.status END,
    updated_at = now()
WHERE j.id = %(id)s::bigint AND j.status IN ('scheduled', 'ready', 'dead', 'cancelled')
RETURNING {_RETURNING}
"""


# -- what statements hand back ------------------------------------------------------------------
class Claim(NamedTuple):
    """A job a worker claimed: what it needs to run it and to fence its outcome. A tuple, not a
    model instance (building a model per claimed row was a visible cost in a busy worker; so was a
    frozen dataclass's ``__init__``), and ``run_at`` as epoch seconds (only compared), not a
    datetime through Django's time-zone-aware loader."""

    id: int
    token: int
    task: str
    queue: str
    priority: int
    run_at: float
    attempt: int
    max_attempts: int
    idempotency_key: str | None
    args: list[Any]
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Enqueued:
    id: int
    created: bool


@dataclass(frozen=True)
class Failure:
    """One failed attempt to record. ``retry_in=None``: the backoff policy gave up."""

    id: int
    token: int
    error_class: str
    message: str
    traceback: str | None
    retry_in: float | None
    #: The handler raised JobCancelled: end cancelled, never retried.
    cancel: bool = False


@dataclass(frozen=True)
class FailureOutcome:
    status: str
    run_at: dt.datetime


@dataclass(frozen=True)
class HeartbeatResult:
    """Claim tokens, by what the beat found."""

    extended: set[int] = field(default_factory=set)
    #: Still this claim's, but row-locked by another session: not extended this time.
    busy: set[int] = field(default_factory=set)
    #: No longer this claim's (swept, finished, released): never beat these again.
    lost: set[int] = field(default_factory=set)
    #: Held jobs asked to stop: claim token -> who asked (None if nobody said).
    cancel_requested: dict[int, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class PromoteResult:
    promoted: int = 0
    queues: frozenset[str] = frozenset()
    #: When the next scheduled job is due (None: none, or unknown because the batch was full).
    next_due: dt.datetime | None = None


@dataclass(frozen=True)
class SweepResult:
    ran: bool  # False when another process held the sweep lock
    to_ready: list[int] = field(default_factory=list)
    to_dead: list[int] = field(default_factory=list)
    #: Asked to stop while their worker was gone: cancelled rather than run again.
    to_cancelled: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class CancelResult:
    #: Waiting jobs, now cancelled.
    cancelled: list[int] = field(default_factory=list)
    #: Running jobs, asked to stop.
    asked: list[int] = field(default_factory=list)

    @property
    def changed(self) -> list[int]:
        return sorted(self.cancelled + self.asked)


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


class _Cursor(psycopg.Cursor):
    """Server-side binding, prepared when :class:`_Preparing` says so (Django's own cursors bind
    on the client and never prepare)."""

    prepare: bool = False

    def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None, **kwargs: Any) -> Any:
        return super().execute(query, params, prepare=self.prepare if prepare is None else prepare, **kwargs)


#: Runs of one statement on one connection before it is prepared. A web request that enqueues once
#: on a fresh connection never pays the extra round trip of preparing; a worker or a long-lived
#: connection prepares its statements on their second run, after which parsing and planning them
#: (about as costly as running them) is skipped.
PREPARE_AFTER = 2
#: psycopg only prepares when a connection has a threshold; Django leaves it None (poolers). This
#: one means "prepare what asks for it, nothing automatically", so the project's own queries on the
#: connection behave exactly as before.
_NEVER_AUTOMATICALLY = 2**31


class _Preparing:
    """Per connection: how often each statement ran, and whether this connection may prepare.

    ``PREPARED_STATEMENTS`` None (the default) decides per connection, the first time a statement
    is due to be prepared: only when the client reached the server directly, i.e. the port it
    connected to is the server's own. A pooler (PgBouncer on 6432, a cloud proxy) in between makes
    them differ, and PgBouncer before 1.21 in transaction mode loses prepared statements between
    transactions. A database entry with ``OPTIONS["prepare_threshold"] = None`` also says no.
    """

    _by_connection: weakref.WeakKeyDictionary[Any, _Preparing] = weakref.WeakKeyDictionary()

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}
        self.allowed: bool | None = None
        self._cursor: _Cursor | None = None
        self._timezone: Any = None

    def cursor(self, wrapper: Any) -> _Cursor:
        """This connection's cursor for the store's statements, made once (they ran thousands of
        times a second, each paying for a new cursor)."""
        if self._cursor is None or self._cursor.closed or self._timezone != wrapper.timezone:
            raw = _Cursor(wrapper.connection)
            # As Django's create_cursor: a TIME_ZONE changed since connecting applies per cursor.
            tzloader = wrapper.connection.adapters.get_loader(_TIMESTAMPTZ_OID, Format.TEXT)
            if wrapper.timezone != tzloader.timezone:
                register_tzloader(wrapper.timezone, raw)
            self._cursor, self._timezone = raw, wrapper.timezone
        return self._cursor

    def drop_cursor(self) -> None:
        cursor, self._cursor = self._cursor, None
        if cursor is not None:
            try:
                cursor.close()
            except Exception:
                pass

    @classmethod
    def of(cls, raw: Any) -> _Preparing:
        found = cls._by_connection.get(raw)
        if found is None:
            found = cls._by_connection[raw] = cls()
        return found

    def decide(self, statement: str, wrapper: Any) -> bool:
        setting = get_settings().PREPARED_STATEMENTS
        if setting is False or self.allowed is False:
            return False
        runs = self.runs[statement] = self.runs.get(statement, 0) + 1
        if runs < PREPARE_AFTER:
            return False
        if self.allowed is None:
            self.allowed = self._allowed(setting, wrapper)
        return self.allowed

    @staticmethod
    def _allowed(setting: bool | None, wrapper: Any) -> bool:
        options = wrapper.settings_dict.get("OPTIONS") or {}
        if "prepare_threshold" in options and options["prepare_threshold"] is None:
            return False
        raw = wrapper.connection
        if setting is None:
            with raw.cursor() as cursor:
                server_port = int(cursor.execute("SELECT current_setting('port')").fetchone()[0])
            if raw.info.port != server_port:
                return False
        if raw.prepare_threshold is None:
            raw.prepare_threshold = _NEVER_AUTOMATICALLY
        return True


@functools.cache
def _attnames() -> tuple[str, ...]:
    from .models import Job

    return tuple(f.attname for f in Job._meta.concrete_fields)


class Store:
    """The state machine's statements on one database alias. ``Job.objects`` builds one per call."""

    def __init__(self, alias: str, *, wrapper: Any = None) -> None:
        self.alias = alias
        #: A private connection (a worker thread's own, see worker.connections); by default the
        #: Django connection of ``alias`` in the calling thread, so statements join its transaction.
        self.wrapper = wrapper

    # -- plumbing ---------------------------------------------------------------------------------
    def _run(self, statement: str, params: Mapping[str, Any]) -> list[tuple]:
        wrapper = self.wrapper or connections[self.alias]
        wrapper.close_if_health_check_failed()
        wrapper.ensure_connection()
        state = _Preparing.of(wrapper.connection)
        with wrapper.wrap_database_errors:
            raw = state.cursor(wrapper)
            # With queries logged (DEBUG, assertNumQueries, the debug toolbar) nothing is prepared:
            # psycopg keeps no query text for a prepared run, and the log would show nothing.
            raw.prepare = not wrapper.queries_logged and state.decide(statement, wrapper)
            # Django's wrapper: its error translation, execute_wrapper() hooks, the query log.
            cursor = wrapper._prepare_cursor(raw)  # type: ignore[union-attr]
        try:
            cursor.execute(statement, params)
            return cursor.fetchall()  # every statement here returns rows (RETURNING or SELECT)
        except Exception as exc:
            state.drop_cursor()
            _explain_prepared_statement_trouble(exc)
            raise

    def run(self, statement: str, params: Mapping[str, Any]) -> list[tuple]:
        """Run a statement of another module that owns its table (the workers registry, paused
        queues) on this store's connection, the same way as the store's own."""
        return self._run(statement, params)

    def _params(self, **extra: Any) -> dict[str, Any]:
        return {"history_limit": get_settings().HISTORY_LIMIT, **extra}

    def _wake(self, queues: Iterable[str]) -> None:
        notifier().wake_after_commit(self.alias, queues)

    def _job_from_row(self, row: Sequence[Any]) -> Job:
        from .models import Job

        values = dict(zip(JOB_COLUMNS, row, strict=True))
        for name in _JSON_COLUMNS:
            if isinstance(values[name], str):
                values[name] = json.loads(values[name])
        names = _attnames()
        return Job.from_db(self.alias, names, [values[n] for n in names])

    # -- enqueue ----------------------------------------------------------------------------------
    def enqueue(self, new: NewJob, *, checked: bool = False) -> tuple[Job, bool]:
        """Insert a job, or return the one that already holds its idempotency key.

        ``checked``: the payload's values were already checked against JSON (``@job`` handlers
        check each argument as they build it). Raises :class:`InvalidJob` (nothing written) and
        :class:`IdempotencyConflict` (the stored job left unchanged).
        """
        params = job_parameters(new, checked=checked)
        params["backlog"] = BACKLOG_SECONDS
        for _ in range(3):
            rows = self._run(ENQUEUE, params)
            if rows:
                job_id, status, run_at, created_at, wake = rows[0]
                if wake:
                    self._wake((params["queue"],))
                return self._new_job(job_id, status, run_at, created_at, params, new.payload), True
            existing = self._run(ENQUEUE_EXISTING, params)
            if existing:
                same, *row = existing[0]
                if not same:
                    raise IdempotencyConflict(params["idempotency_key"], task=params["task"])
                return self._job_from_row(row), False
            # The conflicting job was deleted between the two statements: insert again.
        raise PgJobsError(f"could not enqueue {params['task']!r}: its idempotency key kept changing hands")

    def _new_job(
        self,
        job_id: int,
        status: str,
        run_at: dt.datetime,
        created_at: dt.datetime,
        params: dict[str, Any],
        payload: dict[str, Any],
    ) -> Job:
        """The model instance of a row just inserted, from what was sent (no row decoding)."""
        from .models import Job

        values = {
            "id": job_id,
            "task": params["task"],
            "queue": params["queue"],
            "payload": payload,
            "status": status,
            "priority": params["priority"],
            "attempts": 0,
            "max_attempts": params["max_attempts"],
            "run_at": run_at,
            "claim_token": None,
            "locked_at": None,
            "locked_by": None,
            "lease_expires_at": None,
            "idempotency_key": params["idempotency_key"],
            "last_error": None,
            "result": None,
            "history": [],
            "started_at": None,
            "finished_at": None,
            "cancel_requested_at": None,
            "cancel_requested_by": None,
            "snoozes": 0,
            "created_at": created_at,
            "updated_at": created_at,
        }
        names = _attnames()
        return Job.from_db(self.alias, names, [values[n] for n in names])

    def enqueue_many(self, jobs: Iterable[NewJob], *, batch_size: int = 5000) -> list[Enqueued]:
        """Enqueue many jobs with one statement per batch; results are in input order.

        All-or-nothing: the batches run in one transaction (or the caller's), so a conflict or bad
        input anywhere writes nothing.
        """
        if self.wrapper is not None:
            raise PgJobsError(
                "enqueue_many runs in the caller's transaction: use Job.objects, not a private store"
            )
        prepared = [job_parameters(j) for j in jobs]
        results: list[Enqueued] = []
        with transaction.atomic(using=self.alias):
            for start in range(0, len(prepared), batch_size):
                results.extend(self._enqueue_batch(prepared[start : start + batch_size]))
        return results

    def _enqueue_batch(self, batch: list[dict[str, Any]]) -> list[Enqueued]:
        # Fold repeated keys within the batch: ON CONFLICT DO NOTHING would keep the first and drop
        # the rest silently, but a repeat with a different task or payload is a conflict.
        first_with_key: dict[str, int] = {}
        unique: list[dict[str, Any]] = []
        position: list[int] = []  # input index -> index into `unique`
        for params in batch:
            key = params["idempotency_key"]
            if key is not None and key in first_with_key:
                earlier = unique[first_with_key[key]]
                if (earlier["task"], _canonical(earlier["payload"])) != (
                    params["task"],
                    _canonical(params["payload"]),
                ):
                    raise IdempotencyConflict(key, task=params["task"])
                position.append(first_with_key[key])
                continue
            if key is not None:
                first_with_key[key] = len(unique)
            position.append(len(unique))
            unique.append(params)

        def column(name: str) -> list[Any]:
            return [p[name] for p in unique]

        rows = self._run(
            ENQUEUE_MANY,
            {
                "tasks": column("task"),
                "queues": column("queue"),
                "payloads": column("payload"),
                "priorities": column("priority"),
                "max_attempts": column("max_attempts"),
                "run_ats": column("run_at"),
                "delays": column("delay"),
                "keys": column("idempotency_key"),
            },
        )
        created_by_key = {key: job_id for job_id, key, _, _ in rows if key is not None}
        keyless = iter(sorted(job_id for job_id, key, _, _ in rows if key is None))
        missing = [
            p
            for p in unique
            if p["idempotency_key"] is not None and p["idempotency_key"] not in created_by_key
        ]
        existing: dict[str, int] = {}
        if missing:
            for key, job_id, same in self._run(
                ENQUEUE_MANY_EXISTING,
                {
                    "keys": [p["idempotency_key"] for p in missing],
                    "tasks": [p["task"] for p in missing],
                    "payloads": [p["payload"] for p in missing],
                },
            ):
                if not same:
                    task = next(p["task"] for p in missing if p["idempotency_key"] == key)
                    raise IdempotencyConflict(key, task=task)
                existing[key] = job_id
        outcome: list[Enqueued] = []
        for params in unique:
            key = params["idempotency_key"]
            if key is None:
                outcome.append(Enqueued(int(next(keyless)), True))
            elif key in created_by_key:
                outcome.append(Enqueued(int(created_by_key[key]), True))
            elif key in existing:
                outcome.append(Enqueued(int(existing[key]), False))
            else:  # deleted between the two statements: rare enough to report rather than loop
                raise PgJobsError(f"idempotency key {key!r} changed hands during the enqueue; try again")
        self._wake({queue for _, _, queue, status in rows if status == "ready"})
        seen: set[int] = set()
        ordered: list[Enqueued] = []
        for index in position:  # a key repeated within the batch is a duplicate of its first use
            e = outcome[index]
            ordered.append(Enqueued(e.id, e.created and index not in seen))
            seen.add(index)
        return ordered

    # -- worker side ------------------------------------------------------------------------------
    def promote(self, *, limit: int = 1000) -> PromoteResult:
        """Scheduled jobs that fell due become ready (at most ``limit``); wakes their queues."""
        count, queues, next_due = self._run(PROMOTE, {"limit": limit})[0]
        result = PromoteResult(int(count), frozenset(queues or ()), next_due)
        self._wake(result.queues)
        return result

    def claim(
        self,
        worker: str,
        *,
        limit: int,
        lease: float,
        queues: Sequence[str] | None = None,
        quotas: Mapping[str, int] | None = None,
    ) -> list[Claim]:
        """Claim up to ``limit`` ready jobs, highest priority and oldest due first.

        ``queues=None``: every queue. ``quotas``: at most that many from each named queue (a
        queue missing from ``quotas`` may fill the whole ``limit``).
        """
        if limit < 1:
            return []
        base = {"worker": worker, "lease": float(lease), "limit": int(limit)}
        if not queues:
            rows = self._run(CLAIM_ANY, base)
        elif len(queues) == 1 and (quotas is None or quotas.get(queues[0], limit) >= limit):
            rows = self._run(CLAIM_QUEUE, {**base, "queue": queues[0]})
        else:
            quota = [min(limit, (quotas or {}).get(q, limit)) for q in queues]
            wanted = [(q, n) for q, n in zip(queues, quota, strict=True) if n > 0]
            if not wanted:
                return []
            rows = self._run(
                CLAIM_QUEUES, {**base, "queues": [q for q, _ in wanted], "quotas": [n for _, n in wanted]}
            )
        # UPDATE ... RETURNING hands rows back in no particular order: restore the claim order.
        claims = [_claim_from_row(r) for r in rows]
        claims.sort(key=lambda c: (-c.priority, c.run_at, c.id))  # priority DESC, run_at, id
        return claims

    def ready_queues(self, *, excluding: Iterable[str] = ()) -> list[str]:
        """Queues with ready jobs, except ``excluding`` (paused ones)."""
        return [r[0] for r in self._run(READY_QUEUES, {"paused": list(excluding)})]

    def complete(self, finished: Sequence[tuple[int, int, str]]) -> dict[int, str]:
        """Acknowledge ``(job id, claim token, result as JSON text)`` in one statement; returns the
        claim tokens accepted, each with the status written (``done``, or ``cancelled`` for a job
        asked to stop that finished anyway). A token missing from the answer was refused by the
        fence: its lease lapsed and someone else owns (or already finished) the job."""
        if not finished:
            return {}
        params = self._params(
            ids=[i for i, _, _ in finished],
            tokens=[t for _, t, _ in finished],
            results=[r for _, _, r in finished],
        )
        return {r[0]: r[1] for r in self._run(COMPLETE, params)}

    def fail(self, failures: Sequence[Failure]) -> dict[int, FailureOutcome]:
        """Record failed attempts in one statement; each retries ``retry_in`` seconds from now or
        goes dead. Returns what happened by claim token; tokens missing were refused by the fence."""
        if not failures:
            return {}
        s = get_settings()
        for f in failures:
            if f.retry_in is not None and not (0 <= f.retry_in <= MAX_DELAY_SECONDS):
                raise InvalidJob(f"retry delay must be a finite number >= 0 seconds, got {f.retry_in!r}")
        params = self._params(
            ids=[f.id for f in failures],
            tokens=[f.token for f in failures],
            delays=[None if f.retry_in is None else float(f.retry_in) for f in failures],
            cancels=[f.cancel for f in failures],
            error_classes=[f.error_class for f in failures],
            messages=[f.message[:MAX_LAST_ERROR] for f in failures],
            tracebacks=[_bounded_traceback(f.traceback, s.TRACEBACK_LIMIT) for f in failures],
            summaries=[
                (f"{f.error_class}: {f.message}" if f.message else f.error_class)[:MAX_LAST_ERROR]
                for f in failures
            ],
        )
        rows = self._run(FAIL, params)
        self._wake(r[3] for r in rows if r[1] == "ready")
        return {r[0]: FailureOutcome(status=r[1], run_at=r[2]) for r in rows}

    def snooze(self, snoozed: Sequence[tuple[int, int, float]]) -> dict[int, str]:
        """``(job id, claim token, seconds)``: run these again later without spending the attempt;
        returns the status written by claim token (``scheduled``/``ready``, ``dead`` past
        ``MAX_SNOOZES``, ``cancelled`` if asked to stop); tokens missing were refused by the fence."""
        if not snoozed:
            return {}
        for _, _, seconds in snoozed:
            if not (0 <= seconds <= MAX_DELAY_SECONDS):
                raise InvalidJob(f"snooze must be a finite number >= 0 seconds, got {seconds!r}")
        rows = self._run(
            SNOOZE,
            self._params(
                ids=[i for i, _, _ in snoozed],
                tokens=[t for _, t, _ in snoozed],
                delays=[float(d) for _, _, d in snoozed],
                max_snoozes=get_settings().MAX_SNOOZES,
            ),
        )
        self._wake(r[2] for r in rows if r[1] == "ready")
        return {r[0]: r[1] for r in rows}

    def heartbeat(self, leases: Sequence[tuple[int, int, float]]) -> HeartbeatResult:
        """Extend the leases of ``(job id, claim token, lease seconds)``."""
        if not leases:
            return HeartbeatResult()
        rows = self._run(
            HEARTBEAT,
            {
                "ids": [i for i, _, _ in leases],
                "tokens": [t for _, t, _ in leases],
                "leases": [float(s) for _, _, s in leases],
            },
        )
        held = {r[0]: r[1] for r in rows}
        return HeartbeatResult(
            extended={t for t, ok in held.items() if ok},
            busy={t for t, ok in held.items() if not ok},
            lost={t for _, t, _ in leases if t not in held},
            cancel_requested={r[0]: r[3] for r in rows if r[2]},
        )

    def release(self, jobs: Sequence[tuple[int, int]], reason: str = "released") -> set[int]:
        """Give claimed ``(job id, claim token)`` back to ready without charging the attempt."""
        if not jobs:
            return set()
        rows = self._run(
            RELEASE,
            self._params(
                ids=[i for i, _ in jobs], tokens=[t for _, t in jobs], outcome="released", message=reason
            ),
        )
        self._wake(r[1] for r in rows if r[2] == "ready")
        return {r[0] for r in rows}

    def release_unknown(self, worker: str, known_tokens: Iterable[int], reason: str) -> list[int]:
        """Release what ``worker`` holds under tokens it does not know (a claim whose reply was
        lost), so those jobs run now instead of waiting out their lease and spending an attempt."""
        rows = self._run(
            RELEASE_UNKNOWN,
            self._params(worker=worker, known=list(known_tokens), outcome="released", message=reason),
        )
        self._wake(r[1] for r in rows if r[2] == "ready")
        return sorted(r[0] for r in rows)

    # -- recovery ---------------------------------------------------------------------------------
    def sweep(self, *, limit: int = 1000, lock: bool = True) -> SweepResult:
        """Expired leases back to ready (or dead when attempts are spent), ``limit`` rows at most.

        With ``lock`` only one process per database sweeps at a time (transaction-level advisory
        lock); the others return ``SweepResult(ran=False)`` at once.
        """
        rows = self._run(
            SWEEP,
            self._params(
                limit=limit,
                use_lock=lock,
                key=SWEEP_LOCK_KEY,
                outcome="lease expired",
                message="lease expired",
            ),
        )
        if not rows[0][0]:
            return SweepResult(ran=False)
        self._wake(r[3] for r in rows if r[2] == "ready")
        return SweepResult(
            ran=True,
            to_ready=sorted(r[1] for r in rows if r[2] == "ready"),
            to_dead=sorted(r[1] for r in rows if r[2] == "dead"),
            to_cancelled=sorted(r[1] for r in rows if r[2] == "cancelled"),
        )

    def sweep_preview(self) -> tuple[int, int, int]:
        """(would go ready, would go dead, would be cancelled) for a dry run; changes nothing."""
        row = self._run(SWEEP_PREVIEW, {})[0]
        return int(row[0]), int(row[1]), int(row[2])

    def prune(self, status: str, older_than: float, *, limit: int = 1000) -> int:
        """Delete up to ``limit`` finished jobs in ``status`` finished more than ``older_than`` s ago."""
        if status not in ("done", "dead", "cancelled"):
            raise InvalidJob(f"only done, dead or cancelled jobs can be pruned, not {status!r}")
        return len(self._run(PRUNE, {"status": status, "age": float(older_than), "limit": limit}))

    # -- operator actions -------------------------------------------------------------------------
    def retry(self, ids: Iterable[int], *, by: str | None = None, attempts: int | None = None) -> list[int]:
        """Dead or cancelled jobs back to ready, to run now, with a fresh budget of attempts: the
        handler's ``max_attempts`` (or ``attempts``) on top of those already made."""
        from .registry import registered

        default = get_settings().DEFAULT_MAX_ATTEMPTS if attempts is None else attempts
        budgets = (
            {}
            if attempts is not None
            else {name: h.max_attempts for name, h in registered().items() if h.max_attempts is not None}
        )
        rows = self._run(
            RETRY,
            self._params(
                ids=_ids(ids),
                tasks=list(budgets),
                budgets=list(budgets.values()),
                budget=default,
                outcome="retried",
                message=f"retried by {by}" if by else "retried",
            ),
        )
        self._wake(r[1] for r in rows)
        return sorted(r[0] for r in rows)

    def cancel(self, ids: Iterable[int], *, by: str | None = None) -> CancelResult:
        """Waiting (scheduled or ready) jobs straight to cancelled, with the reason recorded; running
        ones asked to stop (their worker learns it at once by notification, or at its next
        heartbeat). Both in one transaction."""
        wanted = _ids(ids)
        message = f"cancelled by {by}" if by else "cancelled"
        with transaction.atomic(using=self.alias) if self.wrapper is None else _nothing():
            rows = self._run(CANCEL, self._params(ids=wanted, outcome="cancelled", message=message))
            asked = self._run(REQUEST_CANCEL, {"ids": wanted, "by": by or "an operator"})
            if asked:
                self._wake((CANCEL_REQUESTED,))
        return CancelResult(cancelled=sorted(r[0] for r in rows), asked=sorted(r[0] for r in asked))

    def run_now(self, ids: Iterable[int]) -> list[int]:
        """Scheduled jobs become ready, due now."""
        rows = self._run(RUN_NOW, {"ids": _ids(ids)})
        self._wake(r[1] for r in rows)
        return sorted(r[0] for r in rows)

    def discard(self, ids: Iterable[int]) -> list[int]:
        """Delete jobs that are not running; running ones are refused (left alone)."""
        return sorted(r[0] for r in self._run(DISCARD, {"ids": _ids(ids)}))

    def edit(self, job_id: int, changes: dict[str, Any]) -> Job | None:
        """Apply already-validated ``changes`` (None keeps a value); None when the job is running,
        done or gone."""
        rows = self._run(
            EDIT,
            {
                "id": job_id,
                "payload": changes.get("payload"),
                "run_at": changes.get("run_at"),
                "priority": changes.get("priority"),
                "max_attempts": changes.get("max_attempts"),
                "queue": changes.get("queue"),
            },
        )
        if not rows:
            return None
        job = self._job_from_row(rows[0])
        if job.status == "ready":
            self._wake((job.queue,))
        return job


def _claim_from_row(row: Sequence[Any]) -> Claim:
    job_id, token, task, queue, priority, run_at, attempt, max_attempts, key, payload = row
    if isinstance(payload, str):
        payload = json.loads(payload)
    if not isinstance(payload, dict):  # the check constraint does not look inside jsonb
        payload = {"args": [payload], "kwargs": {}}
    return Claim(
        job_id,
        token,
        task,
        queue,
        priority,
        run_at,
        attempt,
        max_attempts,
        key,
        payload.get("args", []),
        payload.get("kwargs", {}),
    )


def _bounded_traceback(traceback: str | None, limit: int) -> str | None:
    """The traceback's last ``limit`` characters (``TRACEBACK_LIMIT``, >= 0 by system check
    ``django_pgjobs.E011``; 0 keeps none), marked when cut. Not ``traceback[-limit:]``: for 0
    that is the whole string."""
    if traceback is not None and len(traceback) > limit:
        return "...(truncated)...\n" + traceback[len(traceback) - max(limit, 0) :]
    return traceback


def _canonical(payload_json: str) -> str:
    """A serialised payload with object keys sorted, so equal JSON objects compare equal."""
    return json.dumps(json.loads(payload_json), sort_keys=True, separators=(",", ":"))


def _ids(ids: Iterable[int]) -> list[int]:
    return [int(i) for i in ids]


def _explain_prepared_statement_trouble(exc: BaseException) -> None:
    """PgBouncer before 1.21 (or with max_prepared_statements = 0) in transaction pooling mode
    loses prepared statements between transactions; say which setting fixes it."""
    cause = exc.__cause__ or exc
    if isinstance(cause, psycopg.errors.InvalidSqlStatementName | psycopg.errors.DuplicatePreparedStatement):
        exc.args = (
            f"{exc} -- prepared statements do not survive this connection pooler: set "
            "PGJOBS['PREPARED_STATEMENTS'] = False (PgBouncer before 1.21 in transaction mode)",
        )
