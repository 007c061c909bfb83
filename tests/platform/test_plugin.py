"""`DurabilityPlugin` in a user's own client and worker: the user's workflows and their own
`run` / `on_outcome` activities beside the product's workflows and the rest of its built-in
activities, on one task queue, driven with the `temporal` CLI."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

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
