"""`list` tells schedules apart by state and shows each ledger's counts:
read from the memo each workflow publishes, so no query reaches any workflow."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durability.client import DurabilityClient, Listed
from tests.support.cold_worker import LedgerActivities
from tests.support.helpers import durability_cli, eventually, record_history, running_worker
from workflows.search_attributes import SCHEDULE_STATE_MEMO_KEY

pytestmark = pytest.mark.cacheless


async def test_list_shows_never_set_live_paused_and_cancelled_schedules_apart(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    durability = DurabilityClient(client, task_queue)
    live, paused, cancelled, never = (f"ls-{name}-{unique}" for name in ("l", "p", "c", "n"))
    async with running_worker(client, task_queue):
        for object_id in (live, paused, cancelled):
            # A low continue-as-new threshold: the live one continues as new while listed.
            options = {"continue_as_new_after_events": 10} if object_id == live else None
            await durability.set_schedule(object_id, "@every 1s", 1, options=options)
        await durability.pause_schedule(paused)
        await durability.cancel_schedule(cancelled)
        # Started as docs/schedules.md's raw `temporal workflow start` does: no `set` yet.
        await client.start_workflow(
            "DurabilitySchedule",
            {"object_id": never},
            id=f"schedule:{never}",
            task_queue=task_queue,
        )
        expected = {live: "live", paused: "paused", cancelled: "cancelled", never: "never set"}
        query = f"DurabilityObjectId IN ({', '.join(repr(o) for o in expected)})"

        async def states() -> dict[str, str | None] | None:
            listed: list[Listed] = await durability.list_schedules(query)
            found = {schedule["id"]: schedule["state"] for schedule in listed}
            return found if found == expected else None

        await eventually(states, timeout=30)

        # Past a continue-as-new the state is still published (carried memo or upserted again).
        async def continued() -> bool:
            runs = client.list_workflows(f"WorkflowId = 'schedule:{live}'")
            return len([execution async for execution in runs]) >= 3

        await eventually(continued, timeout=30)
        await durability.unpause_schedule(paused)
        expected[paused] = "live"
        await eventually(states, timeout=30)
        # Published when it changes, not on every tick: live, paused, live again.
        history = await client.get_workflow_handle(f"schedule:{paused}").fetch_history()
        published = [
            event.workflow_properties_modified_event_attributes.upserted_memo.fields
            for event in history.events
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED
        ]
        assert len([m for m in published if SCHEDULE_STATE_MEMO_KEY in m]) == 3
        record_history("schedule_parent_0_1_1_state_memo", history)

        shown = await durability_cli(dev_server_address, "schedule", "list", "--query", query)
        rows = {line.split()[0]: line for line in shown.stdout.splitlines()[2:]}
        assert re.search(r"\bRUNNING\s+never set\s+-", rows[never]), shown.stdout
        assert re.search(r"\bRUNNING\s+cancelled\s+1\b", rows[cancelled]), shown.stdout
        for object_id in expected:
            await client.get_workflow_handle(f"schedule:{object_id}").terminate("test done")


async def test_ledger_list_shows_operations_per_phase(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    ledger_id = f"ls-ledger-{unique}"
    ops = [{"id": f"op-{n}", "operation_type": "t", "participants": [f"c{n}"]} for n in (1, 2)]
    held = [{"id": "op-3", "operation_type": "t", "participants": ["c3"], "dependencies": ["x"]}]
    durability = DurabilityClient(client, task_queue)
    async with running_worker(client, task_queue, LedgerActivities().all()):
        await durability.enqueue(ledger_id, ops + held)
        query = f"DurabilityLedgerId = '{ledger_id}'"

        async def counts() -> dict[str, int] | None:
            [ledger] = await durability.list_ledgers(query) or [None]  # type: ignore[list-item]
            found: dict[str, int] | None = None if ledger is None else ledger["counts"]
            return found if found == {"resolved": 2, "pending": 1} else None

        await eventually(counts, timeout=30)
        shown = await durability_cli(dev_server_address, "ledger", "list", "--query", query)
        assert re.search(rf"{ledger_id}\s+RUNNING\s+1 pending, 2 resolved\s", shown.stdout), (
            shown.stdout
        )
        as_json: list[dict[str, Any]] = json.loads(
            (
                await durability_cli(
                    dev_server_address, "ledger", "list", "--query", query, "--json"
                )
            ).stdout
        )
        assert as_json[0]["counts"] == {"resolved": 2, "pending": 1}
        await durability.stop(ledger_id)
