"""OperationLedger on a cold worker: every kind of completion that can end a workflow task,
then every message it accepts, sent at once to a worker that starts with an empty cache;
then a third worker, cold too, must replay that and keep resolving operations with their
own frozen bodies."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from tests.support.cold_worker import (
    LedgerActivities,
    activity_worker,
    assert_healthy,
    assert_healthy_and_updated,
    cold_names,
    events_of,
    kind,
    wait_for_applied,
    workflow_worker,
)
from tests.support.helpers import eventually


def op(op_id: str, canvas: str | None, *dependencies: str, **payload: Any) -> dict[str, Any]:
    """An intent whose payload names its own operation (to catch a body frozen for another)."""
    return {
        "id": op_id,
        "operation_type": "shape.update",
        "participants": [] if canvas is None else [canvas],
        "dependencies": list(dependencies),
        "payload": {"op": op_id, **payload},
    }


@dataclass
class Case:
    handle: WorkflowHandle[Any, Any]
    acts: LedgerActivities
    token: str | None = None
    stopped: bool = False
    checks: list[str] = field(default_factory=list)
    # What the snapshot's `signal_conflicts` must say once the messages are replayed.
    signal_conflicts: int = 0


async def phases(handle: WorkflowHandle[Any, Any]) -> dict[str, str]:
    snap = await handle.query("snapshot")
    return {o["id"]: o["phase"] for o in snap["operations"]}


async def enqueue(handle: WorkflowHandle[Any, Any], *intents: dict[str, Any]) -> Any:
    return await handle.execute_update("enqueue", {"operations": list(intents)})


async def until_phase(handle: WorkflowHandle[Any, Any], op_id: str, *wanted: str) -> None:
    async def reached() -> bool:
        return (await phases(handle)).get(op_id) in wanted

    await eventually(reached, timeout=30)


# --- completions


async def request_end(case: Case) -> None:
    """A request resolves: its `request_finished` signal, then its child's completion."""
    await enqueue(case.handle, op("A", "c0"))
    await until_phase(case.handle, "A", "resolved")
    await wait_for_applied(case.handle, "CHILD_WORKFLOW_EXECUTION_COMPLETED")


async def compile_result(case: Case) -> None:
    """A compile activity's result (the task also starts the request's child)."""
    await enqueue(case.handle, op("A", "c0"))
    await wait_for_applied(case.handle, "ACTIVITY_TASK_COMPLETED")


async def blocked_compile(case: Case) -> None:
    """A compile activity fails: the operation is blocked, nothing starts."""
    await enqueue(case.handle, op("A", "c0", compile_error=True))
    await until_phase(case.handle, "A", "blocked")
    await wait_for_applied(case.handle, "ACTIVITY_TASK_FAILED")


async def failed_child(case: Case) -> None:
    """A request's child ends without reporting (terminated from outside)."""
    await enqueue(case.handle, op("A", "c0", submit_ms=20_000))
    await eventually(lambda: case.acts.sent, timeout=30)
    request_id = case.acts.sent[0]["id"]
    ledger_id = case.handle.id.removeprefix("ledger:")
    child = case.handle._client.get_workflow_handle(f"request:{ledger_id}:{request_id}")
    await child.terminate("the cold-worker test ends this request")
    await wait_for_applied(case.handle, "CHILD_WORKFLOW_EXECUTION_TERMINATED")


async def completion_accepted(case: Case) -> None:
    """A request's `complete_activity` accepts, and its result reaches a cold worker: the call
    waits (`complete_gated`) until the next worker is up, then the child resolves there."""
    await enqueue(case.handle, op("A", "c0", complete_gated=True))
    await eventually(lambda: case.acts.completions, timeout=30)


async def completion_blocked(case: Case) -> None:
    """As `completion_accepted`, but the completion answers blocked: the request blocks with
    its claims on the cold worker (a later call, after `resume`, accepts)."""
    await enqueue(case.handle, op("A", "c0", complete_gated=True, complete_refuse=True))
    await eventually(lambda: case.acts.completions, timeout=30)


async def grant_relaunch(case: Case) -> None:
    """A request waits for its retry (its slot free); the ledger's timer fires when it is due
    and its grant signal completes: the retry is re-launched by the grant."""
    await enqueue(case.handle, op("A", "c0", retry_after_ms=300))
    await wait_for_applied(case.handle, "TIMER_FIRED")
    await wait_for_applied(case.handle, "EXTERNAL_WORKFLOW_EXECUTION_SIGNALED")


