"""PostgreSQL's hot path: each store operation of a task is one statement, one round trip.

They run on the driver connection (psycopg, server-side prepared) rather than through
SQLAlchemy's execution layer, whose per-statement cost is larger than the statement's own here.
Data-modifying CTEs let PostgreSQL do a claim (with its history read), a settle (task, run,
traces, messages and the next head) or a followup admission (conversation upsert and task
insert) in a single statement, which is its own transaction. SQLite runs the portable,
multi-statement versions of the same operations (``statements.py``): it has no round trips to
save. Both are held to one contract by the store tests, which run on both databases.
"""

from __future__ import annotations

from fleet.domain.values import ACTIVE, CLAIMABLE, UNFINISHED, TaskStatus


def _in(statuses: tuple[TaskStatus, ...]) -> str:
    return "(" + ", ".join(f"'{s.value}'" for s in statuses) + ")"


_TASK_COLUMNS = (
    "id, conversation_id, seq, generation, deployment, scope, conversation_key, status, input, "
    "submissions, input_bytes, not_before, idempotency_key, labels, attempts, max_attempts, "
    "fence, cancel_requested, worker, created_at, leased_at, started_at, finished_at, error, "
    "result, caller, inbox, interrupt_requested, resource_id, tenant, priority"
)

#: The conversation's lowest unfinished task, with the frozen context of its latest run (a retry
#: replays it) and the newest history (none for a conversation's first task). Read-only.
HEAD_WITH_CONTEXT = f"""
SELECT h.*,
  (SELECT r.context FROM runs r WHERE r.task_id = h.id AND h.attempts > 0
   ORDER BY r.attempt DESC LIMIT 1) AS frozen,
  (SELECT coalesce(json_agg(json_build_array(x.id, x.role, x.content, x.delivery, x.seq)
                            ORDER BY x.id DESC), '[]')
   FROM (SELECT m.id, m.role, m.content, m.delivery,
                (SELECT st.seq FROM tasks st WHERE st.id = m.task_id) AS seq
         FROM messages m
         WHERE m.conversation_id = h.conversation_id AND m.generation = h.generation
           AND h.seq > 1
         ORDER BY m.id DESC LIMIT %(history)s) x) AS history
FROM (SELECT {_TASK_COLUMNS} FROM tasks
      WHERE conversation_id = %(conv)s AND status IN {_in(UNFINISHED)}
      ORDER BY seq LIMIT 1) h
"""

#: Ids for the two messages (user input, reply) the claimed run's settle will store: taken at
#: the claim, so the worker knows them before it settles and can build the next task's history
#: itself. Later claims in the conversation take larger ones, so id order stays seq order.
_RESERVE = "nextval('messages_id_seq') AS m1, nextval('messages_id_seq') AS m2"

#: The conversation's first unfinished task after ``seq``, as one JSON row.
_AFTER = (
    """(SELECT to_jsonb(a) FROM tasks a
   WHERE a.conversation_id = {conv} AND a.seq > {seq} AND a.status IN """
    + _in(UNFINISHED)
    + """
   ORDER BY a.seq LIMIT 1)"""
)

#: What a claim writes: the task runs under a new fencing number (``tasks.`` qualified, as the
#: settle's chained claim also reads the settled task).
_CLAIM_SET = """UPDATE tasks SET status = 'running', fence = tasks.fence + 1,
         attempts = tasks.attempts + 1, leased_at = %(now)s,
         started_at = coalesce(tasks.started_at, %(now)s), worker = %(worker)s"""
_CLAIM_RETURNING = (
    "RETURNING tasks.id, tasks.conversation_id, tasks.seq, tasks.attempts, tasks.fence, "
    "tasks.labels"
)


def _open_run(run: str, claimed: str) -> str:
    """The run a claim opens: its frozen context, its attempt and fencing number."""
    return f"""INSERT INTO runs (id, task_id, conversation_id, attempt, fence, status, model,
                    context, usage, labels, started_at, worker, release)
  SELECT %({run})s, c.id, c.conversation_id, c.attempts, c.fence, 'running', %(model)s,
         CAST(%(context)s AS jsonb), '{{}}'::jsonb, c.labels, %(now)s, %(worker)s,
         %(release)s
  FROM {claimed} c
  RETURNING id"""


