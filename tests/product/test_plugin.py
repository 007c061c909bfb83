"""`DurabilityPlugin` in a user's own client and worker: the user's workflows and their own
`run` / `on_outcome` activities beside the product's workflows and the rest of its built-in
activities, on one task queue, driven with the `temporal` CLI."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverter
from temporalio.worker import Worker

from durability.connect import ConfigurationError, data_converter
from durability.plugin import DurabilityPlugin
from tests.support.helpers import eventually, temporal

YEARLY = "0 0 1 1 *"


@activity.defn(name="greet")
async def greet(name: str) -> str:
    return f"hello {name}"


@workflow.defn(name="UserGreeting", sandboxed=False)
class UserGreeting:
    """The user's own workflow, on the same worker as durability's."""

    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(
            greet, name, start_to_close_timeout=timedelta(seconds=10)
        )


class UserActivities:
    """The user's own `run` and `on_outcome`, which replace the built-in logging ones."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.outcomes: list[tuple[dict[str, Any], dict[str, Any]]] = []

    @activity.defn(name="run")
    async def run(self, run: dict[str, Any]) -> None:
        self.runs.append(run)

    @activity.defn(name="on_outcome")
    async def on_outcome(self, run: dict[str, Any], outcome: dict[str, Any]) -> None:
        self.outcomes.append((run, outcome))


async def test_a_user_worker_with_the_plugin_serves_its_own_code_and_durability(
    dev_server_address: str, task_queue: str, unique: str
) -> None:
    client = await Client.connect(dev_server_address, plugins=[DurabilityPlugin()])
    user = UserActivities()
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[UserGreeting],
        activities=[greet, user.run, user.on_outcome],
    ):
        greeting = await client.execute_workflow(
            UserGreeting.run, "ada", id=f"greeting-{unique}", task_queue=task_queue
        )
        schedule_id, ledger_id = f"schedule:plugin-{unique}", f"ledger:plugin-{unique}"
        await temporal(
            dev_server_address,
            "workflow", "start", "--type", "DurabilitySchedule", "--task-queue", task_queue,
            "--workflow-id", schedule_id, "--input", "{}",
        )  # fmt: skip
        await temporal(
            dev_server_address,
            "workflow", "update", "execute", "--workflow-id", schedule_id, "--name", "set",
            "--input", json.dumps({"expression": YEARLY, "version": 1, "params": {"p": 1}}),
        )  # fmt: skip
        await temporal(
            dev_server_address,
            "workflow", "update", "execute", "--workflow-id", schedule_id, "--name", "trigger",
            "--input", "{}",
        )  # fmt: skip
        await eventually(lambda: user.outcomes, timeout=30)
        # The ledger runs on the built-in compile/submit/query the plugin added.
        await temporal(
            dev_server_address,
            "workflow", "start", "--type", "OperationLedger", "--task-queue", task_queue,
            "--workflow-id", ledger_id, "--input", "{}",
        )  # fmt: skip
        operation = {"id": "op-1", "operation_type": "shape.create", "participants": ["c1"]}
        await temporal(
            dev_server_address,
            "workflow", "update", "execute", "--workflow-id", ledger_id, "--name", "enqueue",
            "--input", json.dumps({"operations": [operation]}),
        )  # fmt: skip

        async def resolved() -> bool:
            snap = await client.get_workflow_handle(ledger_id).query("snapshot")
            return [op["phase"] for op in snap["operations"]] == ["resolved"]

        await eventually(resolved, timeout=30)
        for workflow_id in (schedule_id, ledger_id):
            await client.get_workflow_handle(workflow_id).terminate("test done")
    assert greeting == "hello ada"
    [run] = user.runs
    assert run["idempotency_key"] == f"plugin-{unique}:{run['scheduled_time']}"
    assert run["params"] == {"p": 1}
    assert user.outcomes == [(run, {"status": "complete"})]


# --- where the plugin goes, with encryption on ------------------------------------------

KEY = base64.b64encode(os.urandom(32)).decode()
ENCRYPTED = {"DURABILITY_ENCRYPTION_KEYS": f"A:{KEY}"}


async def stored_run_input(raw: Client, schedule_id: str) -> Payload | None:
    """The first run's input as the server stores it (read without any codec)."""
    async for event in raw.get_workflow_handle(schedule_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            return event.start_child_workflow_execution_initiated_event_attributes.input.payloads[0]
    return None


async def run_one(client: Client, worker: Worker, schedule_id: str, task_queue: str) -> Payload:
    """Set a schedule whose params hold a secret, trigger a run, return its stored input."""
    async with worker:
        handle = await client.start_workflow(
            "DurabilitySchedule", {}, id=schedule_id, task_queue=task_queue
        )
        await handle.execute_update(
            "set", {"expression": YEARLY, "version": 1, "params": {"secret": "s3cret"}}
        )
        await handle.execute_update("trigger", {})
        raw = await Client.connect(client.service_client.config.target_host)
        payload: Payload = await eventually(lambda: stored_run_input(raw, schedule_id))
        await handle.terminate("test done")
    return payload


async def test_on_the_client_the_plugin_encrypts_a_runs_input(
    dev_server_address: str, task_queue: str, unique: str
) -> None:
    client = await Client.connect(dev_server_address, plugins=[DurabilityPlugin(env=ENCRYPTED)])
    worker = Worker(client, task_queue=task_queue)
    payload = await run_one(client, worker, f"schedule:on-client-{unique}", task_queue)
    assert payload.metadata["encoding"] == b"binary/encrypted"
    assert b"s3cret" not in payload.data


async def test_on_a_worker_with_the_same_converter_the_plugin_encrypts_a_runs_input(
    dev_server_address: str, task_queue: str, unique: str
) -> None:
    client = await Client.connect(dev_server_address, data_converter=data_converter(ENCRYPTED))
    worker = Worker(client, task_queue=task_queue, plugins=[DurabilityPlugin(env=ENCRYPTED)])
    payload = await run_one(client, worker, f"schedule:on-worker-{unique}", task_queue)
    assert payload.metadata["encoding"] == b"binary/encrypted"
    assert b"s3cret" not in payload.data


@pytest.mark.parametrize(
    ("client_converter", "expected"),
    [
        (None, "uses DefaultPayloadConverter, not the pydantic payload converter"),
        (pydantic_data_converter, "does not encrypt payloads, but DURABILITY_ENCRYPTION_KEYS"),
        (
            data_converter(
                {"DURABILITY_ENCRYPTION_KEYS": f"A:{base64.b64encode(os.urandom(32)).decode()}"}
            ),
            "encrypts with another key ring",
        ),
        (
            dataclasses.replace(
                data_converter(ENCRYPTED), failure_converter_class=DefaultFailureConverter
            ),
            "uses DefaultFailureConverter, which leaves failure messages in clear",
        ),
    ],
)
async def test_on_a_worker_whose_client_encodes_otherwise_the_plugin_refuses(
    dev_server_address: str,
    task_queue: str,
    client_converter: DataConverter | None,
    expected: str,
) -> None:
    """Otherwise the worker would write a run's params in clear with encryption set."""
    client = await Client.connect(
        dev_server_address, data_converter=client_converter or DataConverter.default
    )
    with pytest.raises(ConfigurationError) as refused:
        Worker(client, task_queue=task_queue, plugins=[DurabilityPlugin(env=ENCRYPTED)])
    message = str(refused.value)
    assert message.startswith("DurabilityPlugin on a Worker: the worker's client ")
    assert expected in message
    assert "data_converter=durability.connect.data_converter()" in message
    assert "\n" not in message