COMPLETIONS: dict[str, Callable[[Case], Awaitable[None]]] = {
    "grant_relaunch": grant_relaunch,
    "request_end": request_end,
    "compile_result": compile_result,
    "blocked_compile": blocked_compile,
    "failed_child": failed_child,
    "completion_accepted": completion_accepted,
    "completion_blocked": completion_blocked,
}
# The completions whose ledger calls `complete_activity`.
WITH_COMPLETE = {"completion_accepted", "completion_blocked"}
# The completions after which a request's child is still running.
CHILD_IN_FLIGHT = WITH_COMPLETE | {"grant_relaunch", "compile_result"}


# --- messages (sent at once to the new worker)

NEXT = (op("B", "c1", "A"), op("C", "c2"))


async def enqueue_update(case: Case) -> None:
    result = await enqueue(case.handle, *NEXT)
    assert result == {"accepted": ["B", "C"], "duplicates": [], "conflicts": []}


async def enqueue_signal(case: Case) -> None:
    await case.handle.signal("enqueue", {"operations": list(NEXT)})
    await until_phase(case.handle, "C", "pending", "dispatched", "resolved")


# D is known (pending, waiting for an operation never enqueued): sent otherwise, a conflict.
CONFLICTING = (op("D", "c9"), *NEXT)


async def enqueue_conflict_update(case: Case) -> None:
    result = await enqueue(case.handle, *CONFLICTING)
    assert result == {"accepted": ["B", "C"], "duplicates": [], "conflicts": ["D"]}


async def enqueue_conflict_signal(case: Case) -> None:
    await case.handle.signal("enqueue", {"operations": list(CONFLICTING)})
    case.signal_conflicts = 1

    async def counted() -> bool:
        snap: dict[str, Any] = await case.handle.query("snapshot")
        return bool(snap["signal_conflicts"] == 1)

    await eventually(counted, timeout=30)


async def hold(case: Case) -> None:
    case.token = await case.handle.execute_update("hold", {}, result_type=str)
    assert (await case.handle.query("snapshot"))["held"] is True


async def release(case: Case) -> None:
    assert case.token is not None
    assert await case.handle.execute_update("release", {"token": case.token}) is True
    case.token = None
    assert (await case.handle.query("snapshot"))["held"] is False


async def resume_update(case: Case) -> None:
    result = await case.handle.execute_update("resume", {})
    assert isinstance(result["resumed"], list)


async def resume_signal(case: Case) -> None:
    await case.handle.signal("resume", {})


async def skip_update(case: Case) -> None:
    assert await case.handle.execute_update("skip", {"operation_id": "D"}) is True
    await until_phase(case.handle, "D", "resolved")


async def skip_signal(case: Case) -> None:
    await case.handle.signal("skip", {"operation_id": "D"})
    await until_phase(case.handle, "D", "resolved")


async def settle(case: Case) -> None:
    result = await case.handle.execute_update("settle", {})
    assert set(result) == {"held", "waiting", "counts"}
    assert result["held"] is (case.token is not None)


async def stop(case: Case) -> None:
    final = await case.handle.execute_update("stop", {})
    assert final["stopped"] is True
    case.stopped = True


async def configure_update(case: Case) -> None:
    settings = await case.handle.execute_update(
        "configure", {"concurrency": 6, "retry": {"initial_interval_ms": 200}}, result_type=dict
    )
    assert settings["concurrency"] == 6 and settings["retry"]["initial_interval_ms"] == 200
    assert await case.handle.query("settings") == settings


async def configure_signal(case: Case) -> None:
    await case.handle.signal("configure", {"concurrency": 6})

    async def applied() -> bool:
        return bool((await case.handle.query("settings"))["concurrency"] == 6)

    await eventually(applied, timeout=30)
    assert (await case.handle.query("snapshot"))["dropped_signals"] == 0


MESSAGES: dict[str, Callable[[Case], Awaitable[None]]] = {
    "configure_update": configure_update,
    "configure_signal": configure_signal,
    "enqueue_update": enqueue_update,
    "enqueue_signal": enqueue_signal,
    "enqueue_conflict_update": enqueue_conflict_update,
    "enqueue_conflict_signal": enqueue_conflict_signal,
    "hold": hold,
    "release": release,
    "resume_update": resume_update,
    "resume_signal": resume_signal,
    "skip_update": skip_update,
    "skip_signal": skip_signal,
    "settle": settle,
    "stop": stop,
}


