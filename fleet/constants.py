"""Named limits, defaults and key prefixes, each in one place with a comment.

Limits come in pairs: the default a deployment gets and the maximum it may configure. The limits
table of docs/configuration.md is checked against this module by ``tests/unit/test_docs.py``.
"""

from __future__ import annotations

from typing import NamedTuple


class Limit(NamedTuple):
    default: int
    maximum: int
    doc: str


#: Context and storage limits (the conversation-memory reference's limits table).
LIMITS: dict[str, Limit] = {
    "max_history_items": Limit(20, 100, "prior transcript messages a run's context may hold"),
    "max_history_bytes": Limit(
        32_768, 131_072, "UTF-8 bytes of prior transcript in a run's context"
    ),
    "max_input_bytes": Limit(16_384, 65_536, "UTF-8 bytes of one submitted input"),
    "max_steps": Limit(8, 64, "model/tool steps one run may take before it fails"),
    "notes_bytes": Limit(8_192, 32_768, "UTF-8 bytes of conversation notes in a run's context"),
    "retention_days": Limit(30, 365, "days a conversation's messages are kept after they are said"),
    "stored_messages": Limit(
        1_000, 10_000, "messages one conversation keeps (its current generation; oldest go first)"
    ),
}

#: Labels: at most this many per task.
MAX_LABELS = 32
#: Label keys: letters, digits and ``._/-``; this long at most.
MAX_LABEL_KEY_CHARS = 128
#: Label values: this many UTF-8 bytes at most.
MAX_LABEL_VALUE_BYTES = 256
#: Conversation keys (without scope): this many characters at most.
MAX_CONVERSATION_KEY_CHARS = 200
#: Idempotency keys: this many characters at most.
MAX_IDEMPOTENCY_KEY_CHARS = 200
#: ``context_tokens`` bounds: the smallest a prompt can work with, the largest any model takes.
MIN_CONTEXT_TOKENS = 256
MAX_CONTEXT_TOKENS = 2_000_000
#: Tokens a shortened tool result keeps of its beginning (plus a note saying it was shortened).
SHORTENED_RESULT_TOKENS = 64
#: Seconds a tool call may take when neither the tool nor the agent says otherwise.
DEFAULT_TOOL_TIMEOUT_S = 60.0
#: Task id prefixes (``fleet tasks show 67bdb6``): at least this many hex digits.
MIN_TASK_ID_PREFIX = 6
#: ``fleet tasks ls`` shows this many characters of each id (git's short form); show/cancel take it.
SHORT_TASK_ID_CHARS = 8
#: ``FLEET_UI_SECRET`` (it signs operator UI sessions): at least this many bytes, so it cannot
#: be guessed (HMAC-SHA256's key size). ``fleet check`` refuses a shorter one; a start warns.
MIN_UI_SECRET_BYTES = 32
#: Seconds an MCP server gets to start, answer the handshake and list its tools.
DEFAULT_MCP_CONNECT_TIMEOUT_S = 10.0
#: Seconds a worker-lifetime MCP server stays up with no run using it (``idle_timeout``).
DEFAULT_MCP_IDLE_TIMEOUT_S = 600.0
#: Most calls an MCP server entry may take at once (``max_concurrent_calls``).
MAX_MCP_CONCURRENT_CALLS = 64
#: What an MCP stdio ``command`` may say to start fleet's own Python interpreter.
MCP_PYTHON_PLACEHOLDER = "{python}"
#: Delegation: how many delegations deep a chain of tasks may go (``FLEET_MAX_DELEGATION_DEPTH``).
DEFAULT_MAX_DELEGATION_DEPTH = 3
#: Delegation: how often a waiting ``call_agent`` looks at its delegated task (seconds).
DELEGATION_POLL_S = 0.2
#: Tools fleet binds to a run itself (delegation, memory blocks, notes, working memory,
#: observations): an agent's own tools may not take these names (``fleet check`` refuses them).
FLEET_TOOL_NAMES = frozenset(
    {
        "call_agent",
        "start_agent",
        "signal_agent",
        "memory_update",
        "memory_list",
        "memory_get",
        "memory_set",
        "memory_remove",
        "update_working_memory",
        "recall_observations",
    }
)
#: The built-in tools an agent's config may name without a ``module:function``
#: (``fleet.agents.tools.builtin`` has them; a test keeps the two equal). Here, so that config
#: validation need not import the tools.
#: The built-in that lets an agent come back to its conversation later (bound to each run).
FOLLOWUP_TOOL = "schedule_followup"
#: The built-in that stops a run for a while holding no worker (bound to each run).
PAUSE_TOOL = "pause"
#: A waiting task due within this many seconds (a short pause) gets a wake-up at its deadline
#: when it parks; a later one is found by the sweeper (no far-future wake-up in the broker).
NEAR_DEADLINE_S = 60.0
#: The built-in that parks a run until an event of a name and key arrives (bound to each run).
EVENT_WAIT_TOOL = "wait_for_event"
#: The built-ins bound to each run (``fleet.dispatch.sources``), not to the agent's toolbox.
RUN_BOUND_TOOLS = frozenset({FOLLOWUP_TOOL, PAUSE_TOOL, EVENT_WAIT_TOOL})
BUILTIN_TOOL_NAMES = frozenset({"current_time", "wait"}) | RUN_BOUND_TOOLS
#: Collect mode: the debounce a deployment gets when it names none (seconds).
DEFAULT_DEBOUNCE_S = 2.0
#: Collect mode: the longest debounce a deployment may configure (seconds).
MAX_DEBOUNCE_S = 3600.0
#: The largest integer a submitted JSON value may hold: what every JSON peer (A2A's protobuf
#: Struct, JavaScript) carries exactly.
MAX_SAFE_INTEGER = 2**53 - 1
#: API and A2A request bodies larger than this are refused before they are parsed (413).
MAX_REQUEST_BYTES = 1_048_576
#: Webhook delivery bodies larger than this are refused (413).
MAX_WEBHOOK_BYTES = 8 * 1_048_576
#: How a stored value that was a secret reads after redaction.
REDACTED = "[REDACTED]"
#: Characters of a message kept as its preview in a run's context record.
PREVIEW_CHARS = 80
#: Messages of the recent window a run's context view lists under ``recent`` (newest ones;
#: ``recent.count`` says how many the window held, ``injected`` lists them all).
RECENT_SHOWN = 50

