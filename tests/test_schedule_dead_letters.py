"""Dead letters a user can see and re-drive: the `dead_letters` query and the `redeliver`
update, through the `durability` CLI and the `temporal` CLI on the dev server."""

from __future__ import annotations

import json

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from tests.helpers import OutcomeReceiver, durability_cli, eventually, schedule_worker, temporal

YEARLY = "0 0 1 1 *"


async def test_dead_letters_are_kept_bounded_and_redelivered_with_their_original_key(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    receiver = OutcomeReceiver()
    object_id = f"dead-{unique}"
    async with schedule_worker(client, task_queue, receiver.activities()):
        handle = await client.start_workflow(
            "DurabilitySchedule",
            {
                "max_dead_letters": 2,
                "outcome_retries": {"max_attempts": 2, "initial_interval_ms": 50},
            },
            id=f"schedule:{object_id}",
            task_queue=task_queue,
        )
        await handle.execute_update("set", {"expression": YEARLY, "version": 1, "params": {"n": 1}})
        triggered = []
        for _ in range(3):
            triggered.append(await handle.execute_update("trigger", {}, result_type=int))

            async def lettered(count: int = len(triggered)) -> bool:
                letters = await handle.query("dead_letters")
                return len(letters) == min(count, 2) and not await handle.query("runs")

            await eventually(lettered, timeout=30)
        # The oldest of the three was dropped: at most max_dead_letters are kept.
        shown = await temporal(
            dev_server_address,
            "workflow", "query", "--workflow-id", handle.id, "--name", "dead_letters",
            "--output", "json",
        )  # fmt: skip
        letters = json.loads(shown.stdout)["queryResult"][0]
        assert [d["scheduled_time"] for d in letters] == triggered[1:]
        first = letters[0]
        assert first["idempotency_key"] == f"{object_id}:{triggered[1]}"
        assert first["outcome"] == {"status": "complete", "error": None}
        assert first["error"] == {"name": "Unavailable", "message": "receiver down"}
        assert first["redelivering"] is False

        # A key with no dead letter is refused, naming it; nothing changes.
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("redeliver", {"idempotency_key": f"{object_id}:1"})
        cause = refused.value.cause
        assert isinstance(cause, ApplicationError)
        assert (cause.type, cause.non_retryable) == ("InvalidRequest", True)
        assert f"{object_id}:1" in cause.message

        receiver.refusing = False
        calls_before = len(receiver.calls)
        redelivered = await durability_cli(
            dev_server_address, "schedule", "redeliver", object_id, first["idempotency_key"],
            "--json",
        )  # fmt: skip
        assert json.loads(redelivered.stdout) == {"redelivering": True}

        async def left_the_list() -> bool:
            keys = [d["idempotency_key"] for d in await handle.query("dead_letters")]
            return keys == [f"{object_id}:{triggered[2]}"]

        await eventually(left_the_list, timeout=30)
        table = await durability_cli(dev_server_address, "schedule", "dead-letters", object_id)
        assert f"{object_id}:{triggered[2]}" in table.stdout and "receiver down" in table.stdout
        await handle.terminate("test done")
    # Delivered again as it was: the same run object (the same idempotency key and params)
    # and the same outcome, a first attempt of a new delivery.
    run, outcome, attempt = receiver.calls[calls_before]
    assert len(receiver.calls) == calls_before + 1
    assert run["idempotency_key"] == first["idempotency_key"] and run["params"] == {"n": 1}
    assert outcome == {"status": "complete"} and attempt == 1
    original = next(c for c in receiver.calls if c[0]["scheduled_time"] == triggered[1])
    assert original[0] == run
