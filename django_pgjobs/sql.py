"""Every statement that changes a job's state, in one place.

Each statement is one round trip and names the invariant it protects. Parameters are psycopg
``%(name)s`` placeholders; :mod:`django_pgjobs.managers` is the only caller.

Fencing: every write after the claim matches only rows that are still ``running`` *and* still carry
the worker id and attempt number the claim handed out. A worker that lost its lease (frozen,
partitioned, presumed dead) therefore cannot overwrite the outcome of whoever holds the job now;
its write matches nothing and the caller learns that from the empty ``RETURNING``.
"""

from __future__ import annotations

#: Columns returned to build a :class:`~django_pgjobs.models.Job`, in this order.
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
    "locked_at",
    "locked_by",
    "lease_expires_at",
    "idempotency_key",
    "last_error",
    "result",
    "history",
    "started_at",
    "finished_at",
    "created_at",
    "updated_at",
)
_RETURNING = ", ".join(f"j.{c}" for c in JOB_COLUMNS)

#: What a claim returns: what a worker needs to run the job and fence its outcome. The rest (the
#: history with its tracebacks, the result, six more timestamps) is deferred on the model: decoding
#: it cost about half of a claim's client time on a busy worker, for columns nobody reads there.
_NOT_CLAIMED = frozenset(
    {"locked_at", "last_error", "result", "history", "started_at", "finished_at", "created_at", "updated_at"}
)
CLAIM_COLUMNS = tuple(c for c in JOB_COLUMNS if c not in _NOT_CLAIMED)

# A history entry for the attempt that is ending, built from the row's own (pre-update) values:
# which attempt, which worker, when it started, when and how it ended. ``%(history_limit)s`` keeps the
# list bounded: at the cap the oldest entry is dropped (jsonb ``- 0``) before appending.
_HISTORY_APPEND = """
    CASE WHEN jsonb_array_length(j.history) >= %(history_limit)s THEN j.history - 0
         ELSE j.history END
    || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
        'attempt', j.attempts,
        'worker', j.locked_by,
        'started_at', j.started_at,
        'finished_at', now(),
        'outcome', {outcome},
        'error_class', %(error_class)s::text,
        'message', %(message)s::text,
        'traceback', %(traceback)s::text)))
"""


def history_append(outcome_sql: str) -> str:
    return _HISTORY_APPEND.format(outcome=outcome_sql)


# -- enqueue -------------------------------------------------------------------------------------
# Invariant 5: one idempotency key, one row, and its payload never silently changes.
# ON CONFLICT takes the unique index's lock, so concurrent enqueues of one key are race-free (no
# check-then-insert). The DO UPDATE is a no-op assignment whose only purpose is to make RETURNING
# hand back the existing row; its WHERE refuses a different task/payload, which then returns no row
# and the manager raises IdempotencyConflict. ``xmax = 0`` is true only for a freshly inserted row.
# The notification is sent in the same transaction: a rolled-back enqueue wakes nobody, and
# PostgreSQL folds identical notifications of one transaction into one.
ENQUEUE = f"""
WITH ins AS (
    INSERT INTO pgjobs_job AS j
        (task, queue, payload, status, priority, attempts, max_attempts, run_at,
         idempotency_key, history, created_at, updated_at)
    VALUES
        (%(task)s, %(queue)s, %(payload)s::jsonb, 'ready', %(priority)s, 0, %(max_attempts)s,
         COALESCE(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s)),
         %(idempotency_key)s, '[]'::jsonb, now(), now())
    ON CONFLICT (idempotency_key) DO UPDATE
        SET idempotency_key = EXCLUDED.idempotency_key
        WHERE j.task = EXCLUDED.task AND j.payload = EXCLUDED.payload
    RETURNING {_RETURNING}, (j.xmax = 0) AS created
)
SELECT ins.*,
       CASE WHEN ins.created AND ins.run_at <= now()
            THEN pg_notify(%(channel)s, ins.queue) END IS NULL AS _notified
FROM ins
"""

