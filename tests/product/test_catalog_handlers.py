"""Handlers registered from a message catalog behave as hand-decorated ones, on a real server.

`workflows.handlers.handlers_from` adds each message's signal, update (with its validator)
and query handlers to a workflow class; these tests run such a workflow on the dev server
and check each kind end to end: a signal applied and a bad one dropped and counted, an update
applied and a bad one rejected by its validator with nothing recorded, an async update, a
query with and without an argument, the handlers' descriptions from the catalog, and that
the recorded history replays.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field
from temporalio import workflow
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.worker import Replayer, Worker

from workflows.catalog import Catalog, Kind, Message, kinds
from workflows.handlers import CatalogShell, handlers_from
from workflows.kernel import ShellKernel
from workflows.validation import InvalidRequest


class AddPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    amount: int = Field(ge=1, le=100)


CATALOG = Catalog(
    [
        Message(
            "add",
            "Add an amount to the total. Returns the new total.",
            kinds(Kind.SIGNAL, Kind.UPDATE),
            AddPayload,
            returns="the new total",
            wakes=True,
        ),
        Message("double", "Double the total, after one timer.", kinds(Kind.UPDATE)),
        Message("total", "The total.", kinds(Kind.QUERY)),
        Message(
            "total_plus",
            "The total plus an amount.",
            kinds(Kind.QUERY),
            AddPayload,
            query_takes_payload=True,
        ),
        Message("dropped", "How many signals were dropped.", kinds(Kind.QUERY)),
    ]
)


@workflow.defn(name="CatalogCounter", sandboxed=False)
@handlers_from(CATALOG)
class CatalogCounter(CatalogShell):
    @workflow.init
    def __init__(self) -> None:
        self._total = 0
        self._dropped = 0
        self._kernel = ShellKernel(ValueError, self._count_drop)

    def _count_drop(self) -> int:
        self._dropped += 1
        return self._dropped

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self._total >= 1000)
        return self._total

    def apply_add(self, payload: AddPayload) -> int:
        self._total += payload.amount
        return self._total

    async def apply_double(self, _: Any) -> int:
        await workflow.sleep(0.01)
        self._total *= 2
        return self._total

    def check_add(self, payload: AddPayload) -> None:
        if self._total + payload.amount > 1000:
            raise InvalidRequest(f"add.amount {payload.amount} would pass 1000")

    def query_total(self) -> int:
        return self._total

    def query_total_plus(self, payload: AddPayload) -> int:
        return self._total + payload.amount

    def query_dropped(self) -> int:
        return self._dropped


async def test_catalog_handlers_behave_as_decorated_ones(client: Client, task_queue: str) -> None:
    workflow_id = f"catalog-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=[CatalogCounter]):
        handle = await client.start_workflow(
            CatalogCounter.run, id=workflow_id, task_queue=task_queue
        )
        assert await handle.execute_update("add", {"amount": 5}) == 5
        await handle.signal("add", {"amount": 7})
        await handle.signal("add", {"amount": "7"})  # strict: a string is no int
        await handle.signal("add", {"amount": 7, "extra": 1})
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("add", {"amount": 0})
        assert "add payload: amount" in str(refused.value.cause)
        assert "(got 0)" in str(refused.value.cause)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("add", {"amount": 100, "x": 1})
        assert "extra" in str(refused.value.cause).lower()
        assert await handle.execute_update("double") == 24
        assert await handle.query("total") == 24
        assert await handle.query("total_plus", {"amount": 3}) == 27
        assert await handle.query("dropped") == 2
        metadata = await handle.query("__temporal_workflow_metadata")
        definition = metadata.definition
        updates = {u.name: u.description for u in definition.update_definitions}
        assert updates["add"] == "Add an amount to the total."
        assert {s.name for s in definition.signal_definitions} == {"add"}
        assert {q.name for q in definition.query_definitions} >= {"total", "total_plus"}
        history = await handle.fetch_history()
    rejected = sum(
        1
        for e in history.events
        if e.HasField("workflow_execution_update_rejected_event_attributes")
    )
    assert rejected == 0  # a validator's refusal records nothing
    await Replayer(workflows=[CatalogCounter]).replay_workflow(history)
