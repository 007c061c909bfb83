"""The schedule's message catalog (`workflows.schedule.messages`) against what the workflow
registers: every wire name and kind as the contract has them, each message handled (by the
shell, or by the core method its entry names), and payloads read strictly in one format."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.workflow import _Definition

from workflows.catalog import Kind
from workflows.handlers import method_name
from workflows.schedule.core import ScheduleCore
from workflows.schedule.messages import SCHEDULE_MESSAGES, read_payload
from workflows.schedule.models import ScheduleInput, ScheduleState
from workflows.schedule.workflow import DurabilityScheduleWorkflow
from workflows.validation import InvalidRequest

# The wire names, as released: they never change.
SIGNALS = {
    "set",
    "cancel",
    "configure",
    "pause",
    "unpause",
    "durability.run_settled",
    "durability.run_acknowledged",
}
UPDATES = {"set", "cancel", "configure", "pause", "unpause", "trigger", "backfill", "redeliver"}
QUERIES = {
    "get",
    "describe",
    "runs",
    "paused",
    "pause_note",
    "skipped_ticks",
    "dead_letters",
    "settings",
    "dropped_signals",
}


def test_the_workflow_registers_exactly_the_catalogs_messages_under_their_wire_names() -> None:
    definition = _Definition.from_class(DurabilityScheduleWorkflow)
    assert definition is not None
    catalog = {
        kind: {m.name for m in SCHEDULE_MESSAGES.of_kind(kind, internal=True)} for kind in Kind
    }
    assert set(definition.signals) == catalog[Kind.SIGNAL] == SIGNALS
    assert set(definition.updates) == catalog[Kind.UPDATE] == UPDATES
    assert set(definition.queries) == catalog[Kind.QUERY] == QUERIES
    for name in UPDATES:
        assert definition.updates[name].validator is not None, name


@pytest.mark.parametrize("message", list(SCHEDULE_MESSAGES), ids=lambda m: m.name)
def test_every_message_is_handled_by_the_shell_or_the_core_method_it_names(message: Any) -> None:
    core = ScheduleCore(ScheduleState(), lambda _e, after: after + 1, ScheduleInput())
    prefix = "query" if message.is_(Kind.QUERY) else "apply"
    shell_has = hasattr(DurabilityScheduleWorkflow, method_name(prefix, message))
    core_has = bool(message.core_method) and callable(getattr(core, message.core_method, None))
    assert shell_has != core_has, (message.name, shell_has, core_has)


@pytest.mark.parametrize(
    ("name", "payload", "problem"),
    [
        ("set", {"expression": "@every 1s"}, "version: Field required"),
        ("cancel", {"version": 1.0}, "version: Input should be a valid integer (got 1.0)"),
        ("backfill", {"start_at": 1, "end_at": True}, "end_at: Input should be a valid integer"),
        ("redeliver", None, "idempotency_key: Field required"),
        ("describe", {"runs": "3"}, "runs: Input should be a valid integer (got '3')"),
        ("pause", {"note": 0}, "note: Input should be a valid string (got 0)"),
    ],
)
def test_a_refused_payload_names_the_message_the_field_and_the_value(
    name: str, payload: object, problem: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        read_payload(name, payload, 10, lambda _e, after: after + 1)
    assert str(refused.value).startswith(f"invalid {name} payload: {problem}")


@pytest.mark.parametrize("payload", [None, [], "x", 7, {"note": None, "other": 1}])
def test_pause_reads_only_its_note_from_any_payload(payload: object) -> None:
    assert read_payload("pause", payload).note is None
