"""Slots (L4) and quiet (L12) end to end: a request waiting for its retry holds no slot and no
lane place, is re-launched by the ledger's grant with the same body, key and next action,
`hold` stops grants too, and `settle` returns once no attempt is in progress. Real dev server,
real HTTP far side on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from activities.ledger import ledger_activities
from tests.support.helpers import eventually, recording_histories, save_history
from tests.support.ledger import (
    FAST_RETRY,
    Answer,
    LedgerServer,
    Responder,
    intent,
    ledger_worker,
    operations,
    recording_server,
    requests,
    snapshot,
)
from workflows.ledger.models import LedgerInput

pytestmark = pytest.mark.cacheless


@asynccontextmanager
async def live_ledger(
    client: Client, task_queue: str, ledger_id: str, answer: Responder, **config: Any
) -> AsyncIterator[tuple[LedgerServer, WorkflowHandle[Any, Any]]]:
    """A recording far side answering with `answer`, a worker calling it, and a ledger."""
    values: dict[str, Any] = {
        "submit_activity": "http_submit",
        "query_activity": "http_query",
        "retry": FAST_RETRY,
        **config,
    }
    with recording_server(answer) as server:
        async with ledger_worker(client, task_queue, ledger_activities(server.base_url)):
            handle = await client.start_workflow(
                "OperationLedger",
                LedgerInput(**values),
                id=f"ledger:{ledger_id}",
                task_queue=task_queue,
            )
            try:
                yield server, handle
            finally:
                if (await handle.describe()).status == 1:  # running: leave nothing behind
                    await handle.execute_update("stop", {})


async def enqueue(handle: WorkflowHandle[Any, Any], *intents: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = await handle.execute_update(
        "enqueue", {"operations": list(intents)}, result_type=dict
    )
    return result


async def phase_is(handle: WorkflowHandle[Any, Any], op_id: str, *phases: str) -> bool:
    return operations(await snapshot(handle)).get(op_id, {}).get("phase") in phases


async def resolved(handle: WorkflowHandle[Any, Any], op_id: str, timeout: float = 30) -> None:
    await eventually(lambda: phase_is(handle, op_id, "resolved"), timeout=timeout)


class ByOpServer:
    """A far side that reads each POST body to know its operation; answers per operation."""

    def __init__(self, decide: dict[str, list[Answer]]) -> None:
        self.decide = decide
        self.calls: dict[str, int] = {}
        self.op_of: dict[str, str] = {}
        self.lock = threading.Lock()
        self.server: LedgerServer | None = None

    def __call__(self, method: str, request_id: str, _count: int) -> Answer:
        assert self.server is not None
        with self.lock:
            if request_id not in self.op_of and request_id in self.server.bodies:
                self.op_of[request_id] = json.loads(self.server.bodies[request_id])["payload"]["op"]
            op_id = self.op_of.get(request_id, "")
            answers = self.decide.get(op_id)
            if not answers:
                return 200, {}, {"outcome": "applied"}
            n = self.calls.get(op_id, 0)
            self.calls[op_id] = n + 1
            answer = answers[min(n, len(answers) - 1)]
        delay = answer[1].get("X-Sleep")
        if delay:
            time.sleep(float(delay))
        return answer


BUSY_60: Answer = (503, {"Retry-After": "60"}, {"error": "busy"})
APPLIED: Answer = (200, {}, {"outcome": "applied"})


@asynccontextmanager
async def by_op_ledger(
    client: Client, task_queue: str, ledger_id: str, decide: dict[str, list[Answer]], **config: Any
) -> AsyncIterator[tuple[LedgerServer, WorkflowHandle[Any, Any]]]:
    far = ByOpServer(decide)
    async with live_ledger(client, task_queue, ledger_id, far, **config) as (server, handle):
        far.server = server
        yield server, handle


def ops_sent(server: LedgerServer) -> list[tuple[str, str]]:
    """(method, operation) of every call the far side received, in order."""
    op_of = {rid: json.loads(body)["payload"]["op"] for rid, body in server.bodies.items()}
    with server.lock:
        return [(r.method, op_of.get(r.request_id, "?")) for r in server.received]


async def waiting(handle: WorkflowHandle[Any, Any], *op_ids: str) -> bool:
    """Each operation's request is in flight and waiting for its retry (its slot free)."""
    snap = await snapshot(handle)
    ops, reqs = operations(snap), requests(snap)
    for op_id in op_ids:
        request = reqs.get(ops.get(op_id, {}).get("request_id") or "")
        if request is None or request["phase"] != "in_flight" or not request.get("waiting"):
            return False
    return True


