"""`stop` forgets nothing, end to end: a real dev server, a real worker and
a recording HTTP far side on 127.0.0.1.

Before the ledger completes, each request whose submit may have reached the far side is asked
once (a query with its frozen body and key), within the bound `stop` takes; what stays unknown
is listed in the final result's `unknown` with its frozen body and next action.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities.ledger import ledger_activities
from durability.registry import workflow_runner
from tests.support.helpers import cache_options, durability_cli, eventually
from tests.support.ledger import (
    DELAY_HEADER,
    Answer,
    LedgerServer,
    enqueue,
    http_input,
    in_flight_request,
    intent,
    ledger_worker,
    live_ledger,
    operations,
    record_history,
    recording_server,
    snapshot,
    start_ledger,
)
from workflows.ledger.models import RetryConfig
from workflows.ledger.workflow import OperationLedgerWorkflow

pytestmark = pytest.mark.cacheless

# After `accepted` the request waits a minute for its query: `stop` comes in that wait.
SLOW_RETRY = RetryConfig(initial_interval_ms=60_000, maximum_interval_ms=60_000)


async def all_waiting(handle: WorkflowHandle[Any, Any], count: int) -> None:
    """`count` requests submitted once and waiting for their retry (a query)."""

    async def waiting() -> bool:
        reqs = (await snapshot(handle))["requests"]
        ready = [r for r in reqs if r["attempt"] == 1 and r["retry_action"] == "query"]
        return len(ready) == count

    await eventually(waiting, timeout=30)


def sent_bodies(server: LedgerServer) -> dict[str, Any]:
    return {r.request_id: json.loads(r.body or "") for r in server.received if r.method == "POST"}


def gets(server: LedgerServer) -> list[str]:
    return [r.request_id for r in server.received if r.method == "GET"]


async def test_stop_mid_wait_asks_the_far_side_and_an_applied_answer_resolves_it(
    client: Client, task_queue: str, unique: str
) -> None:
    def accepted_then_applied(method: str, _request_id: str, _count: int) -> Answer:
        return (202, {}, {"outcome": "accepted"}) if method == "POST" else (200, {}, {
            "outcome": "applied", "canonical": {"v": 2}})  # fmt: skip

    async with live_ledger(client, task_queue, unique, accepted_then_applied, retry=SLOW_RETRY) as (
        server,
        handle,
    ):
        await enqueue(handle, intent("a", ["c1"]))
        await all_waiting(handle, 1)
        assert gets(server) == []  # its own query is a minute away
        final = await handle.execute_update("stop", {}, result_type=dict)
        await record_history(client, handle.id, "stop_final_query_0_1_1")
        [request_id] = sent_bodies(server)
        await record_history(
            client, f"request:{unique}:{request_id}", "stop_final_query_child_0_1_1"
        )
    assert await handle.result() == final
    assert gets(server) == [request_id]  # asked once, by the stop
    assert final["resolved_at_stop"] == [
        {"request_id": request_id, "operation_ids": ["a"], "outcome": "applied"}
    ]
    assert final["unknown"] == []
    assert operations(final)["a"]["outcome"] == "applied"
    assert final["claims"] == {}
    assert server.violations == []


async def test_what_stays_unknown_is_listed_with_its_frozen_body_and_next_action(
    client: Client, task_queue: str, unique: str
) -> None:
    """One far side answers the stop's query `unresolved`, the other hangs past the deadline."""
    hang: set[str] = set()

    def undecided(method: str, request_id: str, _count: int) -> Answer:
        if method == "POST":
            return 202, {}, {"outcome": "accepted"}
        if request_id in hang:  # answers past the stop's 1.5 s deadline
            return 200, {DELAY_HEADER: "20"}, {"outcome": "applied"}
        return 200, {}, {"outcome": "unresolved"}

    async with live_ledger(client, task_queue, unique, undecided, retry=SLOW_RETRY) as (
        server,
        handle,
    ):
        await enqueue(handle, intent("a", ["c1"]), intent("b", ["c2"]))
        await all_waiting(handle, 2)
        by_op = {body["operation_ids"][0]: rid for rid, body in sent_bodies(server).items()}
        hang.add(by_op["b"])
        started = time.monotonic()
        final = await handle.execute_update("stop", {"query_deadline_ms": 1500}, result_type=dict)
        took = time.monotonic() - started
    bodies = sent_bodies(server)
    assert sorted(gets(server)) == sorted(bodies)  # each asked once
    assert final["resolved_at_stop"] == []
    unknown = {entry["operation_ids"][0]: entry for entry in final["unknown"]}
    assert sorted(unknown) == ["a", "b"]
    for op_id, at_stop in (("a", "unresolved"), ("b", "no_answer")):
        entry = unknown[op_id]
        assert entry["request"] == bodies[entry["request_id"]]  # the frozen body, whole
        assert entry["request"]["idempotency_key"] == entry["request_id"]
        assert (entry["next_action"], entry["attempt"], entry["at_stop"]) == (
            "query",
            2 if at_stop == "unresolved" else 1,
            at_stop,
        )
    assert unknown["a"]["last_status"] == {"outcome": "unresolved"}
    assert unknown["b"]["last_status"] == {"outcome": "accepted"}  # the last it said
    # Their canvases stay claimed: whoever takes the ledger ID next must reconcile first.
    assert final["claims"] == {"c1": by_op["a"], "c2": by_op["b"]}
    assert 1.5 <= took < 15, took  # the deadline, not the 20 s hanging far side, ended the stop


