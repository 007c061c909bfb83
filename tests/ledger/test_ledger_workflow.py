"""OperationLedger and FrozenRequest on the real dev server, against a recording HTTP server."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities.ledger import compile_passthrough, ledger_activities
from tests.support.helpers import eventually, temporal
from tests.support.ledger import (
    Answer,
    enqueue,
    http_input,
    in_flight_request,
    intent,
    ledger_with_blocked_completion,
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
from workflows.ledger.drain import DRAIN_TIMEOUT
from workflows.ledger.models import LedgerInput, RetentionConfig

pytestmark = pytest.mark.cacheless


async def test_enqueue_by_update_with_start_records_and_reports_duplicates(
    client: Client, task_queue: str, unique: str
) -> None:
    async with ledger_worker(client, task_queue):
        start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            "OperationLedger",
            LedgerInput(),
            id=f"ledger:{unique}",
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        first = await client.execute_update_with_start_workflow(
            "enqueue",
            {"operations": [intent("a", ["c1"]), intent("b", ["c1"], ["a"])]},
            start_workflow_operation=start,
            result_type=dict,
        )
        assert first == {"accepted": ["a", "b"], "duplicates": [], "conflicts": []}
        handle = client.get_workflow_handle(f"ledger:{unique}")
        second = await enqueue(handle, intent("b", ["c9"]), intent("c", ["c2"]))
        assert second == {"accepted": ["c"], "duplicates": [], "conflicts": ["b"]}
        snap = await until_resolved_or_blocked(handle)
        ops = operations(snap)
        assert [o["id"] for o in snap["operations"]] == ["a", "b", "c"]
        assert [o["sequence"] for o in snap["operations"]] == [1, 2, 3]
        assert {o["outcome"] for o in ops.values()} == {"applied"}
        # The conflict changed nothing: b still has its first participants.
        request_b = requests(snap)[ops["b"]["request_id"]]
        assert request_b["canvas_ids"] == ["c1"]
        assert snap["claims"] == {}
        assert snap["ledger_id"] == unique


async def test_http_dependencies_claims_lanes_and_frozen_bodies_end_to_end(
    client: Client, task_queue: str, unique: str
) -> None:
    def answer(method: str, _request_id: str, count: int) -> Answer:
        if method == "POST":
            return 202, {}, {"outcome": "accepted"}
        if count == 1:
            return 404, {}, {"error": "not yet"}  # unresolved: re-submit the same body
        return 200, {}, {"outcome": "applied"}

    graph = [
        intent("a", ["c1", "c2"]),
        intent("b", ["c2"], ["a"]),
        intent("c", ["c3"]),
        intent("d", ["c1"], ["c"]),
        intent("e", ["c3", "c4", "c3"]),
        intent("f", [], operation_type="asset.upload"),
        intent("g", [], operation_type="asset.upload"),
        intent("h", ["c4"], ["b", "f"]),
        intent("i", ["c2", "c4"]),
        intent("j", [], operation_type="asset.upload", dependencies=["g"]),
    ]
    async with live_ledger(client, task_queue, unique, answer, concurrency=3) as (server, handle):
        assert (await enqueue(handle, *graph))["accepted"] == [g["id"] for g in graph]
        snap = await until_resolved_or_blocked(handle, timeout=60)
    ops = operations(snap)
    assert {op_id: o["outcome"] for op_id, o in ops.items()} == {g["id"]: "applied" for g in graph}
    assert server.violations == []
    # L4 bounds attempts in progress; a request waiting for its query (after `accepted`) is
    # open at the far side but holds no slot, so more than 3 may be open at once.
    assert server.max_calls <= 3
    assert server.max_calls_by_kind["asset.upload"] <= 1
    request_of = {op_id: o["request_id"] for op_id, o in ops.items()}
    for g in graph:
        rid = request_of[g["id"]]
        for dependency in g["dependencies"]:
            assert server.first_post[rid] > server.resolved_at[request_of[dependency]], g["id"]
        sent = server.sent(rid)
        # POST, GET (404: unresolved), POST again with the same body, GET (applied).
        assert [r.method for r in sent] == ["POST", "GET", "POST", "GET"]
        assert {r.key for r in sent} == {rid}
        body = json.loads(server.bodies[rid])
        assert body["id"] == rid == body["idempotency_key"]
        assert body["operation_ids"] == [g["id"]]
        assert body["canvas_ids"] == sorted(set(g["participants"]))
        assert body["payload"] == {"op": g["id"]}
        assert body["protocol_version"] == 1
        assert body["ledger_id"] == unique
        assert requests(snap)[rid]["attempt"] == 4


@pytest.mark.parametrize("own_timers", [True, False], ids=["own_timers", "grants"])
async def test_retry_after_is_honoured_and_transport_errors_are_unresolved(
    client: Client, task_queue: str, unique: str, own_timers: bool
) -> None:
    """The L8 delays: on the request's own timers (requests started before 0.1.1; the
    recorded `request_retry_after` history), or on the ledger's timer that grants them."""

    def answer(method: str, _request_id: str, count: int) -> Answer:
        if method == "POST" and count == 1:
            return 503, {"Retry-After": "2"}, {"error": "busy"}
        if method == "GET":
            return 404, {}, None
        return 200, {}, {"outcome": "applied"}

    config = {"own_retry_timers": True} if own_timers else {}
    async with live_ledger(client, task_queue, unique, answer, **config) as (server, handle):
        await enqueue(handle, intent("a", ["c1"]))
        snap = await until_resolved_or_blocked(handle)
        request_workflow = f"request:{unique}:{snap['requests'][0]['id']}"
        await client.get_workflow_handle(request_workflow).result()
        if own_timers:  # the 0.1.0 loop, as recorded by 0.1.0
            await record_history(client, request_workflow, "request_retry_after")
    request = snap["requests"][0]
    assert snap["operations"][0]["outcome"] == "applied"
    assert [r.method for r in server.sent(request["id"])] == ["POST", "GET", "POST"]
    child = client.get_workflow_handle(f"request:{unique}:{request['id']}")
    timers = [
        e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
        async for e in child.fetch_history_events()
        if e.HasField("timer_started_event_attributes")
    ]
    if own_timers:
        # Retry-After 2 s after the 503, then the L8 backoff (50 ms * 2^2) after the 404 query.
        assert timers == [timedelta(seconds=2), timedelta(milliseconds=200)]
        return
    # Granted: the request waits for grants (its one timer is its hourly reminder), and the
    # ledger's wake timers end at each retry's due time (set a moment after the report).
    assert timers == [timedelta(hours=1)]
    waits = [
        e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
        async for e in handle.fetch_history_events()
        if e.HasField("timer_started_event_attributes")
    ]
    assert len(waits) == 2, waits
    assert timedelta(milliseconds=500) < waits[0] <= timedelta(seconds=2)
    assert timedelta(0) < waits[1] <= timedelta(milliseconds=200)