# Bulk enqueue: one statement per batch. Ids for key-less rows are drawn up front (in input order)
# so each returned row maps back to its input position; keyed rows map back by key (a duplicate key
# returns the existing row's id). Duplicate keys inside one batch are folded by the manager first,
# because ON CONFLICT DO UPDATE may not touch one row twice in a statement.
ENQUEUE_MANY = """
WITH input AS (
    SELECT nextval(pg_get_serial_sequence('pgjobs_job', 'id')) AS new_id, t.*
    FROM unnest(%(tasks)s::text[], %(queues)s::text[], %(payloads)s::jsonb[],
                %(priorities)s::smallint[], %(max_attempts)s::int[], %(run_ats)s::timestamptz[],
                %(delays)s::float8[], %(keys)s::text[])
         WITH ORDINALITY AS t(task, queue, payload, priority, max_attempts, run_at, delay,
                              idempotency_key, ord)
    ORDER BY t.ord
), ins AS (
    INSERT INTO pgjobs_job AS j
        (id, task, queue, payload, status, priority, attempts, max_attempts, run_at,
         idempotency_key, history, created_at, updated_at)
    SELECT new_id, task, queue, payload, 'ready', priority, 0, max_attempts,
           COALESCE(run_at, now() + make_interval(secs => delay)),
           idempotency_key, '[]'::jsonb, now(), now()
    FROM input ORDER BY ord
    ON CONFLICT (idempotency_key) DO UPDATE
        SET idempotency_key = EXCLUDED.idempotency_key
        WHERE j.task = EXCLUDED.task AND j.payload = EXCLUDED.payload
    RETURNING j.id, j.idempotency_key, j.queue, j.run_at, (j.xmax = 0) AS created
), wake AS (
    SELECT DISTINCT queue FROM ins WHERE created AND run_at <= now()
)
SELECT ins.id, ins.idempotency_key, ins.created,
       (SELECT count(pg_notify(%(channel)s, wake.queue)) FROM wake) AS _notified
FROM ins
"""

# -- claim ---------------------------------------------------------------------------------------
# Invariants 1 and 2. SKIP LOCKED makes concurrent workers take different rows instead of queueing
# on one; the candidate CTE is MATERIALIZED so the LIMIT really bounds the rows locked (an inlined
# sub-select can become a join that locks and updates more than asked). The statement runs in
# autocommit: the row lock lives only for this statement, and from then on the ``running`` status,
# worker id, attempt number and lease protect the job. Two forms so each uses a partial index whose
# columns are exactly its ORDER BY: one for named queues, one for "every queue".
_CLAIM = f"""
WITH candidate AS MATERIALIZED (
    SELECT id FROM pgjobs_job
    WHERE status = 'ready' {{queue_filter}} AND run_at <= now()
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE pgjobs_job AS j
SET status = 'running',
    attempts = j.attempts + 1,
    locked_by = %(worker_id)s,
    locked_at = now(),
    lease_expires_at = now() + make_interval(secs => %(lease)s),
    started_at = now(),
    finished_at = NULL,
    updated_at = now()
FROM candidate
WHERE j.id = candidate.id
RETURNING {", ".join(f"j.{c}" for c in CLAIM_COLUMNS)}
"""
CLAIM_QUEUE = _CLAIM.format(queue_filter="AND queue = %(queue)s")
CLAIM_ANY = _CLAIM.format(queue_filter="")

# Per-handler leases: the claim gives every job the worker's default lease; a handler with its own
# ``lease`` gets it at its first heartbeat, which the worker sends as soon as the job starts.

# -- finish --------------------------------------------------------------------------------------
# Completions are acknowledged in batches (one statement for every job a worker finished in the last
# few milliseconds), each row still fenced on its own (id, attempt) and the worker id.
COMPLETE = f"""
UPDATE pgjobs_job AS j
SET status = 'done',
    result = c.result,
    finished_at = now(),
    locked_by = NULL, locked_at = NULL, lease_expires_at = NULL,
    history = {history_append("'done'")},
    updated_at = now()
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(results)s::jsonb[]) AS c(id, attempt, result)
WHERE j.id = c.id AND j.attempts = c.attempt
  AND j.status = 'running' AND j.locked_by = %(worker_id)s
RETURNING j.id
"""

# Invariant 4: the next run time is written into the row. ``%(delay)s`` NULL means the backoff policy
# gave up; attempts >= max_attempts means the budget is spent: either way the job goes dead.
FAIL = f"""
UPDATE pgjobs_job AS j
SET status = CASE WHEN %(delay)s::float8 IS NULL OR j.attempts >= j.max_attempts
                  THEN 'dead' ELSE 'ready' END,
    run_at = CASE WHEN %(delay)s::float8 IS NULL OR j.attempts >= j.max_attempts THEN j.run_at
                  ELSE now() + make_interval(secs => %(delay)s::float8) END,
    finished_at = CASE WHEN %(delay)s::float8 IS NULL OR j.attempts >= j.max_attempts
                       THEN now() END,
    last_error = %(last_error)s,
    locked_by = NULL, locked_at = NULL, lease_expires_at = NULL,
    history = {history_append("'failed'")},
    updated_at = now()
WHERE j.id = %(id)s AND j.status = 'running'
  AND j.locked_by = %(worker_id)s AND j.attempts = %(attempt)s
RETURNING j.id, j.status, j.run_at
"""

# Invariant 3, live side: a worker that is alive keeps its jobs by pushing their lease forward.
# Fenced per (id, attempt) so a heartbeat can never revive a job that was swept and reclaimed.
HEARTBEAT = """
UPDATE pgjobs_job AS j
SET lease_expires_at = now() + make_interval(secs => h.lease), updated_at = now()
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(leases)s::float8[]) AS h(id, attempt, lease)
WHERE j.id = h.id AND j.attempts = h.attempt
  AND j.status = 'running' AND j.locked_by = %(worker_id)s
RETURNING j.id
"""

