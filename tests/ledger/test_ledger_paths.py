"""Ledger paths the other tests do not take, each end to end on the dev server with a real
HTTP server on 127.0.0.1: a request's workflow that fails or cannot start, the window in
which a stopping ledger refuses messages, bad signals dropped, and non-default protocol
versions and participant-free types."""

from __future__ import annotations

import asyncio
import json
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
from tests.support.helpers import cache_options, eventually
from tests.support.ledger import (
    Answer,
    enqueue,
    http_input,
    intent,
    ledger_worker,
    live_ledger,
    operations,
    recording_server,
    requests,
    settled,
    snapshot,
    start_ledger,
)
from workflows.ledger.models import LedgerInput
from workflows.ledger.workflow import OperationLedgerWorkflow

pytestmark = pytest.mark.cacheless


def never_decides(method: str, _request_id: str, _count: int) -> Answer:
    return 202, {}, {"outcome": "accepted"}


async def phase_of(handle: WorkflowHandle[Any, Any], op_id: str) -> str:
    return str(operations(await snapshot(handle))[op_id]["phase"])


async def in_flight_request(handle: WorkflowHandle[Any, Any], op_id: str) -> dict[str, Any]:
    """The operation's request once it is in flight and sent at least once."""

    async def sent() -> dict[str, Any] | None:
        snap = await snapshot(handle)
        request_id = operations(snap)[op_id]["request_id"]
        request = requests(snap).get(request_id) if request_id else None
        if request is not None and request["phase"] == "in_flight" and request["attempt"] >= 1:
            return request
        return None

    result: dict[str, Any] = await eventually(sent, timeout=30)
    return result


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


async def test_a_request_whose_workflow_fails_blocks_until_resume_which_asks_first(
    client: Client, task_queue: str, unique: str
) -> None:
    """A request's workflow that ends without reporting (here: terminated by an operator)
    blocks its operation with `request_workflow_failed`, keeping its canvas; `resume` starts
    it again with the same frozen body and its recorded next action (a query: the submit
    was sent)."""
    decided = {"yes": False}

    def answer(method: str, _request_id: str, _count: int) -> Answer:
        if method == "GET" and decided["yes"]:
            return 200, {}, {"outcome": "applied"}
        return 202, {}, {"outcome": "accepted"}

    async with live_ledger(client, task_queue, unique, answer) as (server, handle):
        await enqueue(handle, intent("a", ["c1"]), intent("b", ["c1"]))
        request = await in_flight_request(handle, "a")
        child = client.get_workflow_handle(f"request:{unique}:{request['id']}")
        await child.terminate("an operator gave up on it")

        async def blocked() -> dict[str, Any] | None:
            snap = await snapshot(handle)
            return snap if operations(snap)["a"]["phase"] == "blocked" else None

        snap = await eventually(blocked, timeout=30)
        a = operations(snap)["a"]
        assert a["blockers"][0].startswith("request_workflow_failed: ")
        assert requests(snap)[request["id"]]["phase"] == "blocked"
        assert snap["claims"] == {"c1": request["id"]}
        assert operations(snap)["b"]["phase"] == "pending"
        sent_before = len(server.sent(request["id"]))
        decided["yes"] = True
        resumed = await handle.execute_update("resume", {}, result_type=dict)
        assert resumed == {"resumed": [request["id"]]}
        snap = await settled(handle)
    ops = operations(snap)
    assert ops["a"]["outcome"] == ops["b"]["outcome"] == "applied"
    assert ops["a"]["request_id"] == request["id"]
    after_resume = [r.method for r in server.sent(request["id"])[sent_before:]]
    assert after_resume and set(after_resume) == {"GET"}  # asked (it had been applied)
    assert server.violations == []  # one body per request ID, one request per canvas


