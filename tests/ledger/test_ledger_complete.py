"""The completion hook (`complete_activity`) end to end: OperationLedger and
FrozenRequest on the real dev server, the built-in `http_complete` webhook against a
recording HTTP server on 127.0.0.1.

A request resolves (L9) only once its completion accepts the far side's answer; a completion
that refuses (or fails after its retries) blocks it with its claims (L10), and `resume` asks
the far side again and calls the completion again (L13)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

from activities.ledger import ledger_activities
from harness.replay import production_replayer
from tests.support.helpers import HISTORY_DIR, eventually
from tests.support.ledger import (
    COMPLETE,
    Answer,
    Received,
    enqueue,
    http_input,
    intent,
    ledger_worker,
    live_ledger,
    operations,
    record_history,
    recording_server,
    requests,
    snapshot,
    start_ledger,
    until_resolved_or_blocked,
)
from workflows.ledger import core
from workflows.ledger.models import LEFT_OUT_UNSET
from workflows.ledger.request import FrozenRequestWorkflow
from workflows.ledger.workflow import OperationLedgerWorkflow

pytestmark = pytest.mark.cacheless

# The far side's receipt: its canonical document, larger than the 1 KiB the ledger keeps.
CANONICAL = {"document": "x" * 3000, "version": 7}
APPLIED = {"outcome": "applied", "canonical": CANONICAL, "receipt": "r-1"}


def far_side(completion: Any) -> Any:
    """Accept each submit, answer each query `APPLIED` and each completion `completion(n)`
    (its n-th call for that request)."""

    def answer(method: str, _request_id: str, count: int) -> Answer:
        if method == "POST":
            return 202, {}, {"outcome": "accepted"}
        if method == "GET":
            return 200, {}, APPLIED
        result: Answer = completion(count)
        return result

    return answer


def accept(_count: int) -> Answer:
    return 200, {}, None


def completions(sent: list[Received]) -> list[dict[str, Any]]:
    """The bodies POSTed to `/complete`."""
    return [json.loads(r.body or "") for r in sent if r.method == COMPLETE]


async def blocked(handle: Any, op_id: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        snap = await snapshot(handle)
        return snap if operations(snap)[op_id]["phase"] == "blocked" else None

    result: dict[str, Any] = await eventually(check, timeout=30)
    return result


def request_workflow(handle: Any, request_id: str) -> str:
    return f"request:{handle.id.removeprefix('ledger:')}:{request_id}"


async def test_an_accepting_completion_gets_the_whole_status_and_the_request_resolves(
    client: Client, task_queue: str, unique: str
) -> None:
    async with live_ledger(
        client, task_queue, unique, far_side(accept), complete_activity="http_complete"
    ) as (server, handle):
        await enqueue(handle, intent("a", ["c1"]))
        snap = await until_resolved_or_blocked(handle)
        a = operations(snap)["a"]
        child = request_workflow(handle, a["request_id"])
        await client.get_workflow_handle(child).result()
        await record_history(client, child, "request_complete_accepted")
    assert a["outcome"] == "applied"
    assert snap["claims"] == {}
    sent = server.sent(a["request_id"])
    assert [r.method for r in sent] == ["POST", "GET", COMPLETE]
    # The whole frozen request and the far side's whole status, `canonical` included...
    [body] = completions(sent)
    assert body == {"request": json.loads(server.bodies[a["request_id"]]), "status": APPLIED}
    assert sent[-1].key == a["request_id"]
    # ... while the ledger keeps its 1 KiB copy.
    last = requests(snap)[a["request_id"]]["last_status"]
    assert last == {"outcome": "applied", "truncated": True}


async def test_a_refusing_completion_blocks_with_its_claims_until_resume_completes_again(
    client: Client, task_queue: str, unique: str
) -> None:
    calls: list[int] = []

    def refuse_then_accept(_count: int) -> Answer:
        calls.append(1)
        if len(calls) == 1:  # a's first completion; a's second and b's accept
            return 200, {}, {"blocked": True, "error": "receipt mismatch"}
        return 200, {}, {"ok": True}  # JSON without `blocked`: accepted

    async with live_ledger(
        client, task_queue, unique, far_side(refuse_then_accept), complete_activity="http_complete"
    ) as (server, handle):
        await enqueue(handle, intent("a", ["c1"]), intent("b", ["c1"]))
        snap = await blocked(handle, "a")
        a = operations(snap)["a"]
        request = requests(snap)[a["request_id"]]
        assert a["blockers"] == ["receipt mismatch"] and a["error"] == "receipt mismatch"
        assert a["outcome"] is None
        assert request["phase"] == "blocked" and request["blocker"] == "receipt mismatch"
        assert request["retry_action"] == "query"
        assert request["last_status"]["blocked"] is True
        # L10: the claims are kept, so b (same canvas) waits.
        assert snap["claims"] == {"c1": a["request_id"]}
        await asyncio.sleep(0.5)
        snap = await snapshot(handle)
        assert operations(snap)["b"]["phase"] == "pending"
        assert operations(snap)["b"]["request_id"] is None
        child = client.get_workflow_handle(request_workflow(handle, a["request_id"]))
        first_run = await child.describe()
        assert first_run.status == WorkflowExecutionStatus.COMPLETED
        await record_history(client, child.id, "request_complete_blocked", first_run.run_id)

        resumed = await handle.execute_update("resume", {}, result_type=dict)
        assert resumed == {"resumed": [a["request_id"]]}
        snap = await until_resolved_or_blocked(handle)
        await handle.execute_update("stop", {})
    ops = operations(snap)
    assert ops["a"]["outcome"] == ops["b"]["outcome"] == "applied"
    sent = server.sent(a["request_id"])
    # resume re-runs the recorded next action (query), then the completion again
    assert [r.method for r in sent] == ["POST", "GET", COMPLETE, "GET", COMPLETE]
    assert [c["status"] for c in completions(sent)] == [APPLIED, APPLIED]
    assert server.first_post[ops["b"]["request_id"]] > sent[-1].sequence
    assert server.violations == []


async def test_a_refused_completion_blocks_at_once_and_never_resolves(
    client: Client, task_queue: str, unique: str
) -> None:
    """A 4xx other than 408/425/429 is a refusal (non-retryable): one call, then blocked."""

    def refusing(_count: int) -> Answer:
        return 404, {}, {"error": "no"}

    async with live_ledger(
        client, task_queue, unique, far_side(refusing), complete_activity="http_complete"
    ) as (server, handle):
        await enqueue(handle, intent("a", ["c1"]))
        snap = await blocked(handle, "a")
        a = operations(snap)["a"]
        child = client.get_workflow_handle(request_workflow(handle, a["request_id"]))
        await child.result()
        assert (await child.describe()).status == WorkflowExecutionStatus.COMPLETED
    [blocker] = a["blockers"]
    url = f"{server.base_url}/complete"
    assert blocker.startswith(f"completion_failed: CompletionWebhookError: POST {url} answered 404")
    assert a["outcome"] is None
    assert snap["claims"] == {"c1": a["request_id"]}
    assert requests(snap)[a["request_id"]]["retry_action"] == "query"
    assert len(completions(server.sent(a["request_id"]))) == 1


async def test_a_completion_failing_transiently_is_retried_past_three_attempts(
    client: Client, task_queue: str, unique: str
) -> None:
    """A 5xx is transient: Temporal retries it with backoff (TRANSIENT_RETRY), past the 3
    attempts that used to block the request as `completion_failed`, until it accepts."""

    def unavailable_four_times(count: int) -> Answer:
        return (503, {}, {"error": "down"}) if count <= 4 else (200, {}, None)

    async with live_ledger(
        client,
        task_queue,
        unique,
        far_side(unavailable_four_times),
        complete_activity="http_complete",
    ) as (server, handle):
        await enqueue(handle, intent("a", ["c1"]))

        async def decided() -> dict[str, Any] | None:
            op = operations(await snapshot(handle))["a"]
            return op if op["phase"] in ("resolved", "blocked") else None

        a = await eventually(decided, timeout=60)
        child = request_workflow(handle, a["request_id"])
        await client.get_workflow_handle(child).result()
        await record_history(client, child, "request_complete_retried")
    assert a["phase"] == "resolved", a
    assert a["outcome"] == "applied"
    assert len(completions(server.sent(a["request_id"]))) == 5


@activity.defn(name="odd_complete")
async def odd_complete(request: dict[str, Any], status: dict[str, Any]) -> Any:
    """A completion of the user's own that answers neither null nor a blocked answer."""
    return {"ok": True, "for": request["id"], "outcome": status["outcome"], "pad": "z" * 500}


