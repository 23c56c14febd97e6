"""Every metric fleet exports, with its type and labels, pinned: a rename, a new label or a new
metric is a visible change here (and in the dashboards and alerts that name them)."""

from __future__ import annotations

from prometheus_client.metrics import MetricWrapperBase

from fleet import metrics
from fleet.api.ops import _BacklogCollector, _TenantCollector
from fleet.domain.error_classes import CLASSES

#: name → (type, labels). Labels are bounded: deployments, tenants (configured ones and
#: ``other``), statuses, error classes, model and model-limit names from the config.
PINNED: dict[str, tuple[str, tuple[str, ...]]] = {
    "fleet_tasks_submitted_total": ("counter", ("deployment", "outcome")),
    "fleet_tasks_dropped_total": ("counter", ("deployment", "reason")),
    "fleet_tasks_started_total": ("counter", ("deployment",)),
    "fleet_tasks_finished_total": ("counter", ("deployment", "status")),
    "fleet_tasks_recovered_total": ("counter", ("status",)),
    "fleet_tasks_retried_total": ("counter", ("deployment",)),
    "fleet_queue_wait_seconds": ("histogram", ("deployment",)),
    "fleet_run_duration_seconds": ("histogram", ("deployment", "status")),
    "fleet_messages_pruned_total": ("counter", ("deployment", "reason")),
    "fleet_retention_removed_total": ("counter", ("kind", "tenant")),
    "fleet_erasures_total": ("counter", ("tenant", "what")),
    "fleet_conversations_lifecycle_total": ("counter", ("action", "deployment")),
    "fleet_tenant_tasks_submitted_total": ("counter", ("tenant",)),
    "fleet_tenant_tasks_finished_total": ("counter", ("status", "tenant")),
    "fleet_tenant_quota_refused_total": ("counter", ("quota", "tenant")),
    "fleet_tenant_tokens_total": ("counter", ("tenant",)),
    "fleet_model_calls_total": ("counter", ("model", "outcome")),
    "fleet_model_attempts_total": ("counter", ("model", "outcome")),
    "fleet_model_retries_total": ("counter", ("error_class", "model")),
    "fleet_model_fallbacks_total": ("counter", ("model",)),
    "fleet_model_cooldowns_total": ("counter", ("limit",)),
    "fleet_model_capacity_wait_seconds": ("histogram", ("model",)),
    # read from the store at each scrape (fleet.api.ops)
    "fleet_backlog_up": ("gauge", ()),
    "fleet_backlog_tasks": ("gauge", ("deployment", "status")),
    "fleet_backlog_oldest_due_seconds": ("gauge", ("deployment",)),
    "fleet_tenant_backlog_tasks": ("gauge", ("status", "tenant")),
    "fleet_tenant_tokens_today": ("gauge", ("tenant",)),
}


def _exported() -> dict[str, tuple[str, tuple[str, ...]]]:
    found: dict[str, tuple[str, tuple[str, ...]]] = {}
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            kind = value._type
            name = value._name + ("_total" if kind == "counter" else "")
            found[name] = (kind, tuple(sorted(value._labelnames)))
    collectors = (_BacklogCollector(["chat"], []), _TenantCollector(("default",), {}))
    for collector in collectors:
        for family in collector.collect():
            labels = {k for s in family.samples for k in s.labels}
            found[family.name] = (family.type, tuple(sorted(labels)))
    return found


def test_every_metric_is_pinned_with_its_type_and_labels() -> None:
    assert _exported() == PINNED


def test_names_follow_prometheus_conventions() -> None:
    for name, (kind, labels) in PINNED.items():
        assert name.startswith("fleet_"), name
        assert (kind == "counter") == name.endswith("_total"), name
        assert not {"pid", "task_id", "conversation_id", "run_id", "id"} & set(labels), name


def test_error_class_labels_take_the_classes_stored_on_tasks() -> None:
    """The outcome of a model call is ``ok`` or one of the task error classes: one list."""
    assert "ok" not in CLASSES and {"rate_limit", "auth", "provider_error"} <= set(CLASSES)