async def test_requests_waiting_for_retry_after_do_not_stall_an_independent_operation(
    client: Client, task_queue: str, unique: str
) -> None:
    decide = {"a": [BUSY_60], "b": [BUSY_60]}
    async with by_op_ledger(client, task_queue, unique, decide, concurrency=2) as (server, h):
        await enqueue(h, intent("a", ["c1"]), intent("b", ["c2"]))
        await eventually(lambda: waiting(h, "a", "b"), timeout=30)
        started = time.monotonic()
        await enqueue(h, intent("c", ["c3"]))
        await resolved(h, "c")
        assert time.monotonic() - started < 20  # not after the 60 s Retry-After
        snap = await snapshot(h)
        ops = operations(snap)
        # a and b keep their claims (L5) and stay dispatched; only c resolved.
        assert {op: ops[op]["phase"] for op in "abc"} == {
            "a": "dispatched",
            "b": "dispatched",
            "c": "resolved",
        }
        assert snap["claims"] == {"c1": ops["a"]["request_id"], "c2": ops["b"]["request_id"]}
        for op_id in "ab":
            request = requests(snap)[ops[op_id]["request_id"]]
            assert request["retry_at"] is not None and request["retry_action"] == "query"
        # Nothing is in progress: settle answers at once, two requests waiting.
        result = await h.execute_update("settle", {}, result_type=dict)
        assert result["waiting"] == 2 and result["held"] is False
        assert result["counts"]["operations"] == {"dispatched": 2, "resolved": 1}
    assert ops_sent(server).count(("POST", "a")) == 1
    assert server.violations == []


async def test_a_lane_counts_only_attempts_in_progress(
    client: Client, task_queue: str, unique: str
) -> None:
    decide = {"u1": [BUSY_60]}
    async with by_op_ledger(client, task_queue, unique, decide, concurrency=4) as (server, h):
        await enqueue(h, intent("u1", [], operation_type="asset.upload"))
        await eventually(lambda: waiting(h, "u1"), timeout=30)
        await enqueue(h, intent("u2", [], operation_type="asset.upload"))
        await resolved(h, "u2")  # the lane (asset.upload: 1) holds only u1's wait
    assert ops_sent(server)[:2] == [("POST", "u1"), ("POST", "u2")]


async def test_a_granted_retry_keeps_its_body_key_and_next_action(
    client: Client, task_queue: str, unique: str
) -> None:
    """concurrency 1: a answers `accepted` with a retry in 1.5 s; b takes the slot meanwhile;
    a is then granted its query (after `accepted`), with the same key."""
    accepted: Answer = (202, {}, {"outcome": "accepted", "retry_after_ms": 1500})
    decide = {"a": [accepted, APPLIED]}
    async with by_op_ledger(client, task_queue, unique, decide, concurrency=1) as (server, h):
        await enqueue(h, intent("a", ["c1"]), intent("b", ["c2"]))
        await resolved(h, "a")
        await resolved(h, "b")
        snap = await snapshot(h)
        request_a = operations(snap)["a"]["request_id"]
        child = f"request:{unique}:{request_a}"
        await client.get_workflow_handle(child).result()
        if recording_histories():
            save_history("ledger_request_grant_0_1_1", await client.get_workflow_handle(child)
                         .fetch_history())  # fmt: skip
            save_history("ledger_grant_0_1_1", await h.fetch_history())
    # a's query came after b had used the slot a left while waiting.
    assert ops_sent(server) == [("POST", "a"), ("POST", "b"), ("GET", "a")]
    sent = server.sent(request_a)
    assert [r.method for r in sent] == ["POST", "GET"]
    assert {r.key for r in sent} == {request_a}
    assert requests(snap)[request_a]["attempt"] == 2
    kinds = [e.WhichOneof("attributes") async for e in h.fetch_history_events()]
    assert "signal_external_workflow_execution_initiated_event_attributes" in kinds
    assert "workflow_task_failed_event_attributes" not in kinds