async def test_a_completion_answer_that_is_neither_null_nor_blocked_blocks_naming_it(
    client: Client, task_queue: str, unique: str
) -> None:
    with recording_server(far_side(accept)) as server:
        activities = [*ledger_activities(server.base_url), odd_complete]
        async with ledger_worker(client, task_queue, activities):
            handle = await start_ledger(
                client, unique, task_queue, http_input(complete_activity="odd_complete")
            )
            await enqueue(handle, intent("a", ["c1"]))
            snap = await blocked(handle, "a")
    [blocker] = operations(snap)["a"]["blockers"]
    assert blocker.startswith('completion_failed: answered {"ok":true,"for":')
    assert blocker.endswith('..., expected null or {"blocked": true, "error"?: str}')
    assert len(blocker) < 300
    assert snap["claims"] == {"c1": operations(snap)["a"]["request_id"]}


async def test_stop_cancels_a_completion_in_flight_and_its_final_query_completes_again(
    client: Client, task_queue: str, unique: str
) -> None:
    """`stop` cancels a completion in flight as it cancels a submit (the request is not
    resolved by it); its final query (3.10) asks again and calls the completion again."""

    def slow(_count: int) -> Answer:
        time.sleep(2)  # on the server's thread: the completion is in flight meanwhile
        return 200, {}, None

    async with live_ledger(
        client, task_queue, unique, far_side(slow), complete_activity="http_complete"
    ) as (server, handle):
        await enqueue(handle, intent("a", ["c1"]))
        await eventually(lambda: any(r.method == COMPLETE for r in server.received), timeout=30)
        final = await handle.execute_update("stop", {}, result_type=dict)
    [request] = final["requests"]
    # the cancelled call, then the final query's: the first did not resolve the request
    assert len(completions(server.sent(request["id"]))) == 2
    assert [r["request_id"] for r in final["resolved_at_stop"]] == [request["id"]]
    assert operations(final)["a"]["outcome"] == "applied"
    assert final["claims"] == {}


