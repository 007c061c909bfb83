"""Forcing the cold-worker hazard (see `workflows.kernel`) on the dev server.

A scenario drives a workflow until the workflow task that applies a given completion has
completed, stops the only workflow worker, starts a new one (a new worker has an empty
cache), and sends a message at once: on an SDK with the activation-merge bug, that worker
receives the completion and the message in one activation. Activities run on a separate
worker that stays up, as in a fleet where only the workflow worker restarts.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from durability.registry import all_workflows, workflow_runner
from harness.replay import production_replayer
from tests.support.fakes import ScheduleFake
from tests.support.helpers import eventually, replay_each

REPLAY_S = 30


def cold_names() -> tuple[str, str, str]:
    """A fresh suffix for workflow IDs, the workflow task queue and the activity task queue."""
    suffix = uuid.uuid4().hex[:10]
    return suffix, f"cold-{suffix}", f"cold-act-{suffix}"


@asynccontextmanager
async def workflow_worker(client: Client, task_queue: str) -> AsyncIterator[Worker]:
    """A worker with the four workflows and no activities; each one starts with no cache."""
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=all_workflows(),
        workflow_runner=workflow_runner(),
    ) as worker:
        yield worker


@asynccontextmanager
async def activity_worker(
    client: Client, task_queue: str, activities: Sequence[Callable[..., Any]]
) -> AsyncIterator[Worker]:
    async with Worker(client, task_queue=task_queue, activities=list(activities)) as worker:
        yield worker


def kind(event: HistoryEvent) -> str:
    return EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")


async def events_of(handle: WorkflowHandle[Any, Any]) -> list[HistoryEvent]:
    return [event async for event in handle.fetch_history_events()]


async def wait_for_applied(
    handle: WorkflowHandle[Any, Any],
    completion: str,
    matches: Callable[[HistoryEvent], bool] = lambda _: True,
    timeout: float = 30,
) -> None:
    """Wait until a `completion` event (e.g. CHILD_WORKFLOW_EXECUTION_COMPLETED) matching
    `matches` is in the history and a workflow task that applied it has completed."""

    async def applied() -> bool:
        events = await events_of(handle)
        positions = [i for i, e in enumerate(events) if kind(e) == completion and matches(e)]
        if not positions:
            return False
        return any(kind(e) == "WORKFLOW_TASK_COMPLETED" for e in events[positions[-1] :])

    await eventually(applied, timeout=timeout)


def named(event: HistoryEvent) -> str:
    """An event as `id:KIND`, with the update's, signal's or activity's name."""
    detail = (
        event.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        or event.workflow_execution_signaled_event_attributes.signal_name
        or event.activity_task_scheduled_event_attributes.activity_type.name
        or event.signal_external_workflow_execution_initiated_event_attributes.signal_name
    )
    return f"{event.event_id}:{kind(event)}" + (f"({detail})" if detail else "")


def outline(events: Sequence[HistoryEvent]) -> str:
    """Every event `named`, in order."""
    return ", ".join(map(named, events))


async def assert_healthy(client: Client, handle: WorkflowHandle[Any, Any]) -> None:
    """No workflow task failed, of any cause, and the history replays with the production
    replayer (which sees the completion and the message in separate activations)."""
    events = await events_of(handle)
    failed = [
        f"{e.event_id}: {e.workflow_task_failed_event_attributes.failure.message[:300]}"
        for e in events
        if kind(e) == "WORKFLOW_TASK_FAILED"
    ]
    assert failed == [], failed
    history = await handle.fetch_history()
    try:
        await replay_each(production_replayer(all_workflows()), [history], REPLAY_S)
    except Exception as error:
        # The history is gone with the test's server: say its shape, so a rare failure can be
        # read from the log alone.
        raise AssertionError(f"{error}\nhistory: {outline(history.events)}") from error


async def assert_healthy_and_updated(client: Client, handle: WorkflowHandle[Any, Any]) -> None:
    """`assert_healthy`, and the history has at least one accepted update."""
    await assert_healthy(client, handle)
    assert any(kind(e) == "WORKFLOW_EXECUTION_UPDATE_ACCEPTED" for e in await events_of(handle))


@dataclass
class ColdScheduleFake(ScheduleFake):
    """The schedule fake with refusals that dead-letter at once, plus what a scenario's steps
    note for the later ones."""

    refusals_final: bool = True
    expected: list[int] = field(default_factory=list)  # scheduled times that must be delivered
    # The schedule expression a scenario set last, for steps that must not query the workflow.
    expression: str | None = None


@dataclass
class LedgerActivities:
    """`compile`, `submit`, `query` for the ledger, recording every frozen body sent.

    An intent whose payload has `compile_error` fails to compile; `submit_ms` makes the
    submit take that long; `submit_outcome` is what the submit answers (default `applied`);
    `query_ms` makes the query take that long. `queried` / `answered` record each query's
    request ID as it begins and ends. `complete` (the ledger's `complete_activity` when a
    scenario sets it) accepts, except for a request's first call: with `complete_gated` that
    call waits for `gate`, and with `complete_refuse` it answers blocked (`receipt mismatch`).
    `retry_after_ms` makes its first submit answer `unresolved` with that `retry_after_ms`
    (the request then waits for the ledger's grant).
    """

    sent: list[dict[str, Any]] = field(default_factory=list)
    queried: list[str] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)
    # The request ID of every `complete` call, in order.
    completions: list[str] = field(default_factory=list)
    gate: asyncio.Event = field(default_factory=asyncio.Event)

    @activity.defn(name="compile")
    async def compile(self, intent: dict[str, Any], request_id: str) -> dict[str, Any]:
        payload = intent.get("payload") or {}
        if payload.get("compile_error"):
            raise ApplicationError("cannot compile", type="CompileError", non_retryable=True)
        return {
            "operation_id": intent["id"],
            "request_id": request_id,
            "kind": intent["operation_type"],
            "payload": payload,
            "canvas_ids": sorted(set(intent.get("participants") or [])),
        }

    @activity.defn(name="submit")
    async def submit(self, request: dict[str, Any]) -> dict[str, Any]:
        first = all(body["id"] != request["id"] for body in self.sent)
        self.sent.append(request)
        retry_after = (request.get("payload") or {}).get("retry_after_ms")
        if first and retry_after is not None:
            return {"outcome": "unresolved", "error": "busy", "retry_after_ms": retry_after}
        delay = (request.get("payload") or {}).get("submit_ms", 0) / 1000
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline:
            activity.heartbeat()
            await asyncio.sleep(0.05)
        return {"outcome": (request.get("payload") or {}).get("submit_outcome", "applied")}

    @activity.defn(name="query")
    async def query(self, request: dict[str, Any]) -> dict[str, Any]:
        self.queried.append(request["id"])
        await asyncio.sleep((request.get("payload") or {}).get("query_ms", 0) / 1000)
        self.answered.append(request["id"])
        return {"outcome": "applied"}

    @activity.defn(name="complete")
    async def complete(self, request: dict[str, Any], status: dict[str, Any]) -> Any:
        first = request["id"] not in self.completions
        self.completions.append(request["id"])
        payload = request.get("payload") or {}
        if first and payload.get("complete_gated"):
            deadline = time.monotonic() + 30
            while not self.gate.is_set() and time.monotonic() < deadline:
                activity.heartbeat()
                await asyncio.sleep(0.05)
        if first and payload.get("complete_refuse"):
            return {"blocked": True, "error": "receipt mismatch"}
        return None

    def all(self) -> list[Callable[..., Any]]:
        return [self.compile, self.submit, self.query, self.complete]
