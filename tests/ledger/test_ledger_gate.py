"""The launch gate and strict messages on the real dev server: a hold taken while an operation
compiles stops its first submit (L12); a hold can be sent again with its own token; every
message refuses an unknown field (update) or drops it, counted (signal)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import (
    Client,
    WorkflowUpdateFailedError,
)

from activities.ledger import compile_passthrough
from durability.client import DurabilityClient
from tests.support.helpers import eventually, record_history
from tests.support.ledger import (
    enqueue,
    intent,
    ledger_worker,
    operations,
    requests,
    snapshot,
    start_ledger,
    until_resolved_or_blocked,
)
from workflows.ledger.models import LedgerInput

pytestmark = pytest.mark.cacheless


async def test_a_hold_taken_while_an_operation_compiles_stops_its_first_submit(
    client: Client, task_queue: str, unique: str
) -> None:
    compiling = asyncio.Event()
    finish_compile = asyncio.Event()
    submitted: list[str] = []

    @activity.defn(name="compile")
    async def slow_compile(op: dict[str, Any], request_id: str) -> dict[str, Any]:
        compiling.set()
        await finish_compile.wait()
        return await compile_passthrough(op, request_id)

    @activity.defn(name="submit")
    async def submit(request: dict[str, Any]) -> dict[str, Any]:
        submitted.append(request["id"])
        return {"outcome": "applied"}

    @activity.defn(name="query")
    async def query(request: dict[str, Any]) -> dict[str, Any]:
        return {"outcome": "applied"}

    async with ledger_worker(client, task_queue, [slow_compile, submit, query]):
        handle = await client.start_workflow(
            "OperationLedger", LedgerInput(), id=f"ledger:{unique}", task_queue=task_queue
        )
        await handle.execute_update("enqueue", {"operations": [intent("a", ["c1"])]})
        await asyncio.wait_for(compiling.wait(), 30)
        token = await handle.execute_update("hold", {"token": "migration"}, result_type=str)
        assert token == "migration"
        finish_compile.set()

        async def frozen() -> dict[str, Any] | None:
            snap = await snapshot(handle)
            return snap if [r["phase"] for r in snap["requests"]] == ["frozen"] else None

        snap = await eventually(frozen)
        assert submitted == []  # recorded while held, never sent (L12)
        assert snap["hold_tokens"] == ["migration"]
        # The hold's answer lost: sent again with its token (as the client does), it changes
        # nothing.
        durability = DurabilityClient(client, task_queue)
        assert await durability.hold(unique, "migration") == "migration"
        assert (await snapshot(handle))["hold_tokens"] == ["migration"]
        assert await handle.execute_update("release", {"token": "migration"}, result_type=bool)

        async def resolved() -> dict[str, Any] | None:
            snap = await snapshot(handle)
            return snap if operations(snap)["a"]["phase"] == "resolved" else None

        snap = await eventually(resolved)
        assert submitted == [next(iter(requests(snap)))]
        # With the `ledger-launch-gate` marker: a request recorded while held, launched later.
        record_history("ledger_launch_gate_0_1_1", await handle.fetch_history())


@pytest.mark.parametrize(
    ("name", "raw", "named"),
    [
        ("settle", {"bogus": 1}, "bogus"),
        ("resume", {"bogus": 1}, "bogus"),
        ("hold", {"bogus": 1}, "bogus"),
        ("stop", {"bogus": 1}, "bogus"),
        ("configure", {"lanes": {"shape.update": 0}}, "lanes"),
        ("enqueue", {"operations": [intent("a", [])]}, "participants"),
    ],
)
async def test_a_message_with_a_field_it_does_not_take_is_refused_or_dropped(
    client: Client, task_queue: str, unique: str, name: str, raw: Any, named: str
) -> None:
    async with ledger_worker(client, task_queue):
        handle = await client.start_workflow(
            "OperationLedger", LedgerInput(), id=f"ledger:{unique}", task_queue=task_queue
        )
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(name, raw)
        assert named in str(refused.value.cause)
        if name in ("resume", "configure", "enqueue"):  # their signal forms
            await handle.signal(name, raw)

            async def counted() -> dict[str, Any] | None:
                snap = await snapshot(handle)
                return snap if snap["dropped_signals"] == 1 else None

            snap = await eventually(counted)
        else:
            snap = await snapshot(handle)
        assert snap["operations"] == [] and not snap["stopped"] and snap["holds"] == 0


async def test_bad_release_resume_and_skip_signals_are_dropped_and_counted(
    client: Client, task_queue: str, unique: str
) -> None:
    async with ledger_worker(client, task_queue):
        handle = await start_ledger(client, unique, task_queue, LedgerInput())
        token = await handle.execute_update("hold", {}, result_type=str)
        await enqueue(handle, intent("orphan", ["c9"], ["never-enqueued"]), intent("a", ["c1"]))
        before = await snapshot(handle)
        bad = [
            ("release", {"token": 5}),  # not a string
            ("release", {"token": "not-held"}),  # not held
            ("resume", "not an object"),
            ("skip", {"operation_id": "ghost"}),  # not known
            ("skip", {"reason": "no operation_id"}),
            ("skip", {"operation_id": "a", "extra": 1}),  # unknown field
        ]
        for name, payload in bad:
            await handle.signal(name, payload)

        async def all_dropped() -> dict[str, Any] | None:
            snap = await snapshot(handle)
            return snap if snap["dropped_signals"] == len(bad) else None

        snap = await eventually(all_dropped, timeout=20)
        # Nothing changed: still held by the one token, nothing skipped or resumed.
        assert {k: v for k, v in snap.items() if k != "dropped_signals"} == {
            k: v for k, v in before.items() if k != "dropped_signals"
        }
        await handle.signal("release", {"token": token})
        await handle.signal("skip", {"operation_id": "orphan", "reason": "no canvas"})
        snap = await until_resolved_or_blocked(handle)
    ops = operations(snap)
    assert (ops["orphan"]["outcome"], ops["a"]["outcome"]) == ("skipped", "applied")
    assert snap["dropped_signals"] == len(bad) and snap["held"] is False