async def test_retries_are_granted_in_due_time_order(
    client: Client, task_queue: str, unique: str
) -> None:
    """concurrency 1: three requests wait (a 3 s, b 1 s, c 2 s); they retry b, c, a."""

    def busy(seconds: int) -> Answer:
        return 503, {"Retry-After": str(seconds)}, {"error": "busy"}

    decide = {"a": [busy(3), APPLIED], "b": [busy(1), APPLIED], "c": [busy(2), APPLIED]}
    async with by_op_ledger(client, task_queue, unique, decide, concurrency=1) as (server, h):
        await enqueue(h, intent("a", ["c1"]), intent("b", ["c2"]), intent("c", ["c3"]))
        for op_id in "abc":
            await resolved(h, op_id)
    assert ops_sent(server) == [
        ("POST", "a"),
        ("POST", "b"),
        ("POST", "c"),
        ("GET", "b"),  # after a submit, the next action is a query (L7)
        ("GET", "c"),
        ("GET", "a"),
    ]


async def test_hold_blocks_a_due_retry_until_release(
    client: Client, task_queue: str, unique: str
) -> None:
    busy_1s: Answer = (503, {"Retry-After": "1"}, {"error": "busy"})
    decide = {"a": [busy_1s, APPLIED]}
    async with by_op_ledger(client, task_queue, unique, decide) as (server, h):
        await enqueue(h, intent("a", ["c1"]))
        await eventually(lambda: waiting(h, "a"), timeout=30)
        token = await h.execute_update("hold", {}, result_type=str)
        time.sleep(2.5)  # the retry is due meanwhile
        assert await phase_is(h, "a", "dispatched")
        assert ops_sent(server) == [("POST", "a")]
        await h.execute_update("release", {"token": token})
        await resolved(h, "a")
    assert ops_sent(server) == [("POST", "a"), ("GET", "a")]


async def test_settle_returns_once_the_attempt_in_progress_ends(
    client: Client, task_queue: str, unique: str
) -> None:
    slow: Answer = (200, {"X-Sleep": "3"}, {"outcome": "applied"})
    decide = {"a": [slow]}
    async with by_op_ledger(client, task_queue, unique, decide) as (server, h):
        quiet = await h.execute_update("settle", {}, result_type=dict)
        assert quiet == {
            "held": False,
            "waiting": 0,
            "counts": {"operations": {}, "requests": {}, "forgotten": 0, "resolved_total": 0},
        }
        await enqueue(h, intent("a", ["c1"]))
        await eventually(lambda: bool(server.received), timeout=30)
        token = await h.execute_update("hold", {}, result_type=str)
        await enqueue(h, intent("b", ["c2"]))  # held: never launched
        result = await h.execute_update("settle", {}, result_type=dict)
        # The submit answered (3 s) before settle did: a is resolved, b still pending.
        assert operations(await snapshot(h))["a"]["phase"] == "resolved"
        assert result["held"] is True
        assert result["counts"]["operations"] == {"pending": 1, "resolved": 1}
        assert result["counts"]["resolved_total"] == 1
        with pytest.raises(WorkflowUpdateFailedError) as bad:
            await h.execute_update("settle", [1])
        assert "settle input" in str(bad.value.cause)
        await h.execute_update("release", {"token": token})
        await resolved(h, "b")
        await h.execute_update("stop", {})
        with pytest.raises(Exception, match=r"completed|stopped"):
            await h.execute_update("settle", {})