async def test_network_error_is_unresolved_and_retried_with_the_same_body(
    client: Client, task_queue: str, unique: str
) -> None:
    # The server is gone before the ledger starts: every submit/query fails to connect.
    with recording_server() as server:
        url = server.base_url
    activities = ledger_activities(url)
    async with ledger_worker(client, task_queue, activities):
        handle = await start_ledger(client, unique, task_queue, http_input())
        await enqueue(handle, intent("a", ["c1"]))

        async def failed_once() -> bool:
            snap = await snapshot(handle)
            status = (snap["requests"] or [{}])[0].get("last_status") or {}
            return "transport" in (status.get("error") or "")

        await eventually(failed_once)
        snap = await snapshot(handle)
        assert snap["operations"][0]["phase"] == "dispatched"
        assert snap["requests"][0]["phase"] == "in_flight"
        assert snap["claims"] == {"c1": snap["requests"][0]["id"]}
        await handle.execute_update("stop", {})


async def test_blocked_status_holds_claims_until_resume_then_queries_before_resubmitting(
    client: Client, task_queue: str, unique: str
) -> None:
    """L10, L13: a submit answered 401 was dispatched, so after `resume` the request asks
    (query) before it sends the same frozen body again."""
    fixed = {"yes": False}

    def answer(method: str, _request_id: str, _count: int) -> Answer:
        if not fixed["yes"]:
            return 401, {}, {"error": "token expired"}
        if method == "GET":
            return 200, {}, {"outcome": "unresolved"}  # the blocked submit did not land
        return 200, {}, {"outcome": "applied"}

    async with live_ledger(client, task_queue, unique, answer) as (server, handle):
        await enqueue(handle, intent("a", ["c1"]), intent("b", ["c1"]))

        async def blocked() -> dict[str, Any] | None:
            snap = await snapshot(handle)
            return snap if operations(snap)["a"]["phase"] == "blocked" else None

        snap = await eventually(blocked)
        a = operations(snap)["a"]
        assert a["blockers"][0].startswith("http 401")
        assert requests(snap)[a["request_id"]]["phase"] == "blocked"
        assert snap["claims"] == {"c1": a["request_id"]}
        assert operations(snap)["b"]["phase"] == "pending"  # waits for canvas c1
        fixed["yes"] = True
        resumed = await handle.execute_update("resume", {}, result_type=dict)
        assert resumed == {"resumed": [a["request_id"]]}
        snap = await until_resolved_or_blocked(handle)
        await handle.execute_update("stop", {})
        await record_history(client, handle.id, "blocked_resume")
    ops = operations(snap)
    assert ops["a"]["outcome"] == ops["b"]["outcome"] == "applied"
    sent = server.sent(ops["a"]["request_id"])
    # the blocked submit; after resume its query; then the same body again
    assert [r.method for r in sent] == ["POST", "GET", "POST"]
    assert len({r.body for r in sent if r.method == "POST"}) == 1
    assert server.violations == []