async def test_a_request_never_sent_is_not_asked(
    client: Client, task_queue: str, unique: str
) -> None:
    """Blocked at freeze (unsupported protocol: never handed to a request workflow), held
    (never dispatched): the far side hears nothing."""
    async with live_ledger(client, task_queue, unique, retry=SLOW_RETRY) as (server, handle):
        await enqueue(handle, intent("v2", ["c1"], protocol_version=2))

        async def both_blocked() -> bool:
            ops = operations(await snapshot(handle))
            return bool(ops["v2"]["phase"] == "blocked")

        await eventually(both_blocked, timeout=30)
        await handle.execute_update("hold", {})
        await enqueue(handle, intent("held", ["c2"]))
        final = await handle.execute_update("stop", {}, result_type=dict)
    assert server.received == []
    assert final["unknown"] == [] and final["resolved_at_stop"] == []
    assert operations(final)["held"]["phase"] == "pending"
    [frozen] = final["requests"]
    assert frozen["blocker"] == "request_interpreter_unavailable"


async def test_past_the_query_limit_requests_are_listed_unknown_without_a_query(
    client: Client, task_queue: str, unique: str
) -> None:
    def accepted_then_applied(method: str, _request_id: str, _count: int) -> Answer:
        return (202, {}, {"outcome": "accepted"}) if method == "POST" else (200, {}, {
            "outcome": "applied"})  # fmt: skip

    async with live_ledger(
        client, task_queue, unique, accepted_then_applied, retry=SLOW_RETRY, concurrency=3
    ) as (server, handle):
        await enqueue(handle, intent("a", ["c1"]), intent("b", ["c2"]), intent("c", ["c3"]))
        await all_waiting(handle, 3)
        final = await handle.execute_update("stop", {"query_limit": 1}, result_type=dict)
    by_op = {body["operation_ids"][0]: rid for rid, body in sent_bodies(server).items()}
    assert gets(server) == [by_op["a"]]  # the oldest operation's request only
    assert [r["operation_ids"] for r in final["resolved_at_stop"]] == [["a"]]
    assert [(e["operation_ids"], e["at_stop"]) for e in final["unknown"]] == [
        (["b"], "not_asked"),
        (["c"], "not_asked"),
    ]