async def progress(case: Case) -> None:
    """Release any hold, enqueue two more operations and see everything resolvable resolve."""
    handle = case.handle
    if case.token is not None:
        await handle.execute_update("release", {"token": case.token})
    await enqueue(handle, op("E", "c3"), op("F", "c4", "E"))
    await until_phase(handle, "F", "resolved")
    snap = await handle.query("snapshot")
    assert snap["signal_conflicts"] == case.signal_conflicts
    waiting = {o["id"]: o["waiting_for"] for o in snap["operations"]}.get("D")
    assert waiting in (None, [], ["never-enqueued"]), waiting
    current = await phases(handle)
    if current.get("A") == "resolved" and "B" in current:
        await until_phase(handle, "B", "resolved")


@pytest.mark.parametrize("message", sorted(MESSAGES))
@pytest.mark.parametrize("completion", sorted(COMPLETIONS))
async def test_message_after_completion_on_a_cold_worker(
    client: Client, completion: str, message: str
) -> None:
    suffix, task_queue, activity_queue = cold_names()
    acts = LedgerActivities()
    start: dict[str, Any] = {"activity_task_queue": activity_queue, "concurrency": 4}
    if completion in WITH_COMPLETE:
        start["complete_activity"] = "complete"
    async with activity_worker(client, activity_queue, acts.all()):
        async with workflow_worker(client, task_queue):
            handle = await client.start_workflow(
                "OperationLedger", start, id=f"ledger:cold-{suffix}", task_queue=task_queue
            )
            case = Case(handle=handle, acts=acts)
            # D waits for an operation never enqueued: pending until skipped (the skip
            # messages need it).
            await enqueue(handle, op("D", "cD", "never-enqueued"))
            if message == "release" and completion == "grant_relaunch":
                # A hold taken before would stop the grant itself (L12): take it after.
                await grant_relaunch(case)
                case.token = await handle.execute_update("hold", {}, result_type=str)
            elif message == "release":
                await _hold_while(case, COMPLETIONS[completion])
            else:
                await COMPLETIONS[completion](case)
        async with workflow_worker(client, task_queue):
            acts.gate.set()  # a gated completion's result now reaches this cold worker
            if completion in CHILD_IN_FLIGHT and message == "stop":
                # Not at once: `stop` completes the ledger (and cancels the child) in its own
                # task, and a child's report racing that task fails it (UnhandledCommand), a
                # known open race of `stop` (tolerated and printed by
                # tests/simulation/test_ledger_sdk_random.py), not of the completion: every
                # one of these leaves a request's child in flight (a compile's result starts
                # it, a granted retry is one).
                await until_phase(handle, "A", "resolved", "blocked")
            await MESSAGES[message](case)
        async with workflow_worker(client, task_queue):
            if case.stopped:
                result = await handle.result()
                assert result["stopped"] is True
                assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
            else:
                await progress(case)
            if completion in WITH_COMPLETE:
                await _check_completed_request(case, completion)
    # Every frozen body that was sent carries its own operation's payload.
    for body in acts.sent:
        assert [body["payload"]["op"]] == body["operation_ids"], body
    await assert_healthy_and_updated(client, handle)


