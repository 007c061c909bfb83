"""Product metrics, recorded through the SDK's metric meter on the worker's `/metrics`.

Workflow code records through `workflow.metric_meter()`, which records nothing while a
workflow task replays: a cold worker replaying a history counts none of it again. Each metric
carries the SDK's own labels (`namespace`, `task_queue`, `workflow_type`) plus the ones named
here, every one from a small fixed set (no object or ledger IDs: one series per object would
not scale). Names, labels and alerts: `docs/metrics.md`.

Recording a metric is not a command: it changes no history, so it needs no patch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from temporalio import workflow

# --- schedule
RUN_START_LATENESS = "durability_run_start_lateness"
RUNS_STARTED = "durability_runs_started"
RUNS_SETTLED = "durability_runs_settled"
OUTCOME_DELIVERIES = "durability_outcome_deliveries"
TICKS_SKIPPED = "durability_ticks_skipped"
RUNS_QUEUED = "durability_runs_queued"
QUEUE_DEPTH = "durability_queue_depth"
# --- ledger
LEDGER_OPERATIONS = "durability_ledger_operations"
REQUEST_ATTEMPTS = "durability_request_attempts"
REQUESTS_BLOCKED = "durability_requests_blocked"
COMPLETION_REFUSALS = "durability_completion_refusals"

DESCRIPTIONS: Mapping[str, str] = {
    RUN_START_LATENESS: "Time from a run's due time (jitter included) to its start, in ms",
    RUNS_STARTED: "Runs started",
    RUNS_SETTLED: "Runs that stopped, by outcome (complete, errored) and error name",
    OUTCOME_DELIVERIES: "Outcome deliveries by result (delivered, retried, dead_lettered)",
    TICKS_SKIPPED: "Ticks that never ran, by reason",
    RUNS_QUEUED: "Runs that had to wait for a free slot",
    QUEUE_DEPTH: "Runs waiting for a slot, sampled at each tick that records a run",
    LEDGER_OPERATIONS: "Operations entering a phase (dispatched, resolved, blocked, skipped)",
    REQUEST_ATTEMPTS: "Submit and query calls by action and answer",
    REQUESTS_BLOCKED: "Requests that became blocked, by kind of reason",
    COMPLETION_REFUSALS: "complete_activity calls that blocked a request (refused, failed)",
}
UNITS: Mapping[str, str] = {RUN_START_LATENESS: "ms", QUEUE_DEPTH: "runs"}
# Histogram buckets for the runtime's Prometheus exporter (`worker.py` sets them; a worker of
# your own sets them in its `PrometheusConfig`): the SDK's default buckets end at 10 s, so a
# p99 of lateness past that could not be told from 10 s.
HISTOGRAM_BUCKETS: Mapping[str, list[float]] = {
    RUN_START_LATENESS: [50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000, 300_000],
    QUEUE_DEPTH: [0, 1, 2, 5, 10, 50, 100, 500, 1000],
}
# The error names a settled run is labelled with; any other (a user's own) counts as `other`.
PRODUCT_ERRORS = frozenset(
    {"ScheduledRunTimeoutError", "ScheduledRunInterruptedError", "ScheduledOutcomeTimeoutError"}
)


def error_label(name: str | None) -> str:
    """A bounded label for an error name: `none`, one of the product's, or `other`."""
    if name is None:
        return "none"
    return name if name in PRODUCT_ERRORS else "other"


def count(name: str, amount: int = 1, **labels: str) -> None:
    """Add `amount` to the counter `name` with `labels` (nothing while replaying)."""
    if amount <= 0:
        return
    counter = workflow.metric_meter().create_counter(name, DESCRIPTIONS[name], UNITS.get(name))
    counter.with_additional_attributes(labels).add(amount)


def record(name: str, value: int, **labels: str) -> None:
    """Record `value` (clamped at 0) in the histogram `name` (nothing while replaying)."""
    histogram = workflow.metric_meter().create_histogram(name, DESCRIPTIONS[name], UNITS.get(name))
    histogram.with_additional_attributes(labels).record(max(0, value))


def record_lifecycle(event: Mapping[str, Any]) -> None:
    """The metrics a schedule's lifecycle event (S12) implies: every run event goes through
    `Lifecycle.emit`, so this is the one place they are counted."""
    kind = event.get("type")
    if kind == "due" and event.get("queued"):
        count(RUNS_QUEUED)
    elif kind == "skipped":
        count(TICKS_SKIPPED, reason=str(event.get("reason")))
    elif kind == "started":
        count(RUNS_STARTED)
    elif kind == "settled":
        error = event.get("error")
        name = error.get("name") if isinstance(error, Mapping) else None
        count(RUNS_SETTLED, outcome=str(event.get("outcome")), error=error_label(name))
    elif kind == "dead_lettered":
        count(OUTCOME_DELIVERIES, result="dead_lettered")


def operations(phase: str, amount: int = 1) -> None:
    """`amount` ledger operations entered `phase`."""
    count(LEDGER_OPERATIONS, amount, phase=phase)


def request_blocked(reason: str, operations_blocked: int) -> None:
    """A request became blocked (`reason` one of a fixed few), with its operations."""
    count(REQUESTS_BLOCKED, reason=reason)
    operations("blocked", operations_blocked)