#: Claim the task read above and open its run, if it is still what was read: the lowest
#: unfinished task of its conversation, claimable, same fencing number, same submissions (a
#: collect merge, the only thing that moves ``not_before``, raises them). No ``not_before``
#: test here: with it, generic plans of this prepared statement scan the due-tasks index.
#:
#: Its commit is asynchronous (no WAL flush of its own): the next synchronous commit (a
#: checkpoint's or the settle's) flushes the claim's WAL with its own. A claim lost to a database
#: crash before that leaves the task as it was, so a later claim may hand out the same fencing
#: number again; that is why every fenced write also names its run, which the lost claim's
#: worker has and nobody else does (its row was lost with the claim): that worker can no longer
#: write, and the task runs again, as after a worker crash. Admissions and settles, which hold
#: what users gave and got, stay synchronous.
CLAIM_AND_START = f"""
WITH claimed AS (
  {_CLAIM_SET}
  WHERE id = %(task)s AND fence = %(fence)s AND submissions = %(submissions)s
    AND status IN {_in(CLAIMABLE)}
    AND id = (SELECT id FROM tasks WHERE conversation_id = %(conv)s
              AND status IN {_in(UNFINISHED)} ORDER BY seq LIMIT 1)
  {_CLAIM_RETURNING}
), opened AS (
  {_open_run("run", "claimed")}
)
SELECT o.id, {_RESERVE}, {_AFTER.format(conv="c.conversation_id", seq="c.seq")} AS after_row
FROM opened o, claimed c, (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
"""


def _upsert_traces(fenced: str) -> str:
    """Store journal rows for the task ``fenced`` returned; a tool call journaled as started
    gets its result in place (same run and step)."""
    return f"""INSERT INTO traces (run_id, task_id, step, kind, name, input, output, error, usage,
                      labels, started_at, duration_ms, status, call_id, replayed)
  SELECT %(run)s, f.id, x.step, x.kind, x.name, x.input, x.output, x.error, x.usage, f.labels,
         x.started_at, x.duration_ms, x.status, x.call_id, x.replayed
  FROM {fenced} f, jsonb_to_recordset(CAST(%(traces)s AS jsonb)) AS x(
    step int, kind text, name text, input jsonb, output jsonb, error text, usage jsonb,
    started_at timestamptz, duration_ms float8, status text, call_id text, replayed boolean)
  ON CONFLICT (run_id, step) DO UPDATE SET output = EXCLUDED.output, error = EXCLUDED.error,
    usage = EXCLUDED.usage, duration_ms = EXCLUDED.duration_ms, status = EXCLUDED.status"""


def _ledger(fenced: str) -> str:
    """The token ledger's rows of the model steps just journaled (``fleet.domain.quota``
    ``ledger_rows``), once per run and step."""
    return f"""INSERT INTO token_usage
    (run_id, step, task_id, tenant, day, tokens, cost_micros, created_at)
  SELECT %(run)s, x.step, f.id, f.tenant, x.day, x.tokens, x.cost_micros, %(now)s
  FROM {fenced} f, jsonb_to_recordset(CAST(%(ledger)s AS jsonb)) AS x(
    step int, day date, tokens bigint, cost_micros bigint)
  ON CONFLICT (run_id, step) DO NOTHING"""


#: A step boundary: store the run's finished steps if it still owns its task (fenced like the
#: settle; the no-op update locks the task row, so a recovery cannot slip in between), and say
#: whether a cancel was requested. No row back: the run lost its task.
_TAKEN = (
    "(SELECT jsonb_agg(jsonb_build_object('id', k.id, 'source', k.source, 'input', k.input) "
    "ORDER BY k.id) FROM taken k)"
)