async def test_stop_in_the_task_after_a_grant_reaches_a_cold_worker_with_it(
    client: Client,
) -> None:
    """The grant's completion is the last thing the ledger applied (the granted attempt is a
    long query that reports nothing yet) when `stop` arrives at a new worker, which gets
    both in one activation unless the grant's task sent a command ("Cold-worker activation
    merge"): the ledger gives the same commands as on replay, where they come apart."""
    suffix, task_queue, activity_queue = cold_names()
    acts = LedgerActivities()
    start = {"activity_task_queue": activity_queue, "concurrency": 4}
    async with activity_worker(client, activity_queue, acts.all()):
        async with workflow_worker(client, task_queue):
            handle = await client.start_workflow(
                "OperationLedger", start, id=f"ledger:cold-{suffix}", task_queue=task_queue
            )
            # The submit asks for a retry in 300 ms; the granted query takes 8 s.
            await enqueue(handle, op("A", "c0", retry_after_ms=300, query_ms=8_000))
            await wait_for_applied(handle, "EXTERNAL_WORKFLOW_EXECUTION_SIGNALED")
        async with workflow_worker(client, task_queue):
            final = await handle.execute_update("stop", {"query_limit": 0}, result_type=dict)
            assert final["stopped"] is True
            assert await handle.result() == final
    assert len(acts.queried) == 1  # the granted attempt was under way when `stop` came
    # The interleaving under test: nothing reached the ledger between the grant's completion
    # and `stop`, which came in the next workflow task.
    kinds = [kind(e) for e in await events_of(handle)]
    granted, stopped = (
        kinds.index("EXTERNAL_WORKFLOW_EXECUTION_SIGNALED"),
        kinds.index(
            "WORKFLOW_EXECUTION_UPDATE_ACCEPTED",
            kinds.index("EXTERNAL_WORKFLOW_EXECUTION_SIGNALED"),
        ),
    )
    assert set(kinds[granted + 1 : stopped]) == {
        "WORKFLOW_TASK_SCHEDULED", "WORKFLOW_TASK_STARTED", "WORKFLOW_TASK_COMPLETED"
    }  # fmt: skip
    await assert_healthy(client, handle)


async def _check_completed_request(case: Case, completion: str) -> None:
    """A's request ended as its completion said, and its child's history is healthy."""
    if not case.stopped:  # the gated completion's result may still be on its way
        await until_phase(case.handle, "A", "resolved", "blocked")
    snap = await case.handle.query("snapshot")
    a = next(o for o in snap["operations"] if o["id"] == "A")
    request_id = case.acts.completions[0]
    assert a["request_id"] == request_id
    if a["phase"] == "blocked":
        assert completion == "completion_blocked"
        assert a["blockers"] == ["receipt mismatch"]
        assert snap["claims"].get("c0") == request_id
    elif a["phase"] == "resolved":
        # accepted, or blocked and then resumed: the later call accepted
        assert case.acts.completions.count(request_id) == (
            1 if completion == "completion_accepted" else 2
        )
    else:
        assert case.stopped and a["phase"] == "dispatched"  # stopped mid-completion
    ledger_id = case.handle.id.removeprefix("ledger:")
    child = case.handle._client.get_workflow_handle(f"request:{ledger_id}:{request_id}")
    await assert_healthy(case.handle._client, child)


async def _hold_while(case: Case, completion: Callable[[Case], Awaitable[None]]) -> None:
    """Take a hold once the completion's operation is sent, so `release` has a token (a hold
    taken while it compiles would stop its submit, L12)."""

    async def sent_or_ended() -> bool:
        return bool(case.acts.sent) or (await phases(case.handle)).get("A") in (
            "resolved",
            "blocked",
        )

    async def admitted_then_held() -> None:
        await eventually(sent_or_ended, timeout=30)
        case.token = await case.handle.execute_update("hold", {}, result_type=str)

    await asyncio.gather(completion(case), admitted_then_held())


async def test_configure_launches_waiting_operations_at_once_on_a_cold_worker(
    client: Client,
) -> None:
    """Operations wait for the only slot; a cold worker gets `configure` of three at once:
    the waiting ones are dispatched in the update's own task, and the history replays."""
    suffix, task_queue, activity_queue = cold_names()
    acts = LedgerActivities()
    start = {"activity_task_queue": activity_queue, "concurrency": 1}
    async with activity_worker(client, activity_queue, acts.all()):
        async with workflow_worker(client, task_queue):
            handle = await client.start_workflow(
                "OperationLedger", start, id=f"ledger:cold-{suffix}", task_queue=task_queue
            )
            await enqueue(handle, *(op(f"W{n}", f"c{n}", submit_ms=6000) for n in range(3)))
            await eventually(lambda: acts.sent, timeout=30)
        async with workflow_worker(client, task_queue):
            settings = await handle.execute_update(
                "configure", {"concurrency": 3}, result_type=dict
            )
            assert settings["concurrency"] == 3

            async def all_dispatched() -> bool:
                return set((await phases(handle)).values()) == {"dispatched"}

            await eventually(all_dispatched, timeout=30)
            for n in range(3):
                await until_phase(handle, f"W{n}", "resolved")
    for body in acts.sent:
        assert [body["payload"]["op"]] == body["operation_ids"], body
    await assert_healthy_and_updated(client, handle)


