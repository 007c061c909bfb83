"""Start settings are read strictly by new runs of both workflows (`workflows.validation`).

A value of another JSON type (`"2"` for 2, `true` for 1, `2.0` for 2) and, for the
schedule, an unknown field, fail a new run once, naming the field and the value. A run
recorded before, with such a setting converted or ignored, still replays: the refusal is
behind the `strict-start-settings` patch.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.exceptions import ApplicationError

from harness.replay import production_replayer
from tests.support.fakes import ScheduleFake
from tests.support.helpers import HISTORY_DIR, schedule_worker
from tests.support.ledger import ledger_worker
from workflows.ledger import core as ledger_core
from workflows.ledger.request import FrozenRequestWorkflow
from workflows.ledger.workflow import OperationLedgerWorkflow
from workflows.schedule.core import read_start
from workflows.schedule.models import ScheduleState, ScheduleWorkflowInput
from workflows.schedule.run import ScheduledRunWorkflow
from workflows.schedule.workflow import DurabilityScheduleWorkflow

# (setting, value only a lax reading accepts)
SCHEDULE_COERCED = [
    ("max_queued_runs", "2"),
    ("max_dead_letters", True),
    ("max_concurrent_runs", 2.0),
    ("run_heartbeat_timeout_ms", "1000"),
]
LEDGER_COERCED = [("concurrency", "2"), ("local_compile", 1), ("concurrency", 2.0)]


@pytest.mark.parametrize(("field", "value"), SCHEDULE_COERCED)
def test_a_converted_schedule_setting_is_named(field: str, value: Any) -> None:
    start = read_start(lambda: {field: value}, "schedule:x")
    assert start.error is None  # the lax reading, which recorded runs replay, accepts it
    assert start.coerced is not None and field in start.coerced and repr(value) in start.coerced


def test_an_unknown_schedule_setting_is_named() -> None:
    start = read_start(lambda: {"max_concurent_runs": 3}, "schedule:x")
    assert start.error is None
    assert start.coerced is not None and "unknown field(s) max_concurent_runs" in start.coerced


@pytest.mark.parametrize(("field", "value"), LEDGER_COERCED)
def test_a_converted_ledger_setting_is_named(field: str, value: Any) -> None:
    start = ledger_core.read_start(lambda: {field: value}, "ledger:x")
    assert start.error is None
    assert start.coerced is not None and field in start.coerced


def test_settings_a_run_carries_over_are_strict() -> None:
    carried = ScheduleWorkflowInput(max_queued_runs=3, carried=ScheduleState())
    start = read_start(lambda: carried.model_dump(mode="json"), "schedule:x")
    assert (start.error, start.coerced) == (None, None)
    state = ledger_core.read_start(lambda: {}, "ledger:x").state
    config = ledger_core.read_start(lambda: {"concurrency": 3}, "ledger:x").config
    carried_input = ledger_core.next_run_input(state, config, "x").model_dump(mode="json")
    assert ledger_core.read_start(lambda: carried_input, "ledger:x").coerced is None


async def test_a_new_schedule_refuses_a_converted_setting(
    client: Client, task_queue: str, unique: str
) -> None:
    async with schedule_worker(client, task_queue, ScheduleFake().activities()):
        handle = await client.start_workflow(
            "DurabilitySchedule",
            {"max_queued_runs": "2"},
            id=f"schedule:{unique}",
            task_queue=task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), timeout=20)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidStartInput"
    assert cause.details == ({"former_type": "InvalidScheduleInput"},)
    assert "max_queued_runs" in cause.message and "'2'" in cause.message


async def test_a_new_ledger_refuses_a_converted_setting(
    client: Client, task_queue: str, unique: str
) -> None:
    async with ledger_worker(client, task_queue):
        handle = await client.start_workflow(
            "OperationLedger", {"concurrency": "2"}, id=f"ledger:{unique}", task_queue=task_queue
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), timeout=20)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidStartInput"
    assert cause.details == ({"former_type": "InvalidLedgerInput"},)
    assert "concurrency" in cause.message and "'2'" in cause.message


def _with_start_input(name: str, change: dict[str, Any]) -> WorkflowHistory:
    """A committed history whose start input had `change` merged in: settings the recording
    release converted to the very values it ran with, so the commands are those recorded."""
    recorded = json.loads((HISTORY_DIR / name).read_text())
    attributes = recorded["history"]["events"][0]["workflowExecutionStartedEventAttributes"]
    payload = attributes["input"]["payloads"][0]
    start_input = json.loads(base64.b64decode(payload["data"])) | change
    payload["data"] = base64.b64encode(json.dumps(start_input).encode()).decode()
    return WorkflowHistory.from_json(recorded["workflow_id"], recorded["history"])


async def test_a_schedule_recorded_with_converted_settings_still_replays() -> None:
    history = _with_start_input(
        "schedule_parent_0_1_0.json", {"continue_as_new_after_events": "120", "note": "kept"}
    )
    replayer = production_replayer([DurabilityScheduleWorkflow, ScheduledRunWorkflow])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


async def test_a_ledger_recorded_with_converted_settings_still_replays() -> None:
    recorded = json.loads((HISTORY_DIR / "ledger_continue_as_new.json").read_text())
    attributes = recorded["history"]["events"][0]["workflowExecutionStartedEventAttributes"]
    concurrency = json.loads(base64.b64decode(attributes["input"]["payloads"][0]["data"]))
    history = _with_start_input(
        "ledger_continue_as_new.json", {"concurrency": str(concurrency["concurrency"])}
    )
    replayer = production_replayer([OperationLedgerWorkflow, FrozenRequestWorkflow])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