async def test_unsupported_protocol_is_never_sent_and_skip_frees_dependents(
    client: Client, task_queue: str, unique: str
) -> None:
    async with live_ledger(client, task_queue, unique) as (server, handle):
        await enqueue(
            handle,
            intent("new", ["c1"], protocol_version=2),
            intent("after", ["c2"], ["new"]),
            intent("same-canvas", ["c1"]),
            intent("other", ["c3"]),
        )

        async def other_done() -> dict[str, Any] | None:
            snap = await snapshot(handle)
            return snap if operations(snap)["other"]["phase"] == "resolved" else None

        snap = await eventually(other_done)
        new = operations(snap)["new"]
        assert new["phase"] == "blocked"
        assert new["blockers"] == ["request_interpreter_unavailable"]
        assert requests(snap)[new["request_id"]]["phase"] == "blocked"
        assert operations(snap)["after"]["phase"] == "pending"
        assert operations(snap)["same-canvas"]["phase"] == "pending"
        # resume does not send it either: the protocol is still unsupported.
        await handle.execute_update("resume", {})
        assert await handle.execute_update(
            "skip",
            {"operation_id": "new", "reason": "client upgrade pending"},
            result_type=bool,
        )
        snap = await until_resolved_or_blocked(handle)
    ops = operations(snap)
    assert ops["new"]["outcome"] == "skipped"
    assert ops["new"]["error"] == "client upgrade pending"
    assert ops["after"]["outcome"] == ops["same-canvas"]["outcome"] == "applied"
    assert server.sent(new["request_id"]) == []
    assert snap["claims"] == {}


async def test_compile_error_and_participant_mismatch_block_with_message(
    client: Client, task_queue: str, unique: str
) -> None:
    @activity.defn(name="compile")
    async def picky_compile(intent: dict[str, Any], request_id: str) -> dict[str, Any]:
        if intent["id"] == "bad":
            raise ApplicationError("canvas c1 has no layer 7", non_retryable=True)
        compiled = await compile_passthrough(intent, request_id)
        if intent["id"] == "wrong":
            compiled["canvas_ids"] = ["elsewhere"]
        return compiled

    activities = [picky_compile, *ledger_activities()[1:]]
    async with ledger_worker(client, task_queue, activities):
        handle = await start_ledger(client, unique, task_queue, LedgerInput())
        await enqueue(
            handle,
            intent("bad", ["c1"]),
            intent("wrong", ["c2"]),
            intent("later", ["c1"], ["bad"]),
            intent("fine", ["c1"]),
        )

        async def decided() -> dict[str, Any] | None:
            snap = await snapshot(handle)
            ops = operations(snap)
            done = ops["fine"]["phase"] == "resolved"
            return snap if done and ops["wrong"]["phase"] == "blocked" else None

        snap = await eventually(decided)
    ops = operations(snap)
    assert ops["bad"]["phase"] == "blocked"
    assert ops["bad"]["blockers"] == ["canvas c1 has no layer 7"]
    assert ops["wrong"]["blockers"] == ["participant_mismatch"]
    assert ops["later"]["phase"] == "pending"
    assert ops["fine"]["outcome"] == "applied"
    assert snap["claims"] == {}
    assert len(snap["requests"]) == 1  # nothing was frozen for the blocked ones