async def test_a_request_whose_workflow_id_is_taken_blocks_as_already_running(
    client: Client, task_queue: str, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`resume` starts a blocked request's workflow again under its ID; while another
    workflow holds that ID the start is retried, then the request is blocked with
    `request_workflow_already_running` until a later `resume` (tries cut from 60 to 2
    here, so the test does not wait a minute)."""
    monkeypatch.setattr("workflows.ledger.request.CHILD_START_TRIES", 2)
    fixed = {"yes": False}

    def answer(method: str, _request_id: str, _count: int) -> Answer:
        if not fixed["yes"]:
            return 401, {}, {"error": "token expired"}
        return 200, {}, {"outcome": "applied"}

    async with live_ledger(client, task_queue, unique, answer) as (server, handle):
        await enqueue(handle, intent("a", ["c1"]))
        await eventually(lambda: _phase_is(handle, "a", "blocked"), timeout=30)
        request_id = operations(await snapshot(handle))["a"]["request_id"]
        workflow_id = f"request:{unique}:{request_id}"
        await client.get_workflow_handle(workflow_id).result()  # the blocked loop ended
        squatter = await client.start_workflow(
            "Squatter", id=workflow_id, task_queue=f"{task_queue}-nobody"
        )
        fixed["yes"] = True
        assert await handle.execute_update("resume", {}, result_type=dict) == {
            "resumed": [request_id]
        }

        async def already_running() -> dict[str, Any] | None:
            snap = await snapshot(handle)
            a = operations(snap)["a"]
            return snap if a["blockers"] == ["request_workflow_already_running"] else None

        snap = await eventually(already_running, timeout=30)
        assert requests(snap)[request_id]["phase"] == "blocked"
        assert snap["claims"] == {"c1": request_id}
        sent_while_taken = len(server.sent(request_id))
        await squatter.terminate("the ID is free again")
        await handle.execute_update("resume", {})
        snap = await settled(handle)
    assert operations(snap)["a"]["outcome"] == "applied"
    assert sent_while_taken == 1  # only the blocked submit: nothing was sent meanwhile
    assert [r.method for r in server.sent(request_id)] == ["POST", "GET"]
    assert server.violations == []


async def _phase_is(handle: WorkflowHandle[Any, Any], op_id: str, phase: str) -> bool:
    return await phase_of(handle, op_id) == phase


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
        snap = await settled(handle)
    ops = operations(snap)
    assert (ops["orphan"]["outcome"], ops["a"]["outcome"]) == ("skipped", "applied")
    assert snap["dropped_signals"] == len(bad) and snap["held"] is False


async def test_supported_protocol_versions_decide_which_requests_are_sent(
    client: Client, task_queue: str, unique: str
) -> None:
    """A ledger whose interpreter speaks only protocol 2 sends version-2 requests and blocks
    version-1 ones before anything is sent (L11), whatever the default is."""
    async with live_ledger(client, task_queue, unique, supported_protocol_versions=[2]) as (
        server,
        handle,
    ):
        await enqueue(
            handle,
            intent("v2", ["c1"], protocol_version=2),
            intent("v1", ["c2"], protocol_version=1),
        )
        snap = await settled(handle)
    ops = operations(snap)
    assert ops["v2"]["outcome"] == "applied"
    assert (ops["v1"]["phase"], ops["v1"]["blockers"]) == (
        "blocked",
        ["request_interpreter_unavailable"],
    )
    assert json.loads(server.bodies[ops["v2"]["request_id"]])["protocol_version"] == 2
    assert server.sent(ops["v1"]["request_id"]) == []
    assert snap["claims"] == {"c2": ops["v1"]["request_id"]}


async def test_participant_free_types_are_the_configured_ones(
    client: Client, task_queue: str, unique: str
) -> None:
    """With `participant_free_types: ["doc.export"]`, an export without canvases is sent,
    and an upload without canvases (participant-free by default) is refused at enqueue (L5:
    it could never dispatch), naming the field and the type."""
    async with live_ledger(client, task_queue, unique, participant_free_types=["doc.export"]) as (
        server,
        handle,
    ):
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await enqueue(handle, intent("upload", [], operation_type="asset.upload"))
        assert "operations.0.participants" in str(refused.value.cause)
        assert "'asset.upload'" in str(refused.value.cause)
        await enqueue(handle, intent("export", [], operation_type="doc.export"))
        snap = await settled(handle)
    ops = operations(snap)
    assert ops["export"]["outcome"] == "applied"
    assert json.loads(server.bodies[ops["export"]["request_id"]])["canvas_ids"] == []
    assert "upload" not in ops
    assert len(server.bodies) == 1
