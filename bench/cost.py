"""Temporal Cloud actions counted from event histories, by the published billing rules
(docs.temporal.io/cloud/actions, "Temporal Cloud Actions")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory

DOCS = "docs.temporal.io/cloud/actions"

# Event type -> (actions, the rule). Activity retries and markers are handled in code.
RULES: dict[str, tuple[int, str]] = {
    "WorkflowExecutionStarted": (
        1,
        "Workflow started: client start, Continue-As-New (1); a Signal-With-Start is one action "
        "in total; a child's start is billed on the parent's initiation instead",
    ),
    "StartChildWorkflowExecutionInitiated": (
        2,
        "Start Child Workflow initiated: 2 (the durable intent + the start attempt)",
    ),
    "TimerStarted": (1, "Timer started: 1"),
    "ActivityTaskScheduled": (1, "Activity started: 1, plus 1 per retry (attempt-1 of Started)"),
    "WorkflowExecutionSignaled": (
        1,
        "Signal sent: 1, from a client or a workflow, billed in the signaled history",
    ),
    "SignalExternalWorkflowExecutionInitiated": (
        0,
        "Signal External: billed in the signaled history, not here",
    ),
    "WorkflowExecutionUpdateAccepted": (1, "Update received by worker: 1 (rejected too)"),
    "UpsertWorkflowSearchAttributes": (
        1,
        "Search Attribute upsert: 1 per command (TemporalChangeVersion-only upserts exempt)",
    ),
    "WorkflowExecutionOptionsUpdated": (1, "Workflow Execution Options updated: 1"),
    "MarkerRecorded": (
        1,
        "Local activity markers: 1 per workflow task; other markers (patches) 0",
    ),
    "WorkflowExecutionContinuedAsNew": (
        0,
        "Continue-As-New: billed as the new run's Workflow started",
    ),
}
QUERY_RULE = "Query received by Worker: 1 per query (not in histories; client-driven, not per run)"
SCHEDULE_RULE = (
    "Schedule execution: 3 (Schedule Start counts 2 + Workflow started 1), then the started "
    "workflow's own actions"
)


# Billed event type -> the kind of action it is, for per-kind breakdowns.
KINDS: dict[str, str] = {
    "WorkflowExecutionStarted": "workflow starts",
    "StartChildWorkflowExecutionInitiated": "child starts",
    "TimerStarted": "timers",
    "ActivityTaskScheduled": "activities",
    "ActivityTaskStarted": "activities",
    "WorkflowExecutionSignaled": "signals",
    "WorkflowExecutionUpdateAccepted": "updates",
    "UpsertWorkflowSearchAttributes": "upserts",
    "WorkflowExecutionOptionsUpdated": "options updates",
    "MarkerRecorded": "local activities",
}


def event_name(event: HistoryEvent) -> str:
    """The event's type in CamelCase without its prefix (`TimerFired`)."""
    return _name(event)


def event_ms(event: HistoryEvent) -> float:
    """The server's timestamp of the event, in epoch milliseconds (sub-millisecond kept)."""
    return event.event_time.ToNanoseconds() / 1e6


def between(events: Iterable[HistoryEvent], since_ms: float, until_ms: float) -> list[HistoryEvent]:
    """The events the server stamped in [since_ms, until_ms): a steady-state slice of a long
    history (no set-up, no teardown)."""
    return [e for e in events if since_ms <= event_ms(e) < until_ms]


def _name(event: HistoryEvent) -> str:
    raw = EventType.Name(event.event_type)
    parts = raw.removeprefix("EVENT_TYPE_").split("_")
    return "".join(p.capitalize() for p in parts)


@dataclass
class Tally:
    events: int = 0
    actions: float = 0.0
    by_type: Counter[str] = field(default_factory=Counter)
    actions_by_type: Counter[str] = field(default_factory=Counter)

    def by_kind(self) -> Counter[str]:
        """Actions grouped by kind (timers, child starts, activities, signals, upserts, ...)."""
        kinds: Counter[str] = Counter()
        for name, actions in self.actions_by_type.items():
            kinds[KINDS.get(name, name)] += actions
        return kinds

    def add(self, other: Tally) -> None:
        self.events += other.events
        self.actions += other.actions
        self.by_type.update(other.by_type)
        self.actions_by_type.update(other.actions_by_type)


def tally(events: Iterable[HistoryEvent], *, skip_setup: bool = False) -> Tally:
    """Count events and billable actions. `skip_setup` leaves out the first run's start and
    the signal/update that came with it (amortized setup, not per-tick cost)."""
    out = Tally()
    marker_tasks: set[int] = set()
    first_signal_skipped = False
    for event in events:
        name = _name(event)
        out.events += 1
        out.by_type[name] += 1
        actions = 0
        if name == "WorkflowExecutionStarted":
            started = event.workflow_execution_started_event_attributes
            is_child = started.HasField("parent_workflow_execution")
            is_can = bool(started.continued_execution_run_id)
            actions = 0 if is_child or (skip_setup and not is_can) else 1
        elif name == "WorkflowExecutionSignaled" and skip_setup and not first_signal_skipped:
            first_signal_skipped = True  # the set that came with signal-with-start
            actions = 0
        elif name == "ActivityTaskStarted":
            actions = max(0, event.activity_task_started_event_attributes.attempt - 1)
        elif name == "MarkerRecorded":
            marker = event.marker_recorded_event_attributes
            task = marker.workflow_task_completed_event_id
            if "local_activity" in marker.marker_name and task not in marker_tasks:
                marker_tasks.add(task)
                actions = 1
        elif name == "UpsertWorkflowSearchAttributes":
            fields = event.upsert_workflow_search_attributes_event_attributes
            keys = set(fields.search_attributes.indexed_fields.keys())
            actions = 0 if keys <= {"TemporalChangeVersion"} else 1
        elif name in RULES:
            actions = RULES[name][0]
        if actions:
            out.actions += actions
            out.actions_by_type[name] += actions
    return out


async def chain_histories(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """Every run of a workflow ID, oldest first, following continue-as-new back."""
    histories: list[WorkflowHistory] = []
    run_id: str | None = None
    for _ in range(1000):
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        histories.append(history)
        first = history.events[0].workflow_execution_started_event_attributes
        run_id = first.continued_execution_run_id or None
        if run_id is None:
            break
    histories.reverse()
    return histories


def rules_used(names: Iterable[str]) -> list[str]:
    return [f"{n}: {RULES[n][1]}" for n in sorted(set(names)) if n in RULES]