async def test_hold_stops_new_launches_until_every_token_is_released(
    client: Client, task_queue: str, unique: str
) -> None:
    async with ledger_worker(client, task_queue):
        handle = await start_ledger(client, unique, task_queue, LedgerInput())
        first = await handle.execute_update("hold", {}, result_type=str)
        second = await handle.execute_update("hold", {}, result_type=str)
        assert first != second
        await enqueue(handle, intent("a", ["c1"]))
        # The pump runs in the same workflow task as the update: held, nothing dispatched.
        snap = await snapshot(handle)
        assert snap["held"] is True
        assert operations(snap)["a"]["phase"] == "pending"
        assert await handle.execute_update("release", {"token": first}, result_type=bool)
        assert operations(await snapshot(handle))["a"]["phase"] == "pending"
        with pytest.raises(WorkflowUpdateFailedError) as rejected:
            await handle.execute_update("release", {"token": "nope"})
        assert "'nope' is not held" in str(rejected.value.cause)
        await handle.signal("release", {"token": second})
        snap = await until_resolved_or_blocked(handle)
        assert operations(snap)["a"]["outcome"] == "applied"
        assert snap["held"] is False


async def test_stop_cancels_in_flight_and_returns_the_final_snapshot(
    client: Client, task_queue: str, unique: str
) -> None:
    def never_decides(method: str, _request_id: str, _count: int) -> Answer:
        return 202, {}, {"outcome": "accepted"}

    async with live_ledger(client, task_queue, unique, never_decides) as (_, handle):
        await enqueue(handle, intent("a", ["c1"]), intent("b", ["c2"]), intent("c", ["c1"]))

        async def both_submitted() -> bool:
            sent = [r for r in (await snapshot(handle))["requests"] if r["attempt"] >= 1]
            return len(sent) == 2

        await eventually(both_submitted)
        # Asking none: `stop` cancels and completes (tests/ledger/test_ledger_stop.py asks).
        final = await handle.execute_update("stop", {"query_limit": 0}, result_type=dict)
        assert await handle.result() == final
        ops = operations(final)
        assert final["stopped"] is True
        assert ops["a"]["phase"] == ops["b"]["phase"] == "dispatched"
        assert ops["c"]["phase"] == "pending"  # nothing dropped: still listed
        assert {r["phase"] for r in final["requests"]} == {"frozen"}
        assert {r["retry_action"] for r in final["requests"]} == {"query"}
        assert final["claims"] == {r["canvas_ids"][0]: r["id"] for r in final["requests"]}
        # Their outcome is unknown: listed with their frozen bodies, none asked.
        assert sorted(e["request_id"] for e in final["unknown"]) == sorted(
            r["id"] for r in final["requests"]
        )
        assert {e["at_stop"] for e in final["unknown"]} == {"not_asked"}
        for request in final["requests"]:
            child = client.get_workflow_handle(f"request:{unique}:{request['id']}")
            assert (await child.describe()).status == WorkflowExecutionStatus.CANCELED
        # The ledger completed: the server refuses the update, no handler ever sees it.
        with pytest.raises(RPCError, match="workflow execution already completed"):
            await enqueue(handle, intent("d", ["c3"]))


