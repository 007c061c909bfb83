"""The TypeScript caller (examples/typescript) against the dev server.

`make tools` installs examples/typescript from npm and compiles it; this test runs its demo
(`dist/demo.js`) while an in-process worker serves the product, checks the JSON line it prints
and then checks from Python what the TypeScript client did. A wire change that breaks a
non-Python caller (a renamed message, a result field moved or retyped) fails here.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from durability.client import DurabilityClient
from tests.support.helpers import (
    PROJECT_ROOT,
    eventually,
    run_command,
    running_worker,
    subprocess_env,
)
from workflows import search_attributes
from workflows.schedule.cron import next_occurrence

EXAMPLE = PROJECT_ROOT / "examples" / "typescript"
DEMO = EXAMPLE / "dist" / "demo.js"
OPERATION_IDS = ["op-1", "op-2", "op-3"]
# What the demo's chain (op-2 after op-1, op-3 after op-2) touches; the built-in compile
# freezes the sorted, deduplicated participants as the request's canvases.
CANVASES = {"op-1": ["canvas-a"], "op-2": ["canvas-a", "canvas-b"], "op-3": ["canvas-b"]}
PHASES = {"pending", "dispatched", "resolved", "blocked"}


def demo_argv(address: str, task_queue: str, suffix: str) -> list[str]:
    if not DEMO.exists():
        pytest.fail(
            f"{DEMO.relative_to(PROJECT_ROOT)} is missing: run `make tools` (it installs "
            "examples/typescript from npm and compiles it with tsc)"
        )
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "node is not on PATH: the TypeScript caller needs Node.js 20 (see `make tools`)"
        )
    return [
        node,
        str(DEMO),
        "--address",
        address,
        "--task-queue",
        task_queue,
        "--suffix",
        suffix,
        "--timeout-ms",
        "90000",
    ]


def demo_line(stdout: str, stderr: str, returncode: int) -> dict[str, Any]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    if returncode != 0 or not lines:
        raise AssertionError(
            f"examples/typescript/dist/demo.js exited {returncode}\n"
            f"stdout:\n{stdout}\nstderr:\n{stderr}"
        )
    line: dict[str, Any] = json.loads(lines[-1])
    return line


@pytest.mark.timeout(300)
async def test_typescript_caller_sets_triggers_cancels_and_runs_a_ledger(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    argv = demo_argv(dev_server_address, task_queue, unique)
    object_id = ledger_id = f"ts-demo-{unique}"
    async with running_worker(client, task_queue):
        done = await run_command(
            argv, check=False, env=subprocess_env(dev_server_address), timeout=240
        )
        result = demo_line(done.stdout, done.stderr, done.returncode)

        # -- what the TypeScript side saw ---------------------------------------------------
        triggered = result["triggered"]
        assert isinstance(triggered, int)
        assert result["ok"] is True
        assert result["unknown_fields"] == [], "results carry fields src/wire.ts does not know"
        assert result["object_id"] == object_id
        assert result["schedule_workflow_id"] == f"schedule:{object_id}"
        assert result["applied"] is True
        assert result["resent"] is False
        assert result["schedule"] == {
            "expression": "@yearly",
            "version": 1,
            "jitter_ms": 0,
            "next_at": next_occurrence("@yearly", triggered),
            "params": {"source": "typescript", "suffix": unique},
        }
        assert set(result["run_states"]) <= {"queued", "running", "complete"}
        assert result["cancelled"] is True
        assert result["after_cancel"] is None
        assert result["trigger_after_cancel"] == "NoLiveSchedule"

        assert result["ledger_id"] == ledger_id
        assert result["ledger_workflow_id"] == f"ledger:{ledger_id}"
        assert result["enqueued"] == {"accepted": OPERATION_IDS, "duplicates": [], "conflicts": []}
        assert result["enqueued_again"] == {"accepted": [], "duplicates": ["op-1"], "conflicts": []}
        assert result["cycle_rejected"] == "InvalidRequest"
        assert result["resolved"] == OPERATION_IDS
        assert result["outcomes"] == dict.fromkeys(OPERATION_IDS, "applied")
        assert result["sequences"] == {"op-1": 1, "op-2": 2, "op-3": 3}
        assert result["canvases"] == CANVASES
        assert result["phases"] == {"resolved": 3}
        assert result["request_phases"] == {"resolved": 3}
        assert result["pages"] == [["op-1", "op-2"], ["op-3"]]
        assert result["next_after"] == [2, None]
        assert (result["stopped"], result["held"], result["claims"]) == (False, False, {})
        for op_id in OPERATION_IDS:
            seen = result["observed_phases"][op_id]
            assert seen[-1] == "resolved" and set(seen) <= PHASES, (op_id, seen)

        # -- the schedule, seen from Python -------------------------------------------------
        schedule = client.get_workflow_handle(f"schedule:{object_id}")
        described = await schedule.describe()
        assert described.workflow_type == "DurabilitySchedule"
        assert described.task_queue == task_queue
        assert described.status == WorkflowExecutionStatus.RUNNING
        attributes = described.typed_search_attributes
        assert attributes.get(search_attributes.OBJECT_ID) == object_id
        assert attributes.get(search_attributes.SCHEDULE_VERSION) == 1
        assert await schedule.query("get") is None
        assert await schedule.query("runs") == []
        # The TypeScript cancel left a tombstone of version 1: setting it again changes nothing.
        python = DurabilityClient(client, task_queue)
        assert await python.set_schedule(object_id, "@yearly", version=1) is False
        assert await python.get_schedule(object_id) is None

        # The triggered run was one ScheduledRun child, named by its scheduled_time.
        run = client.get_workflow_handle(f"schedule-run:{object_id}:{triggered}")

        async def run_completed() -> bool:
            run_description = await run.describe()
            assert run_description.workflow_type == "ScheduledRun"
            return run_description.status == WorkflowExecutionStatus.COMPLETED

        await eventually(run_completed, timeout=60)

        # -- the ledger, seen from Python ---------------------------------------------------
        ledger = client.get_workflow_handle(f"ledger:{ledger_id}")
        described = await ledger.describe()
        assert described.workflow_type == "OperationLedger"
        assert described.task_queue == task_queue
        assert described.typed_search_attributes.get(search_attributes.LEDGER_ID) == ledger_id
        snapshot = await python.snapshot(ledger_id)
        assert snapshot["ledger_id"] == ledger_id
        assert [
            (op["id"], op["sequence"], op["phase"], op["outcome"], op["request_id"])
            for op in snapshot["operations"]
        ] == [
            (op_id, index, "resolved", "applied", result["request_ids"][op_id])
            for index, op_id in enumerate(OPERATION_IDS, start=1)
        ]
        assert {
            request["operation_ids"][0]: request["canvas_ids"] for request in snapshot["requests"]
        } == CANVASES

        # The dependencies held: each request child started only after the request of the
        # operation it depends on reported its end to the ledger (L3).
        request_ids = result["request_ids"]
        started: dict[str, int] = {}
        finished: dict[str, int] = {}
        async for event in ledger.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
                child_id = (
                    event.start_child_workflow_execution_initiated_event_attributes.workflow_id
                )
                started.setdefault(child_id.rpartition(":")[2], event.event_id)
                assert child_id.startswith(f"request:{ledger_id}:"), child_id
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                attributes_ = event.workflow_execution_signaled_event_attributes
                if attributes_.signal_name == "request_finished":
                    [report] = await client.data_converter.decode(attributes_.input.payloads)
                    finished.setdefault(report["request_id"], event.event_id)
        assert set(started) == set(finished) == set(request_ids.values())
        assert finished[request_ids["op-1"]] < started[request_ids["op-2"]]
        assert finished[request_ids["op-2"]] < started[request_ids["op-3"]]