async def test_final_queries_keep_to_the_lanes(
    client: Client, task_queue: str, unique: str
) -> None:
    """L4 at stop: two uploads waiting for their query (each submitted in turn, its lane of 1
    free between attempts) are asked one after the other, never both at the far side at once,
    though `concurrency` would take both; a shape update goes alongside. Each query is answered
    slowly enough that two started together overlap."""

    def accepted_then_slowly_applied(method: str, _request_id: str, _count: int) -> Answer:
        if method == "POST":
            return 202, {}, {"outcome": "accepted"}
        return 200, {DELAY_HEADER: "1"}, {"outcome": "applied"}

    async with live_ledger(
        client, task_queue, unique, accepted_then_slowly_applied, retry=SLOW_RETRY,
        concurrency=3, lanes={"asset.upload": 1},
    ) as (server, handle):  # fmt: skip
        await enqueue(
            handle,
            intent("up-1", ["c1"], operation_type="asset.upload"),
            intent("up-2", ["c2"], operation_type="asset.upload"),
            intent("shape", ["c3"]),
        )
        await all_waiting(handle, 3)
        final = await handle.execute_update("stop", {}, result_type=dict)
        await record_history(client, handle.id, "stop_queries_within_lanes")
    assert len(gets(server)) == 3
    assert server.max_calls_by_kind["asset.upload"] == 1, server.max_calls_by_kind
    assert sorted(r["operation_ids"][0] for r in final["resolved_at_stop"]) == [
        "shape",
        "up-1",
        "up-2",
    ]


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        ({"query_limit": -1}, "query_limit"),
        ({"query_limit": 101}, "query_limit"),
        ({"query_limit": "5"}, "query_limit"),
        ({"query_limit": True}, "query_limit"),
        ({"query_deadline_ms": 60_001}, "query_deadline_ms"),
        ({"query_deadline_ms": 1.5}, "query_deadline_ms"),
        ([], "stop input"),
    ],
)
async def test_a_bad_stop_is_refused_naming_the_field_and_changes_nothing(
    client: Client, task_queue: str, unique: str, payload: Any, named: str
) -> None:
    async with live_ledger(client, task_queue, unique) as (_, handle):
        await enqueue(handle, intent("a", ["c1"]))
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("stop", payload)
        cause = refused.value.cause
        assert named in str(cause) and getattr(cause, "type", None) == "InvalidRequest"
        assert repr(payload if not isinstance(payload, dict) else next(iter(payload.values())))[
            :3
        ] in str(cause)
        assert (await snapshot(handle))["stopped"] is False
        await handle.terminate("test done")


async def test_the_cli_prints_what_stop_resolved_and_what_stays_unknown(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    """`durability ledger stop` shows the resolved-at-stop and unknown requests as tables;
    `durability ledger final` shows them again once the ledger is stopped."""

    def a_applied_b_undecided(method: str, request_id: str, _count: int) -> Answer:
        if method == "POST":
            return 202, {}, {"outcome": "accepted"}
        return 200, {}, {"outcome": "applied" if request_id in applied_ids else "accepted"}

    applied_ids: set[str] = set()
    async with live_ledger(client, task_queue, unique, a_applied_b_undecided, retry=SLOW_RETRY) as (
        server,
        handle,
    ):
        await enqueue(handle, intent("a", ["c1"]), intent("b", ["c2"]))
        await all_waiting(handle, 2)
        by_op = {body["operation_ids"][0]: rid for rid, body in sent_bodies(server).items()}
        applied_ids.add(by_op["a"])
        shown = await durability_cli(dev_server_address, "ledger", "stop", unique)
    text = shown.stdout
    assert "resolved at stop:" in text
    resolved_block = text.split("resolved at stop:")[1].split("unknown:")[0]
    assert by_op["a"] in resolved_block and "applied" in resolved_block
    assert "unknown: 1 request(s) may have reached the far side" in text
    [row] = [line for line in text.split("unknown: 1")[1].splitlines() if by_op["b"] in line]
    assert row.split() == [by_op["b"], "b", "accepted", "2", "query", "accepted", by_op["b"]]
    again = await durability_cli(dev_server_address, "ledger", "final", unique)
    assert again.stdout == text
    as_json = await durability_cli(dev_server_address, "--json", "ledger", "final", unique)
    [entry] = json.loads(as_json.stdout)["unknown"]
    assert entry["request"] == sent_bodies(server)[by_op["b"]]


def never_decides(method: str, _request_id: str, _count: int) -> Answer:
    return 202, {}, {"outcome": "accepted"}


def rejection(error: pytest.ExceptionInfo[WorkflowUpdateFailedError]) -> tuple[str, str]:
    """(type, message) of a rejected update, checking it is marked non-retryable."""
    cause = error.value.cause
    assert isinstance(cause, ApplicationError), cause
    assert cause.non_retryable, cause
    return str(cause.type), cause.message


@asynccontextmanager
async def ledger_only_worker(
    client: Client, task_queue: str, activities: list[Any]
) -> AsyncIterator[Worker]:
    """A worker that runs ledgers but not their requests' workflows: a request's workflow
    task fails on it (type not registered) and waits for a worker that has the type."""
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[OperationLedgerWorkflow],
        activities=activities,
        workflow_runner=workflow_runner(),
        **cache_options(),
    ) as worker:
        yield worker


