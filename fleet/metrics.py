"""Prometheus metrics of the process they run in (API: admissions; workers: runs)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import datetime

from prometheus_client import Counter, Gauge, Histogram

from fleet.domain.values import Admission, Task, TaskStatus

SUBMITTED = Counter(
    "fleet_tasks_submitted_total",
    "Submissions admitted (new, merged, steered or duplicate).",
    ["deployment", "outcome"],
)
DROPPED = Counter(
    "fleet_tasks_dropped_total",
    "Work a full queue turned away: a queued task cancelled (queue_full) or a submission "
    "refused (rejected).",
    ["deployment", "reason"],
)
STARTED = Counter("fleet_tasks_started_total", "Runs started.", ["deployment"])
FINISHED = Counter(
    "fleet_tasks_finished_total", "Tasks that reached a final status.", ["deployment", "status"]
)
RECOVERED = Counter(
    "fleet_tasks_recovered_total",
    "Tasks taken back from a lost worker, by what became of them (interrupted = will retry).",
    ["status"],
)
RETRIED = Counter(
    "fleet_tasks_retried_total",
    "Runs that retry a task whose earlier attempt lost its worker.",
    ["deployment"],
)
QUEUE_WAIT = Histogram(
    "fleet_queue_wait_seconds",
    "From admission (or not_before) to run start.",
    ["deployment"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
RUN_DURATION = Histogram(
    "fleet_run_duration_seconds",
    "From run start to settle.",
    ["deployment", "status"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900),
)
PRUNED = Counter(
    "fleet_messages_pruned_total",
    "Stored messages deleted by retention (past their age) or the stored cap (oldest first).",
    ["deployment", "reason"],
)
RETENTION = Counter(
    "fleet_retention_removed_total",
    "What tenants' retention removed: whole conversations, journal steps, frozen prompts; and "
    "audit entries past the audit retention (tenant 'other').",
    ["tenant", "kind"],
)
ERASED = Counter(
    "fleet_erasures_total",
    "Erasures of a person's data (resource) or of one conversation.",
    ["tenant", "what"],
)
LIFECYCLE = Counter(
    "fleet_conversations_lifecycle_total",
    "Conversations an operator reset or deleted.",
    ["deployment", "action"],
)
TENANT_SUBMITTED = Counter(
    "fleet_tenant_tasks_submitted_total",
    "Submissions admitted, by tenant (configured tenants; any other counts as 'other').",
    ["tenant"],
)
TENANT_FINISHED = Counter(
    "fleet_tenant_tasks_finished_total",
    "Tasks that reached a final status, by tenant.",
    ["tenant", "status"],
)
TENANT_REFUSED = Counter(
    "fleet_tenant_quota_refused_total",
    "Submissions a tenant's quota or budget refused (429), by the quota.",
    ["tenant", "quota"],
)
TENANT_TOKENS = Counter(
    "fleet_tenant_tokens_total",
    "Model tokens (prompt + completion) the runs of a tenant used, as the models report them.",
    ["tenant"],
)

MODEL_CALLS = Counter(
    "fleet_model_calls_total",
    "Model steps of runs, by the model that answered (or was asked) and how each ended: ok, or "
    "its error class.",
    ["model", "outcome"],
)
MODEL_ATTEMPTS = Counter(
    "fleet_model_attempts_total",
    "Attempts of models under fleet's retries (a model limit matches them, or they have "
    "fallbacks), by how each went: ok, or its error class.",
    ["model", "outcome"],
)
MODEL_RETRIES = Counter(
    "fleet_model_retries_total",
    "Model attempts fleet made again after a failure, by the failure's error class.",
    ["model", "error_class"],
)
MODEL_FALLBACKS = Counter(
    "fleet_model_fallbacks_total",
    "Model calls a fallback answered once the models before it had failed.",
    ["model"],
)
MODEL_COOLDOWNS = Counter(
    "fleet_model_cooldowns_total",
    "Cooldowns started on a model limit (a 429 or 529 from a model it matches).",
    ["limit"],
)
CAPACITY_WAIT = Histogram(
    "fleet_model_capacity_wait_seconds",
    "How long a model call waited for a place under its model limits.",
    ["model"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)

#: A worker process's load (``worker_load``), made in worker processes only: the API's
#: ``/metrics`` shows no worker gauges at zero. Summed over the live processes of a worker's
#: metrics endpoint (Prometheus multiprocess mode ``livesum``: no ``pid`` label).
_LOAD: dict[str, Gauge] = {}
_LOAD_LOCK = threading.Lock()

#: The tenants metrics may name (the configured ones): the label's values stay bounded.
_TENANTS: set[str] = {"default"}


def know_tenants(names: Iterable[str]) -> None:
    """The configured tenants (``FleetConfig.tenant_names``): others are labelled ``other``."""
    _TENANTS.clear()
    _TENANTS.update(names)


def tenant_label(tenant: str) -> str:
    return tenant if tenant in _TENANTS else "other"


def admitted(adm: Admission) -> None:
    outcome = (
        "duplicate"
        if adm.duplicate
        else "merged"
        if adm.merged
        else "steered"
        if adm.delivered_to == "run"
        else "new"
    )
    SUBMITTED.labels(adm.task.deployment, outcome).inc()
    TENANT_SUBMITTED.labels(tenant_label(adm.task.tenant)).inc()
    if adm.dropped is not None:
        DROPPED.labels(adm.task.deployment, "queue_full").inc()


def rejected(deployment: str) -> None:
    """A submission refused because its conversation's queue was full (on_full = reject)."""
    DROPPED.labels(deployment, "rejected").inc()