CHECKPOINT = f"""
WITH fenced AS (
  UPDATE tasks SET inbox = CASE WHEN %(take)s THEN 0 ELSE inbox END
  WHERE id = %(task)s AND fence = %(fence)s AND status = 'running'
    AND EXISTS (SELECT 1 FROM runs r WHERE r.id = %(run)s AND r.task_id = tasks.id
                AND r.status = 'running')
  RETURNING id, labels, cancel_requested, interrupt_requested, inbox, tenant
), taken AS (
  UPDATE run_inbox SET status = 'delivered', run_id = %(run)s, step = %(inbox_step)s,
    delivered_at = %(now)s
  FROM fenced f
  WHERE run_inbox.task_id = f.id AND run_inbox.status = 'pending' AND %(take)s
  RETURNING run_inbox.id, run_inbox.source, run_inbox.input
), traced AS (
  {_upsert_traces("fenced")}
), counted AS (
  {_ledger("fenced")}
), inboxed AS (
  INSERT INTO traces (run_id, task_id, step, kind, name, input, output, error, usage, labels,
                      started_at, duration_ms, status, call_id, replayed)
  SELECT %(run)s, f.id, %(inbox_step)s, 'inbox', 'inbox', NULL, {_TAKEN}, NULL, '{{}}'::jsonb,
         f.labels, %(now)s, 0, 'finished', NULL, false
  FROM fenced f WHERE EXISTS (SELECT 1 FROM taken)
)
SELECT cancel_requested, interrupt_requested, inbox AS waiting, {_TAKEN} AS taken FROM fenced
"""

#: Finish a fenced task and close its run, store its last steps and what was said (with the ids
#: its claim reserved). A cancel requested meanwhile wins.
_SETTLE_CTES = f"""
WITH settled AS (
  UPDATE tasks SET
    status = CASE WHEN cancel_requested THEN 'cancelled' ELSE %(status)s END,
    error = CASE WHEN cancel_requested THEN 'cancelled by request' ELSE %(error)s END,
    error_class = CASE WHEN cancel_requested THEN 'cancelled' ELSE %(error_class)s END,
    result = CASE WHEN cancel_requested THEN NULL ELSE CAST(%(result)s AS jsonb) END,
    finished_at = %(now)s, worker = NULL
  WHERE id = %(task)s AND fence = %(fence)s AND status = 'running'
    AND EXISTS (SELECT 1 FROM runs r WHERE r.id = %(run)s AND r.task_id = tasks.id
                AND r.status = 'running')
  RETURNING id, conversation_id, seq, status, generation, labels, inbox, push_pending, tenant
), closed AS (
  UPDATE runs SET usage = CAST(%(usage)s AS jsonb), finished_at = %(now)s,
    status = CASE WHEN s.status = 'superseded' THEN 'interrupted' ELSE s.status END,
    error = CASE WHEN s.status = 'cancelled' THEN 'cancelled by request' ELSE %(error)s END,
    details = CAST(%(details)s AS jsonb)
  FROM settled s WHERE runs.id = %(run)s
), traced AS (
  {_upsert_traces("settled")}
), counted AS (
  {_ledger("settled")}
), said AS (
  INSERT INTO messages (id, conversation_id, generation, task_id, run_id, role, content,
                        delivery, created_at)
  SELECT coalesce(m.id, nextval('messages_id_seq')), s.conversation_id, s.generation, s.id,
         %(run)s, m.role, m.content, m.delivery, %(now)s
  FROM settled s, jsonb_to_recordset(CAST(%(messages)s AS jsonb)) AS m(
    id bigint, role text, content text, delivery text, ord int, only_if text)
  WHERE s.status <> 'cancelled' AND (m.only_if IS NULL OR m.only_if = s.status)
  ORDER BY m.ord
  RETURNING id, role, content, delivery, generation
)"""

#: The next head with what its context is built from (the exchange just stored included), so
#: the next claim needs no read of its own; ``{skip}`` leaves the history out.
_NEXT_HEAD = f"""
  to_jsonb(n) AS next_row,
  CASE WHEN n.id IS NOT NULL AND n.attempts > 0 AND NOT ({{skip}}) THEN
    (SELECT r.context FROM runs r WHERE r.task_id = n.id ORDER BY r.attempt DESC LIMIT 1)
  END AS next_frozen,
  CASE WHEN n.id IS NOT NULL AND NOT ({{skip}}) THEN (
    SELECT coalesce(json_agg(json_build_array(x.id, x.role, x.content, x.delivery, x.seq)
                             ORDER BY x.id DESC), '[]')
    FROM (
      SELECT d.id, d.role, d.content, d.delivery, s.seq FROM said d
      WHERE d.generation = n.generation
      UNION ALL
      (SELECT m.id, m.role, m.content, m.delivery,
              (SELECT st.seq FROM tasks st WHERE st.id = m.task_id) AS seq
       FROM messages m
       WHERE m.conversation_id = s.conversation_id AND m.generation = n.generation
       ORDER BY m.id DESC LIMIT %(history)s)
    ) x
  ) END AS next_history
FROM settled s
LEFT JOIN LATERAL (
  SELECT t.* FROM tasks t
  WHERE t.conversation_id = s.conversation_id AND t.seq > s.seq
    AND t.status IN {_in(UNFINISHED)}
  ORDER BY t.seq LIMIT 1
) n ON true
"""