async def test_a_stopping_ledger_refuses_hold_resume_settle_enqueue_and_a_second_stop(
    client: Client, task_queue: str, unique: str
) -> None:
    """`stop` waits for every request in flight to be cancelled. Until then the ledger is
    stopped but open: every message is refused naming why (the validators' stopped checks),
    and a second `stop` too. The window is held open by a worker that cannot run the
    request's workflow, so the cancellation waits until a full worker is back."""
    with recording_server(never_decides) as server:
        activities = ledger_activities(server.base_url)
        async with ledger_worker(client, task_queue, activities):
            handle = await start_ledger(client, unique, task_queue, http_input())
            await enqueue(handle, intent("a", ["c1"]), intent("b", ["c1"]))
            request = await in_flight_request(handle, "a")
        async with ledger_only_worker(client, task_queue, activities):
            stopping = asyncio.create_task(handle.execute_update("stop", {}, result_type=dict))

            async def stopped() -> bool:
                return bool((await snapshot(handle))["stopped"])

            await eventually(stopped, timeout=30)
            refused: dict[str, tuple[str, str]] = {}
            for name, payload in (
                ("hold", {}),
                ("resume", {}),
                ("settle", {}),
                ("stop", {}),
                ("enqueue", {"operations": [intent("c", ["c2"])]}),
            ):
                with pytest.raises(WorkflowUpdateFailedError) as rejected:
                    await handle.execute_update(name, payload)
                refused[name] = rejection(rejected)
                # For one release a refusal also names its 0.1.0 type, where that differs.
                cause = rejected.value.cause
                assert isinstance(cause, ApplicationError)
                former = {"enqueue": ({"former_type": "LedgerInputError"},)}.get(name, ())
                assert cause.details == former, (name, cause.details)
            assert not stopping.done()
            snap = await snapshot(handle)
        async with ledger_worker(client, task_queue, activities):
            final = await asyncio.wait_for(stopping, timeout=30)
    assert refused == {
        "hold": ("LedgerStopped", "ledger is stopped"),
        "resume": ("LedgerStopped", "ledger is stopped"),
        "settle": ("LedgerStopped", "ledger is stopped"),
        "stop": ("LedgerStopped", "ledger is stopped"),
        # As docs/ledgers.md and docs/contract.md have it: an enqueue is refused as bad input.
        "enqueue": ("InvalidRequest", "ledger is stopped: enqueue refused"),
    }
    # Nothing the refused messages carried was recorded.
    assert [o["id"] for o in snap["operations"]] == ["a", "b"] and snap["holds"] == 0
    assert final["stopped"] is True
    assert [(o["id"], o["phase"]) for o in final["operations"]] == [
        ("a", "dispatched"),
        ("b", "pending"),
    ]
    assert [(r["id"], r["phase"]) for r in final["requests"]] == [(request["id"], "frozen")]
    # Its workflow was cancelled, then run once more by the stop to ask (docs/contract.md
    # 3.10): the far side still says `accepted`, so the request is listed unknown.
    child_id = f"request:{unique}:{request['id']}"

    async def cancelled_then_asked() -> bool:
        runs = [r.status async for r in client.list_workflows(f"WorkflowId = '{child_id}'")]
        return sorted(str(s) for s in runs) == sorted(
            str(s) for s in (WorkflowExecutionStatus.CANCELED, WorkflowExecutionStatus.COMPLETED)
        )

    await eventually(cancelled_then_asked)
    assert [(e["request_id"], e["at_stop"]) for e in final["unknown"]] == [
        (request["id"], "accepted")
    ]
    assert [r.method for r in server.sent(request["id"])][:1] == ["POST"]
    assert json.loads(server.bodies[request["id"]])["operation_ids"] == ["a"]