#: Runs one worker process holds in flight (``fleet worker --runs``; the Procfile and the Helm
#: chart say the same): a thread each, waiting on its model with no connection held.
DEFAULT_RUNS = 100
#: The most runs ``fleet worker --runs`` and embedded ``fleet serve --runs`` let one process
#: hold (a thread each: beyond this, more processes serve better than more threads).
MAX_RUNS = 10_000
#: Embedded mode (``fleet serve``, the SDK): runs in flight when ``FLEET_EMBEDDED_CONCURRENCY``
#: is not set (a thread each, started as they are needed).
DEFAULT_EMBEDDED_RUNS = 100
#: Embedded mode: the most runs in flight. Waiting runs cost a thread and no connection, but
#: SQLite takes one writer at a time, so every run's commits (claim, each step, settle) queue
#: for its one lock: measured, one process held 1,000 runs on 10-second turns in 200 MiB and
#: took about 100 turns a second at 2 s. Beyond that, run a fleet (PostgreSQL, workers).
MAX_EMBEDDED_RUNS = 1_000
#: The fewest connections a process's store works with (``FLEET_DATABASE_POOL_SIZE``): a drain
#: on a process's main thread (a prefork pool process) keeps one connection between its
#: statements and opens each transaction on a second; no thread holds more at once, and a
#: drain on another thread (runs in flight) takes one per statement or transaction.
MIN_DATABASE_POOL_SIZE = 2