def started(task: Task, now: datetime) -> None:
    STARTED.labels(task.deployment).inc()
    if task.attempts > 1:
        RETRIED.labels(task.deployment).inc()
    since = max(task.created_at, task.not_before)
    QUEUE_WAIT.labels(task.deployment).observe(max(0.0, (now - since).total_seconds()))


def finished(task: Task, status: TaskStatus, now: datetime) -> None:
    FINISHED.labels(task.deployment, status.value).inc()
    TENANT_FINISHED.labels(tenant_label(task.tenant), status.value).inc()
    if task.leased_at is not None:
        RUN_DURATION.labels(task.deployment, status.value).observe(
            max(0.0, (now - task.leased_at).total_seconds())
        )


def recovered(status: TaskStatus) -> None:
    RECOVERED.labels(status.value).inc()


def pruned(deployment: str, reason: str, count: int) -> None:
    """Messages a prune deleted (``retention`` or ``stored_cap``)."""
    if count:
        PRUNED.labels(deployment, reason).inc(count)


def retention_removed(tenant: str, kind: str, count: int) -> None:
    if count:
        RETENTION.labels(tenant_label(tenant), kind).inc(count)


def erased(tenant: str, what: str) -> None:
    ERASED.labels(tenant_label(tenant), what).inc()


def lifecycle(deployment: str, action: str) -> None:
    LIFECYCLE.labels(deployment, action).inc()


def quota_refused(tenant: str, quota: str) -> None:
    TENANT_REFUSED.labels(tenant_label(tenant), quota).inc()


def tokens(tenant: str, count: int) -> None:
    if count:
        TENANT_TOKENS.labels(tenant_label(tenant)).inc(count)


def model_call(model: str, outcome: str) -> None:
    """One model step: ``ok``, or its error class (``fleet.domain.error_classes``)."""
    MODEL_CALLS.labels(model, outcome).inc()


def model_attempt(model: str, outcome: str) -> None:
    """One attempt under fleet's retries: ``ok``, or its error class."""
    MODEL_ATTEMPTS.labels(model, outcome).inc()


def model_retry(model: str, error_class: str) -> None:
    MODEL_RETRIES.labels(model, error_class).inc()


def model_fallback(model: str) -> None:
    MODEL_FALLBACKS.labels(model).inc()


def model_cooldown(limit: str) -> None:
    MODEL_COOLDOWNS.labels(limit).inc()


def capacity_waited(model: str, seconds: float) -> None:
    CAPACITY_WAIT.labels(model).observe(max(0.0, seconds))


def worker_load(in_flight: int, slots: int) -> None:
    """This worker process holds ``in_flight`` runs of its ``slots`` (``--runs``; 1 for a
    prefork pool process)."""
    with _LOAD_LOCK:
        if not _LOAD:
            _LOAD["runs"] = Gauge(
                "fleet_worker_runs_in_flight",
                "Runs the worker's processes hold now: executing a step, or waiting on their "
                "model or a tool.",
                multiprocess_mode="livesum",
            )
            _LOAD["free"] = Gauge(
                "fleet_worker_free_slots",
                "Runs the worker's processes could take on top (their --runs less the runs in "
                "flight).",
                multiprocess_mode="livesum",
            )
    _LOAD["runs"].set(in_flight)
    _LOAD["free"].set(max(0, slots - in_flight))