async def test_a_stop_whose_final_query_answers_at_a_cold_worker(client: Client) -> None:
    """`stop` comes while A waits after `accepted`; its final query runs while the workflow
    worker that began the stop goes away, and answers `applied` once only a cold worker is
    left, which gets a `skip` at once too: it must rebuild the stop mid-flight, apply the
    answer and complete with A resolved at stop."""
    suffix, task_queue, activity_queue = cold_names()
    acts = LedgerActivities()
    start = {
        "activity_task_queue": activity_queue,
        "concurrency": 4,
        "retry": {"initial_interval_ms": 60_000, "maximum_interval_ms": 60_000},
    }
    async with activity_worker(client, activity_queue, acts.all()):
        async with workflow_worker(client, task_queue):
            handle = await client.start_workflow(
                "OperationLedger", start, id=f"ledger:cold-{suffix}", task_queue=task_queue
            )
            await enqueue(
                handle,
                op("D", "cD", "never-enqueued"),
                op("A", "c0", submit_outcome="accepted", query_ms=1500),
            )

            async def waiting_for_its_query() -> bool:
                snap: dict[str, Any] = await handle.query("snapshot")
                return any(r["attempt"] == 1 for r in snap["requests"])

            await eventually(waiting_for_its_query, timeout=30)
            stopping = asyncio.create_task(handle.execute_update("stop", {}, result_type=dict))
            await eventually(lambda: acts.queried, timeout=30)  # the final query runs
        # The answer is in; no workflow worker has seen it. A skip is sent before one starts.
        await eventually(lambda: acts.answered, timeout=30)
        assert not stopping.done()
        skipping = asyncio.create_task(handle.execute_update("skip", {"operation_id": "D"}))
        async with workflow_worker(client, task_queue):
            final = await stopping
            skipped = await asyncio.gather(skipping, return_exceptions=True)
    [request_id] = acts.queried
    assert final["resolved_at_stop"] == [
        {"request_id": request_id, "operation_ids": ["A"], "outcome": "applied"}
    ]
    assert final["unknown"] == []
    assert await handle.result() == final
    phases_at_stop = {o["id"]: o["phase"] for o in final["operations"]}
    # A skip is refused while `stop` runs (its final queries may be asking), or by a
    # completed ledger.
    assert skipped[0] is not True and phases_at_stop["D"] == "pending", skipped
    await assert_healthy_and_updated(client, handle)


async def test_snapshot_counters_answer_the_same_on_a_cold_worker(client: Client) -> None:
    """The counters are carried state changed only by what the history holds: a cold worker
    replaying it answers the snapshot's `counters` as the worker that recorded it did, a
    completion's refusal, a `resume` and a `skip` included."""
    suffix, task_queue, activity_queue = cold_names()
    acts = LedgerActivities()
    start = {"activity_task_queue": activity_queue, "complete_activity": "complete"}
    async with activity_worker(client, activity_queue, acts.all()):
        async with workflow_worker(client, task_queue):
            handle = await client.start_workflow(
                "OperationLedger", start, id=f"ledger:cold-{suffix}", task_queue=task_queue
            )
            await enqueue(handle, op("A", "c0", complete_refuse=True), op("B", "c1"))
            await enqueue(handle, op("D", "cD", "never-enqueued"))  # pending until skipped
            await until_phase(handle, "A", "blocked")
            await until_phase(handle, "B", "resolved")
            assert await handle.execute_update("skip", {"operation_id": "D"}, result_type=bool)
            await handle.execute_update("resume", {})
            await until_phase(handle, "A", "resolved")
            warm = (await handle.query("snapshot"))["counters"]
        async with workflow_worker(client, task_queue):
            cold = (await handle.query("snapshot"))["counters"]
    assert cold == warm
    assert warm == {
        "operations_enqueued": 3,
        "operations_resolved": {"applied": 2, "skipped": 1},
        # A's submit (applied, then refused by the completion), A's query after the resume,
        # B's submit: each counts what the far side answered.
        "request_attempts": {"applied": 3},
        "requests_blocked": {"completion": 1},
        "completion_refusals": {"refused": 1},
    }
    await assert_healthy(client, handle)