# Graceful shutdown: hand a claimed job back without spending its attempt (the handler never ran
# to an outcome). run_at is kept, so the job keeps its place in line.
RELEASE = f"""
UPDATE pgjobs_job AS j
SET status = 'ready',
    history = {history_append("'released'")},
    attempts = j.attempts - 1,
    locked_by = NULL, locked_at = NULL, lease_expires_at = NULL, started_at = NULL,
    updated_at = now()
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS r(id, attempt)
WHERE j.id = r.id AND j.attempts = r.attempt
  AND j.status = 'running' AND j.locked_by = %(worker_id)s
RETURNING j.id, j.queue
"""

# -- sweep ---------------------------------------------------------------------------------------
# Invariant 3, dead side: a running job whose lease lapsed belongs to nobody. Back to ready (run
# now), or dead when its attempts are spent: the expired attempt counts, so a job that kills its
# worker every time ends dead instead of looping. SKIP LOCKED leaves rows a worker is finishing
# right now alone; the WHERE is re-checked under the row lock, so concurrent sweepers are harmless.
SWEEP = f"""
WITH expired AS MATERIALIZED (
    SELECT id FROM pgjobs_job
    WHERE status = 'running' AND lease_expires_at < now()
    ORDER BY lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE pgjobs_job AS j
SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'ready' END,
    run_at = CASE WHEN j.attempts >= j.max_attempts THEN j.run_at ELSE now() END,
    finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
    last_error = %(message)s || ' (worker ' || coalesce(j.locked_by, '?') || ', attempt '
                 || j.attempts || ')',
    history = {history_append("'lease expired'")},
    locked_by = NULL, locked_at = NULL, lease_expires_at = NULL,
    updated_at = now()
FROM expired
WHERE j.id = expired.id AND j.status = 'running'
RETURNING j.id, j.status, j.queue
"""

# What a dry run of the sweep would touch, without locking or changing anything.
SWEEP_PREVIEW = """
SELECT count(*) FILTER (WHERE attempts < max_attempts) AS to_ready,
       count(*) FILTER (WHERE attempts >= max_attempts) AS to_dead
FROM pgjobs_job
WHERE status = 'running' AND lease_expires_at < now()
"""

# One sweeper at a time, per database: a *transaction*-level advisory lock, released at commit, so
# it is safe behind PgBouncer's transaction pooling (a session lock could outlive its owner there).
TRY_SWEEP_LOCK = "SELECT pg_try_advisory_xact_lock(%(key)s)"

# Retention: delete finished jobs in bounded batches; each batch is its own short transaction.
PRUNE = """
WITH doomed AS MATERIALIZED (
    SELECT id FROM pgjobs_job
    WHERE status = %(status)s AND finished_at < now() - make_interval(secs => %(age)s)
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM pgjobs_job AS j USING doomed WHERE j.id = doomed.id AND j.status = %(status)s
RETURNING j.id
"""

# -- operator actions (admin) --------------------------------------------------------------------
# Each matches only the states the action makes sense for; a running job is never touched, so an
# operator can never double-run live work (field note 9).
RETRY = f"""
UPDATE pgjobs_job AS j
SET status = 'ready', run_at = now(), attempts = 0, finished_at = NULL,
    history = {history_append("'retried'")},
    updated_at = now()
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status = 'dead'
RETURNING j.id, j.queue
"""

CANCEL = f"""
UPDATE pgjobs_job AS j
SET status = 'dead', finished_at = now(), last_error = %(message)s,
    history = {history_append("'cancelled'")},
    updated_at = now()
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status = 'ready'
RETURNING j.id
"""

RUN_NOW = """
UPDATE pgjobs_job AS j
SET run_at = now(), updated_at = now()
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status = 'ready' AND j.run_at > now()
RETURNING j.id, j.queue
"""

DISCARD = """
DELETE FROM pgjobs_job AS j
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status <> 'running'
RETURNING j.id
"""

# Edit a job that is ready (waiting or delayed) or dead: never a running one (a worker holds it) nor
# a done one (it has run to completion; what ran is history). NULL parameters keep the stored value.
EDIT = f"""
UPDATE pgjobs_job AS j
SET payload = COALESCE(%(payload)s::jsonb, j.payload),
    run_at = COALESCE(%(run_at)s::timestamptz, j.run_at),
    priority = COALESCE(%(priority)s::smallint, j.priority),
    max_attempts = COALESCE(%(max_attempts)s::int, j.max_attempts),
    queue = COALESCE(%(queue)s::text, j.queue),
    updated_at = now()
WHERE j.id = %(id)s AND j.status IN ('ready', 'dead')
RETURNING {_RETURNING}
"""

NOTIFY = "SELECT pg_notify(%(channel)s, q) FROM unnest(%(queues)s::text[]) AS q"
