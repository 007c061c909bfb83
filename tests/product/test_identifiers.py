"""Object and ledger IDs: empty, blank, spaces around them, control characters, and IDs past
Temporal's limits are refused by the client and the CLI before anything is sent, naming the
ID, and a workflow started with one by hand (or by signal- or update-with-start) fails once
(`InvalidStartInput`). An ID at the limit, non-ASCII included, runs and upserts its search
attribute. Temporal measures a Keyword search attribute's value as the SDK encodes it (JSON,
non-ASCII escaped): 400 x `ü` is 800 bytes of UTF-8 but 2402 bytes there."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from durability.client import DurabilityClient
from tests.support.helpers import durability_cli, running_worker, temporal
from workflows import search_attributes
from workflows.limits import MAX_KEYWORD_BYTES, keyword_bytes
from workflows.validation import InvalidRequest

BAD_IDS = ["", "   ", " acct", "acct ", "ac\tct", "ac\nct", "ac\x7fct", "ac\u202ect", "ac\u2028ct"]
# At Temporal's limit (2 + 341 x 6 bytes as the server measures it), and one past it.
AT_LIMIT = "ü" * 341
PAST_LIMIT = "ü" * 342
EMOJI_PAST_LIMIT = "\U0001f600" * 171


def test_the_limit_is_measured_as_the_server_measures_it() -> None:
    assert keyword_bytes("ü" * 400) == 2402  # the server's "value size 2402"
    assert keyword_bytes(AT_LIMIT) == MAX_KEYWORD_BYTES < keyword_bytes(PAST_LIMIT)
    assert keyword_bytes(EMOJI_PAST_LIMIT) > MAX_KEYWORD_BYTES


async def nothing_created(address: str, workflow_id: str) -> None:
    described = await temporal(
        address, "workflow", "describe", "--workflow-id", workflow_id, check=False
    )
    assert described.returncode != 0, described.stdout


@pytest.mark.parametrize("bad", [*BAD_IDS, PAST_LIMIT, EMOJI_PAST_LIMIT])
async def test_the_client_refuses_a_bad_id_naming_it_and_creates_nothing(
    client: Client, dev_server_address: str, bad: str
) -> None:
    durability = DurabilityClient(client, f"tq-{uuid.uuid4().hex[:12]}")
    with pytest.raises(InvalidRequest, match="object_id"):
        await durability.set_schedule(bad, "@hourly", 1)
    with pytest.raises(InvalidRequest, match="object_id"):
        await durability.signal_set_schedule(bad, "@hourly", 1)
    with pytest.raises(InvalidRequest, match="ledger_id"):
        await durability.enqueue(bad, [{"id": "op", "operation_type": "t", "participants": ["c"]}])
    with pytest.raises(InvalidRequest, match="ledger_id"):
        await durability.snapshot(bad)
    if bad.strip() == bad and bad:  # IDs a shell can pass as they are
        await nothing_created(dev_server_address, f"schedule:{bad}")
        await nothing_created(dev_server_address, f"ledger:{bad}")


@pytest.mark.parametrize("bad", ["", "   ", "ac\tct", "ac\nct", PAST_LIMIT])
async def test_the_cli_refuses_a_bad_id_naming_it_and_creates_nothing(
    dev_server_address: str, bad: str
) -> None:
    refused = await durability_cli(
        dev_server_address, "schedule", "set", bad, "@hourly", "--version", "1", check=False
    )
    assert refused.returncode != 0 and "object_id" in refused.stderr, refused
    assert "Traceback" not in refused.stderr
    refused = await durability_cli(dev_server_address, "ledger", "snapshot", bad, check=False)
    assert refused.returncode != 0 and "ledger_id" in refused.stderr, refused
    await nothing_created(dev_server_address, f"schedule:{bad}")


async def fails_once_naming_the_id(client: Client, workflow_id: str, field: str) -> None:
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(client.get_workflow_handle(workflow_id).result(), 30)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidStartInput", cause
    assert field in str(cause.message), cause.message


async def test_a_workflow_started_by_hand_with_a_bad_id_fails_once(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    async with running_worker(client, task_queue):
        await temporal(
            dev_server_address, "workflow", "start", "--type", "DurabilitySchedule",
            "--task-queue", task_queue, "--workflow-id", "schedule:",
            "--id-conflict-policy", "TerminateExisting",
        )  # fmt: skip
        await fails_once_naming_the_id(client, "schedule:", "object_id")
        blank = f"ledger:  {unique}\t"
        await client.start_workflow(
            "OperationLedger", {}, id=blank, task_queue=task_queue, start_signal="resume"
        )
        await fails_once_naming_the_id(client, blank, "ledger_id")
        tabbed = f"schedule:a\t{unique}"
        await client.start_workflow(
            "DurabilitySchedule",
            {"object_id": f"a\t{unique}"},
            id=tabbed,
            task_queue=task_queue,
            start_signal="set",
            start_signal_args=[{"expression": "@every 1s", "version": 1}],
        )
        await fails_once_naming_the_id(client, tabbed, "object_id")


async def search_attribute(client: Client, workflow_id: str, key: Any) -> Any:
    description = await client.get_workflow_handle(workflow_id).describe()
    return description.typed_search_attributes.get(key)


async def test_ids_at_the_limit_run_and_upsert_their_search_attributes(
    client: Client, task_queue: str, unique: str
) -> None:
    # Exactly at the limit, unique per run: `ü`s, then ASCII.
    umlauts, ascii_left = divmod(MAX_KEYWORD_BYTES - 2 - len(unique), 6)
    object_id = "ü" * umlauts + "x" * ascii_left + unique
    assert keyword_bytes(object_id) == MAX_KEYWORD_BYTES
    durability = DurabilityClient(client, task_queue)
    async with running_worker(client, task_queue):
        assert await durability.set_schedule(object_id, "@every 1s", 1)
        assert await durability.trigger_schedule(object_id)
        assert await durability.enqueue(
            object_id, [{"id": "op", "operation_type": "t", "participants": ["c"]}]
        )

        async def both_upserted() -> bool:
            schedule = await search_attribute(
                client, f"schedule:{object_id}", search_attributes.OBJECT_ID
            )
            ledger = await search_attribute(
                client, f"ledger:{object_id}", search_attributes.LEDGER_ID
            )
            return bool(schedule == object_id and ledger == object_id)

        for _ in range(100):
            if await both_upserted():
                break
            await asyncio.sleep(0.2)
        assert await both_upserted()
        assert (await durability.get_schedule(object_id)) is not None
        for workflow_id in (f"schedule:{object_id}", f"ledger:{object_id}"):
            description = await client.get_workflow_handle(workflow_id).describe()
            assert description.status is not None and description.status.name == "RUNNING"