#: The tenant of the open API (no callers configured) and of the shared ``api`` scope.
DEFAULT_TENANT = "default"
#: A tenant's ``weight`` (its turns in the round-robin of free capacity): at most this.
MAX_TENANT_WEIGHT = 100
#: Priority of a task that names none and whose deployment names none (0-9, higher first).
DEFAULT_PRIORITY = 5
MAX_PRIORITY = 9

#: Redis key of a conversation's lease; the braces keep one conversation on one cluster slot.
LEASE_KEY = "fleet:lease:{{{conversation}}}"
#: Redis key a wake-up sets when it finds the conversation's lease taken (same slot as the lease).
KNOCK_KEY = "fleet:knock:{{{conversation}}}"
#: A knock outlives any run it waits behind; a stale one costs one extra look, nothing more.
KNOCK_TTL_S = 3600
#: Redis key marking "a wake-up for this conversation is on its way" (deleted when it acquires).
WOKEN_KEY = "fleet:woken:{{{conversation}}}"
#: After this long a pending wake-up counts as lost and the next admission publishes another.
WOKEN_TTL_S = 30
#: Celery queue that carries wake-up hints.
WAKE_QUEUE = "fleet"
#: Redis keys of a queue's fair turns (``fleet.dispatch.fair``), one hash tag per queue.
FAIR_KEY = "fleet:fair:{{{queue}}}:"
#: A turn's hold: a conversation picked but not yet done goes back to its tenant's due set
#: after this long unless its lease is held (its worker died between the pick and the lease).
FAIR_HOLD_S = 15.0
#: Redis key a sweeper takes (SET NX) for most of a sweep interval: of several `fleet beat`
#: processes, only the one that took it sweeps in that interval.
SWEEP_TICK_KEY = "fleet:sweep:tick"
#: Redis pub/sub channel of a task's change hints ("it may have a new event"): published after
#: the commit by whoever changed it, subscribed to by the ``fleet serve`` streaming its events.
CHANGED_CHANNEL = "fleet:changed:{task}"

#: Reply delivery: a rendered request body larger than this is not sent (the delivery fails).
MAX_DELIVERY_BODY_BYTES = 262_144
#: Reply delivery: characters of a receiver's answer kept in the journal (redacted).
DELIVERY_ANSWER_CHARS = 200
#: Characters of the receiver's answer a failed delivery's error quotes (after what failed).
DELIVERY_ERROR_ANSWER_CHARS = 80
#: Reply delivery: attempts when the config names none, and the most it may name.
DEFAULT_DELIVERY_ATTEMPTS = 5
MAX_DELIVERY_ATTEMPTS = 20
#: Reply delivery: seconds one attempt may take (connect + answer) unless the config says otherwise.
DEFAULT_DELIVERY_TIMEOUT_S = 10.0
#: Reply delivery: the first retry's wait (seconds); each next one doubles, up to the cap.
DELIVERY_BACKOFF_S = 1.0
DELIVERY_BACKOFF_CAP_S = 300.0
#: Reply delivery: how long past an attempt's timeout its claim holds before the attempt counts
#: as lost (its worker died) and another may start.
DELIVERY_CLAIM_MARGIN_S = 30.0
#: The longest the event hub waits for its tasks (a Redis subscription closing) at shutdown.
EVENTS_CLOSE_S = 2.0
#: The label a bulk retry's task carries: the id of the task it retries.
RETRY_LABEL = "retry_of"
#: How long the audit log keeps an entry (``FLEET_AUDIT_RETENTION``).
AUDIT_RETENTION_S = 365 * 86_400.0
#: How long an erased resource refuses new tasks naming it (``FLEET_ERASED_HOLD``): longer than
#: a webhook sender's or a client's retries go on.
ERASED_HOLD_S = 30 * 86_400.0
#: An event that arrives before the wait for it is kept this long (``FLEET_EVENT_LOOKBACK``).
EVENT_LOOKBACK_S = 15 * 60.0
#: Reply delivery: URLs longer than this are refused.
MAX_DELIVERY_URL_CHARS = 2048
#: A task's recent text deltas (a Redis stream, bounded, expiring): ``fleet.streaming``.
DELTAS_KEY = "fleet:deltas:{task}"