#: Settle, then read the next head.
SETTLE = (
    _SETTLE_CTES + "\nSELECT s.status, s.inbox, s.push_pending," + _NEXT_HEAD.format(skip="false")
)

#: Settle, and claim the next task with the context the worker built for it from what it knew:
#: its row as read at the previous claim, and the history that claim read plus the exchange
#: this settle stores under the reserved ids. The claim holds only if all of that is still true:
#: the task settled with the status the worker expected (a cancel that won means a different
#: history), the next task has the fencing number and submissions read, is claimable, and no
#: other unfinished task lies between the two (none lies below the settled one: its own claim
#: found it the lowest unfinished, and tasks never become unfinished again). Else the next head
#: is read as by ``SETTLE``. The claim's run and the row of the task after it come back, so a
#: drain can go on chaining.
SETTLE_AND_CLAIM = (
    _SETTLE_CTES
    + f""", chained AS (
  {_CLAIM_SET}
  FROM settled s
  WHERE tasks.id = %(next_task)s AND tasks.conversation_id = s.conversation_id
    AND tasks.generation = s.generation
    AND s.status = %(status)s AND s.status <> 'cancelled' AND tasks.fence = %(next_fence)s
    AND tasks.submissions = %(next_submissions)s AND tasks.status IN {_in(CLAIMABLE)}
    AND NOT EXISTS (SELECT 1 FROM tasks p WHERE p.conversation_id = %(conv)s
                    AND p.seq > %(seq)s AND p.seq < %(next_seq)s
                    AND p.status IN {_in(UNFINISHED)})
  {_CLAIM_RETURNING}
), chained_run AS (
  {_open_run("next_run", "chained")}
)
SELECT s.status, s.inbox, s.push_pending, (SELECT id FROM chained_run) AS chained_run, {_RESERVE},
  CASE WHEN EXISTS (SELECT 1 FROM chained_run) THEN
    {_AFTER.format(conv="s.conversation_id", seq="n.seq")}
  END AS chained_after,"""
    + _NEXT_HEAD.format(skip="EXISTS (SELECT 1 FROM chained_run)")
)

#: followup admission without an idempotency key: upsert the conversation (taking the next seq
#: under its row lock) and insert the task; a conversation's first task reads the tombstone of
#: its key (``fresh_after``: when a conversation of that key was deleted).
ADMIT_FOLLOWUP = f"""
WITH conv AS (
  INSERT INTO conversations (id, deployment, tenant, scope, key, generation, last_seq,
                             created_at, updated_at)
  VALUES (%(conv_id)s, %(deployment)s, %(tenant)s, %(scope)s, %(key)s, 0, 1, %(now)s, %(now)s)
  ON CONFLICT (deployment, tenant, scope, key)
  DO UPDATE SET updated_at = EXCLUDED.updated_at, last_seq = conversations.last_seq + 1
  RETURNING id, last_seq, generation
)
INSERT INTO tasks (id, conversation_id, seq, generation, deployment, scope, conversation_key,
                   status, input, submissions, input_bytes, not_before, idempotency_key, labels,
                   attempts, max_attempts, fence, cancel_requested, created_at, caller,
                   resource_id, tenant, priority)
SELECT %(task_id)s, conv.id, conv.last_seq, conv.generation, %(deployment)s, %(scope)s,
       %(key)s, 'queued', CAST(%(input)s AS jsonb), 1, %(input_bytes)s, %(now)s, NULL,
       CAST(%(labels)s AS jsonb), 0, %(max_attempts)s, 0, false, %(now)s, %(caller)s,
       %(resource)s, %(tenant)s, %(priority)s
FROM conv
RETURNING {_TASK_COLUMNS},
  CASE WHEN seq = 1 THEN (
    SELECT ct.deleted_at FROM conversation_tombstones ct
    WHERE ct.deployment = %(deployment)s AND ct.tenant = %(tenant)s AND ct.scope = %(scope)s
      AND ct.key = %(key)s
  ) END AS fresh_after
"""

del ACTIVE