@pytest.mark.parametrize(
    ("value", "shown"),
    [(5, "(got 5)"), ("", "must be a non-empty activity name"), ("c" * 1001, "1001 bytes")],
)
async def test_a_bad_complete_activity_is_refused_at_start_naming_the_field(
    client: Client, task_queue: str, unique: str, value: Any, shown: str
) -> None:
    async with ledger_worker(client, task_queue):
        handle = await client.start_workflow(
            "OperationLedger",
            {"complete_activity": value},
            id=f"ledger:{unique}",
            task_queue=task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await asyncio.wait_for(handle.result(), timeout=20)
        events = [event async for event in handle.fetch_history_events()]
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidStartInput"
    assert cause.non_retryable
    assert "complete_activity" in cause.message and shown in cause.message
    assert not any(e.HasField("workflow_task_failed_event_attributes") for e in events)
    assert not any(e.HasField("child_workflow_execution_started_event_attributes") for e in events)


def test_a_null_complete_activity_is_not_written_into_the_next_runs_input() -> None:
    """A worker of an earlier release refuses unknown start fields: a ledger without the hook
    (or with `local_compile` off) continues as new with an input that worker reads."""
    state = core.read_start(lambda: {}, "ledger:x").state
    cases: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({}, {}),
        ({"complete_activity": None}, {}),
        ({"complete_activity": "http_complete"}, {"complete_activity": "http_complete"}),
        ({"local_compile": True}, {"local_compile": True}),
    ]
    for start, written in cases:
        config = core.read_start(start.copy, "ledger:x").config
        carried = core.next_run_input(state, config, "x")
        [payload] = pydantic_data_converter.payload_converter.to_payloads([carried])
        data = json.loads(payload.data)
        assert {k: data[k] for k in LEFT_OUT_UNSET if k in data} == written, start
        again = core.read_start(data.copy, "ledger:x")
        assert again.error is None
        assert again.config.model_copy(update={"ledger_id": None}) == config


async def test_a_request_run_by_a_worker_that_ignored_the_field_replays_without_the_call() -> None:
    """The patch `ledger-complete-activity`: a child started with `complete_activity` by a
    new parent but run by an older worker (which ignores the field) resolved without the
    call; replayed now, the absent marker keeps it on that path."""
    recorded = json.loads((HISTORY_DIR / "ledger_request_retry_after.json").read_text())
    attributes = recorded["history"]["events"][0]["workflowExecutionStartedEventAttributes"]
    payload = attributes["input"]["payloads"][0]
    start_input = json.loads(base64.b64decode(payload["data"]))
    start_input["complete_activity"] = "http_complete"
    payload["data"] = base64.b64encode(json.dumps(start_input).encode()).decode()
    history = WorkflowHistory.from_json(recorded["workflow_id"], recorded["history"])
    replayer = production_replayer([OperationLedgerWorkflow, FrozenRequestWorkflow])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


@pytest.mark.parametrize("refuse", [False, True], ids=["accepts", "refuses"])
async def test_stops_final_query_completes_before_it_resolves(
    client: Client, task_queue: str, unique: str, refuse: bool
) -> None:
    """A request waiting after `accepted` is asked once more by `stop` (3.10); when that
    query answers `applied`, the completion decides whether it is resolved at stop."""
    decided = {"yes": False}

    def answer(method: str, _request_id: str, _count: int) -> Answer:
        if method == COMPLETE:
            return 200, {}, {"blocked": True, "error": "receipt mismatch"} if refuse else None
        if method == "GET" and decided["yes"]:
            return 200, {}, APPLIED
        return 202, {}, {"outcome": "accepted"}

    async with live_ledger(
        client, task_queue, unique, answer, complete_activity="http_complete"
    ) as (server, handle):
        await enqueue(handle, intent("a", ["c1"]))
        await eventually(lambda: any(r.method == "GET" for r in server.received), timeout=30)
        decided["yes"] = True
        final = await handle.execute_update("stop", {}, result_type=dict)
    [request] = final["requests"]
    assert [c["status"] for c in completions(server.sent(request["id"]))] == [APPLIED]
    if refuse:
        assert [u["request_id"] for u in final["unknown"]] == [request["id"]]
        assert final["unknown"][0]["at_stop"] == "blocked"
        assert operations(final)["a"]["blockers"] == ["receipt mismatch"]
        assert final["claims"] == {"c1": request["id"]}
    else:
        assert [r["request_id"] for r in final["resolved_at_stop"]] == [request["id"]]
        assert operations(final)["a"]["outcome"] == "applied"
        assert final["claims"] == {}