async def test_continue_as_new_keeps_in_flight_requests_and_their_bodies(
    client: Client, task_queue: str, unique: str
) -> None:
    def slow_decider(method: str, _request_id: str, count: int) -> Answer:
        if method == "POST":
            return 202, {}, {"outcome": "accepted"}
        if count < 4:
            return 200, {}, {"outcome": "accepted"}
        return 200, {}, {"outcome": "applied"}

    graph = [intent(f"op{n}", [f"c{n % 3}"], [f"op{n - 3}"] if n >= 3 else []) for n in range(9)]
    async with live_ledger(
        client, task_queue, unique, slow_decider, concurrency=3, continue_as_new_after_events=40
    ) as (server, handle):
        first_run = handle.result_run_id
        await enqueue(handle, *graph)
        snap = await until_resolved_or_blocked(handle, timeout=60)
        await record_history(client, handle.id, "continue_as_new", first_run)
    first = client.get_workflow_handle(handle.id, run_id=first_run)
    assert (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW
    assert {o["outcome"] for o in snap["operations"]} == {"applied"}
    assert server.violations == []
    for request in snap["requests"]:
        assert [r.method for r in server.sent(request["id"])] == [
            "POST",
            "GET",
            "GET",
            "GET",
            "GET",
        ]


async def test_continue_as_new_lets_attempts_in_flight_report_first(
    client: Client, task_queue: str, unique: str
) -> None:
    """History due while submits are mid-attempt: the ledger drains (waits, bounded by events
    and time, for them to report and their children to complete) before continuing as new, so
    Temporal never refuses the continue-as-new (a failed workflow task, then a full replay),
    and nothing is lost or sent twice. A loaded cacheless worker (the suite's cacheless pass)
    outlives a short time bound: the 1 s the ledger waited before `ledger-drain-before-close`
    failed about one run in two with 8 such tests at once on 2 busy cores."""

    def slow_applied(_method: str, _request_id: str, _count: int) -> Answer:
        time.sleep(0.2)
        return 200, {}, {"outcome": "applied"}

    graph = [intent(f"op{n}", [f"c{n % 3}"]) for n in range(9)]
    async with live_ledger(
        client, task_queue, unique, slow_applied, concurrency=3, continue_as_new_after_events=30
    ) as (server, handle):
        first_run = handle.result_run_id
        await enqueue(handle, *graph)
        snap = await until_resolved_or_blocked(handle, timeout=60)
        await record_history(client, handle.id, "drain_before_close", first_run)
    first = client.get_workflow_handle(handle.id, run_id=first_run)
    assert (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW
    events = [e async for e in first.fetch_history_events()]
    kinds = [e.WhichOneof("attributes") for e in events]
    # The drain ran: the ledger starts no other timer here (its bound in time).
    drains = [
        e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
        for e in events
        if e.HasField("timer_started_event_attributes")
    ]
    assert drains and set(drains) == {DRAIN_TIMEOUT}
    failed = [
        (e.event_id, e.workflow_task_failed_event_attributes.cause, kinds[i - 4 : i])
        for i, e in enumerate(events)
        if e.HasField("workflow_task_failed_event_attributes")
    ]
    assert failed == []
    assert {o["outcome"] for o in snap["operations"]} == {"applied"}
    assert server.violations == []
    for request in snap["requests"]:
        assert [r.method for r in server.sent(request["id"])] == ["POST"]


async def history_length(handle: WorkflowHandle[Any, Any]) -> int:
    return (await handle.describe()).raw_description.workflow_execution_info.history_length


async def test_a_request_that_never_reports_holds_continue_as_new_only_for_the_drain_timeout(
    client: Client, task_queue: str, unique: str
) -> None:
    """History due while a request's completion runs on and on, and nothing else happens (no
    event spends the drain's allowance): the ledger continues as new once the drain's time
    bound has passed, handing the request over, rather than wait for it forever."""
    async with ledger_with_blocked_completion(client, task_queue, unique) as (far_side, handle):
        first = client.get_workflow_handle(handle.id, run_id=handle.result_run_id)
        await enqueue(handle, intent("a", ["c1"]))
        await asyncio.wait_for(far_side.started.wait(), 30)
        # Operations behind `a`'s canvas lengthen the history until it is due, then nothing
        # more is sent: no event spends the drain's allowance.
        names = iter("bcdefghijk")
        while await history_length(first) < 20:
            await enqueue(handle, intent(next(names), ["c1"]))

        async def continued() -> bool:
            status = (await first.describe()).status
            return status == WorkflowExecutionStatus.CONTINUED_AS_NEW

        await eventually(continued, timeout=DRAIN_TIMEOUT.total_seconds() + 30, interval=1)
        events = [e async for e in first.fetch_history_events()]
        fired = {
            e.timer_fired_event_attributes.started_event_id
            for e in events
            if e.HasField("timer_fired_event_attributes")
        }
        # The drain's timers (the ledger starts no other here): the last one fired.
        timers = [e for e in events if e.HasField("timer_started_event_attributes")]
        first_bound = timers[0].timer_started_event_attributes.start_to_fire_timeout
        assert first_bound.ToTimedelta() == DRAIN_TIMEOUT
        assert timers[-1].event_id in fired
        far_side.release.set()
        snap = await until_resolved_or_blocked(client.get_workflow_handle(handle.id), timeout=60)
        assert operations(snap)["a"]["outcome"] == "applied"  # handed over, not lost


async def test_bad_enqueue_is_rejected_naming_the_field_and_bad_signals_are_dropped(
    client: Client, task_queue: str, unique: str, dev_server_address: str
) -> None:
    async with ledger_worker(client, task_queue):
        handle = await start_ledger(client, unique, task_queue, LedgerInput())
        await enqueue(handle, intent("known", ["c1"]))
        cases = {
            "operations.0.id: Field required": {"operations": [{"operation_type": "x"}]},
            "operations.0.participants.1: Input should be a valid string (got 7)": {
                "operations": [{**intent("p"), "participants": ["c1", 7]}]
            },
            "operations.0.colour: Extra inputs are not permitted": {
                "operations": [{**intent("q", ["c1"]), "colour": "red"}]
            },
            "operations.1.id 'r' repeats operations.0.id": {
                "operations": [intent("r", ["c1"]), intent("r", ["c2"])]
            },
            "dependency cycle 's' -> 't' -> 's'": {
                "operations": [intent("s", ["c1"], ["t"]), intent("t", ["c1"], ["s"])]
            },
        }
        for message, payload in cases.items():
            with pytest.raises(WorkflowUpdateFailedError) as rejected:
                await handle.execute_update("enqueue", payload)
            assert message in str(rejected.value.cause), message
        cli = await temporal(
            dev_server_address,
            "workflow",
            "update",
            "execute",
            "--workflow-id",
            handle.id,
            "--name",
            "enqueue",
            "--input",
            json.dumps({"operations": [{"id": "u", "operation_type": "x", "dependencies": "v"}]}),
            check=False,
        )
        assert cli.returncode != 0
        assert "operations.0.dependencies: Input should be a valid list" in cli.stdout + cli.stderr
        await handle.signal("enqueue", {"operations": [{"id": 5}]})
        await handle.signal("enqueue", "not an object")
        ok = await handle.execute_update(
            "enqueue", {"operations": [intent("fine", ["c2"])]}, result_type=dict
        )
        assert ok == {"accepted": ["fine"], "duplicates": [], "conflicts": []}
        snap = await snapshot(handle)
        assert [o["id"] for o in snap["operations"]] == ["known", "fine"]
        assert snap["dropped_signals"] == 2
        via_cli = await temporal(
            dev_server_address,
            "workflow",
            "update",
            "execute",
            "--workflow-id",
            handle.id,
            "--name",
            "enqueue",
            "--input",
            json.dumps({"operations": [intent("from-cli", ["c3"])]}),
        )
        assert "from-cli" in via_cli.stdout
        await until_resolved_or_blocked(handle)


async def test_worker_restart_mid_flight_resends_nothing_new_and_signal_with_start_works(
    client: Client, task_queue: str, unique: str
) -> None:
    gate = {"open": False}

    def gated(method: str, _request_id: str, _count: int) -> Answer:
        if method == "POST":
            return 202, {}, {"outcome": "accepted"}
        if gate["open"]:
            return 200, {}, {"outcome": "applied"}
        return 200, {}, {"outcome": "accepted"}

    graph = [intent("a", ["c1"]), intent("b", ["c1"], ["a"]), intent("c", ["c2"])]
    with recording_server(gated) as server:
        activities = ledger_activities(server.base_url)
        async with ledger_worker(client, task_queue, activities):
            # L1: signal-with-start creates the ledger and records the first batch.
            handle = await client.start_workflow(
                "OperationLedger",
                http_input(),
                id=f"ledger:{unique}",
                task_queue=task_queue,
                start_signal="enqueue",
                start_signal_args=[{"operations": graph}],
            )
            await eventually(lambda: len(server.first_post) == 2)
        # The worker is gone (its workflow caches with it); a new one replays from history.
        gate["open"] = True
        async with ledger_worker(client, task_queue, activities):
            snap = await until_resolved_or_blocked(handle)
    assert {o["outcome"] for o in snap["operations"]} == {"applied"}
    assert [o["id"] for o in snap["operations"]] == ["a", "b", "c"]
    assert server.violations == []
    assert len(server.bodies) == 3  # one body per request, no request frozen twice


async def test_stop_after_continue_as_new_cancels_requests_started_by_an_earlier_run(
    client: Client, task_queue: str, unique: str
) -> None:
    def never_decides(method: str, _request_id: str, _count: int) -> Answer:
        return 202, {}, {"outcome": "accepted"}

    async with live_ledger(
        client, task_queue, unique, never_decides, continue_as_new_after_events=30
    ) as (server, handle):
        first_run = handle.result_run_id
        await enqueue(handle, intent("a", ["c1"]), intent("b", ["c2"]))

        async def continued() -> bool:
            first = client.get_workflow_handle(handle.id, run_id=first_run)
            status = (await first.describe()).status
            return status == WorkflowExecutionStatus.CONTINUED_AS_NEW

        await eventually(continued)
        before_stop = len(server.received)
        final = await client.get_workflow_handle(handle.id).execute_update(
            "stop", {}, result_type=dict
        )
        assert {r["phase"] for r in final["requests"]} == {"frozen"}
        assert len(final["requests"]) == 2
        # Each was cancelled, then asked once by `stop` (a second run of its workflow ID,
        # started once the cancelled one closed): the far side still says `accepted`.
        for request in final["requests"]:
            child_id = f"request:{unique}:{request['id']}"
            await eventually(lambda child_id=child_id: _cancelled_then_asked(client, child_id))  # type: ignore[misc]
        assert {(e["at_stop"], e["next_action"]) for e in final["unknown"]} == {
            ("accepted", "query")
        }
        asked = {r.request_id for r in server.received[before_stop:] if r.method == "GET"}
        assert asked == {r["id"] for r in final["requests"]}
    assert server.violations == []


async def _cancelled_then_asked(client: Client, workflow_id: str) -> bool:
    runs = [r.status async for r in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    return sorted(str(s) for s in runs) == sorted(
        str(s) for s in (WorkflowExecutionStatus.CANCELED, WorkflowExecutionStatus.COMPLETED)
    )


async def test_recovery_conflict_fails_the_ledger_before_anything_is_sent(
    client: Client, task_queue: str, unique: str
) -> None:
    def frozen(request_id: str, op_id: str) -> dict[str, Any]:
        body = {"id": request_id, "canvas_ids": ["c1"], "operation_ids": [op_id]}
        return {
            "id": request_id,
            "operation_ids": [op_id],
            "operation_type": "shape.update",
            "canvas_ids": ["c1"],
            "body": body,
            "phase": "frozen",
        }

    carried = {
        "ledger_id": unique,
        "operations": {
            op_id: {"intent": intent(op_id, ["c1"]), "sequence": n, "phase": "dispatched"}
            for n, op_id in enumerate(["a", "b"], start=1)
        },
        "requests": {"r1": frozen("r1", "a"), "r2": frozen("r2", "b")},
    }
    with recording_server() as server:
        activities = ledger_activities(server.base_url)
        async with ledger_worker(client, task_queue, activities):
            handle = await start_ledger(
                client, unique, task_queue, http_input(carried_state=carried)
            )
            with pytest.raises(WorkflowFailureError) as failed:
                await handle.result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "LedgerRecoveryConflict"
    assert "canvas 'c1' is claimed by unresolved requests 'r1' and 'r2'" in cause.message
    assert server.received == []


async def test_skip_is_validated_and_also_accepted_as_a_signal(
    client: Client, task_queue: str, unique: str
) -> None:
    async with ledger_worker(client, task_queue):
        handle = await start_ledger(client, unique, task_queue, LedgerInput())
        orphan = intent("orphan", ["c9"], ["never-enqueued"])
        await enqueue(handle, orphan, intent("child", ["c1"], ["orphan"]))
        with pytest.raises(WorkflowUpdateFailedError) as rejected:
            await handle.execute_update("skip", {"operation_id": "ghost"})
        assert "operation_id 'ghost' is not known" in str(rejected.value.cause)
        assert operations(await snapshot(handle))["orphan"]["waiting_for"] == ["never-enqueued"]
        await handle.signal("skip", {"operation_id": "orphan", "reason": "no canvas"})
        snap = await until_resolved_or_blocked(handle)
    ops = operations(snap)
    assert (ops["orphan"]["outcome"], ops["orphan"]["error"]) == ("skipped", "no canvas")
    assert ops["child"]["outcome"] == "applied"  # dependents treat skipped as resolved


async def test_bad_start_input_fails_the_ledger_once_naming_the_field(
    client: Client, task_queue: str, unique: str
) -> None:
    async with ledger_worker(client, task_queue):
        handle = await client.start_workflow(
            "OperationLedger",
            {"concurrency": 0, "report_by_completion": True},
            id=f"ledger:{unique}",
            task_queue=task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidStartInput"
    assert "concurrency: Input should be greater than or equal to 1 (got 0)" in cause.message
    assert "report_by_completion: Extra inputs are not permitted" in cause.message
    events = [event async for event in handle.fetch_history_events()]
    assert not any(e.HasField("workflow_task_failed_event_attributes") for e in events)


async def test_resolved_operations_leave_the_carried_state_but_their_ids_are_honoured(
    client: Client, task_queue: str, unique: str
) -> None:
    retention = RetentionConfig(resolved_operations=2, remembered_ids=4)
    config = LedgerInput(retention=retention, continue_as_new_after_events=40, concurrency=4)
    async with ledger_worker(client, task_queue):
        handle = await start_ledger(client, unique, task_queue, config)
        await enqueue(handle, *(intent(f"op{n}", [f"c{n}"]) for n in range(8)))
        await eventually(lambda: _compacted(handle, resolved=2, remembered=4), timeout=30)
        # op6, op7 are kept whole; op2..op5 remembered by ID; op0, op1 forgotten.
        result = await enqueue(
            handle,
            intent("op3", ["c3"]),
            intent("op0", ["c0"]),
            intent("after", ["c9"], ["op4"]),
        )
        assert result == {"accepted": ["op0", "after"], "duplicates": ["op3"], "conflicts": []}
        snap = await eventually(lambda: _compacted(handle, resolved=2, remembered=4), timeout=30)
    assert [o["id"] for o in snap["operations"]] == ["op0", "after"]
    assert snap["counts"]["operations"] == {"resolved": 2}
    assert snap["counts"]["forgotten"] == 4
    assert snap["counts"]["resolved_total"] == 10
    runs = [e async for e in client.list_workflows(f"WorkflowId = 'ledger:{unique}'")]
    assert len(runs) > 1, "the ledger never continued as new"
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    carried = max(len(p.data) for p in started.input.payloads)
    assert carried < 10_000, f"the carried state is {carried} bytes"


async def _compacted(
    handle: WorkflowHandle[Any, Any], resolved: int, remembered: int
) -> dict[str, Any] | None:
    """The snapshot once everything resolved and compaction kept exactly these."""
    snap = await snapshot(handle)
    counts = snap["counts"]
    done = counts["operations"] == {"resolved": resolved} and counts["forgotten"] == remembered
    return snap if done else None


async def phase_of(handle: WorkflowHandle[Any, Any], op_id: str) -> str:
    return str(operations(await snapshot(handle))[op_id]["phase"])


async def _phase_is(handle: WorkflowHandle[Any, Any], op_id: str, phase: str) -> bool:
    return await phase_of(handle, op_id) == phase


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
        snap = await until_resolved_or_blocked(handle)
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
    monkeypatch.setattr("workflows.ledger.launches.CHILD_START_TRIES", 2)
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
        snap = await until_resolved_or_blocked(handle)
    assert operations(snap)["a"]["outcome"] == "applied"
    assert sent_while_taken == 1  # only the blocked submit: nothing was sent meanwhile
    assert [r.method for r in server.sent(request_id)] == ["POST", "GET"]
    assert server.violations == []


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
        snap = await until_resolved_or_blocked(handle)
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
        snap = await until_resolved_or_blocked(handle)
    ops = operations(snap)
    assert ops["export"]["outcome"] == "applied"
    assert json.loads(server.bodies[ops["export"]["request_id"]])["canvas_ids"] == []
    assert "upload" not in ops
    assert len(server.bodies) == 1
