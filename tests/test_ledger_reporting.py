"""How FrozenRequest children report their end, on the dev server.

A child reports its final result by completing (the ledger run that started it awaits it);
before continuing as new the ledger hands its children over to `request_finished` signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
import time
from collections import Counter
from typing import Any

import pytest
from temporalio.api.enums.v1 import WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from activities.ledger import ledger_activities
from tests.helpers import eventually
from tests.test_ledger_support import (
    Answer,
    intent,
    ledger_worker,
    operations,
    recording_server,
    requests,
)
from tests.test_ledger_workflow import (
    enqueue,
    http_input,
    record_history,
    settled,
    start_ledger,
)
from workflows.handover import REPORT_BY_SIGNAL
from workflows.ledger import workflow as ledger_workflow


def _kind(event: HistoryEvent) -> str:
    return event.WhichOneof("attributes") or ""


async def _runs(client: Client, workflow_id: str) -> list[list[HistoryEvent]]:
    """Every run of a workflow ID's latest chain, first run first."""
    runs: list[list[HistoryEvent]] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        runs.insert(0, list(history.events))
        started = history.events[0].workflow_execution_started_event_attributes
        if not started.continued_execution_run_id:
            return runs
        run_id = started.continued_execution_run_id


def _number(request_id: str) -> int:
    return sum(map(ord, request_id))


def _signals_sent(events: list[HistoryEvent], name: str) -> int:
    return sum(
        1
        for e in events
        if e.HasField("signal_external_workflow_execution_initiated_event_attributes")
        and e.signal_external_workflow_execution_initiated_event_attributes.signal_name == name
    )


def _signaled(event: HistoryEvent, name: str) -> bool:
    return (
        event.HasField("workflow_execution_signaled_event_attributes")
        and event.workflow_execution_signaled_event_attributes.signal_name == name
    )


def _first_run_id(handle: WorkflowHandle[Any, Any]) -> str:
    run_id = handle.result_run_id
    assert run_id is not None
    return run_id


async def test_a_request_reports_by_completing_without_a_signal(
    client: Client, task_queue: str, unique: str
) -> None:
    def applied_at_once(_method: str, _request_id: str, _count: int) -> Answer:
        return 200, {}, {"outcome": "applied"}

    with recording_server(applied_at_once) as server:
        async with ledger_worker(client, task_queue, ledger_activities(server.base_url)):
            handle = await start_ledger(
                client, unique, task_queue, http_input(report_by_completion=True)
            )
            await enqueue(handle, intent("a", ["c1"]), intent("b", ["c1"], ["a"]))
            snap = await settled(handle)
            request_a = operations(snap)["a"]["request_id"]
            child_id = f"request:{unique}:{request_a}"
            await client.get_workflow_handle(child_id).result()
            await record_history(client, child_id, "request_by_completion")
    assert {o["outcome"] for o in snap["operations"]} == {"applied"}
    assert server.violations == []
    for request in snap["requests"]:
        (child,) = await _runs(client, f"request:{unique}:{request['id']}")
        kinds = [_kind(e) for e in child]
        assert "signal_external_workflow_execution_initiated_event_attributes" not in kinds
        assert kinds.count("workflow_task_completed_event_attributes") == 2  # start, result
        assert kinds[-1] == "workflow_execution_completed_event_attributes"


async def test_continue_as_new_hands_children_over_and_every_operation_resolves_once(
    client: Client, task_queue: str, unique: str
) -> None:
    """Continue-as-new every few events with many requests in flight, finishing at all kinds of
    moments (some children complete while the hand-over signal is on its way). Every operation
    resolves exactly once; nothing is left dispatched; no report is lost."""
    rng = random.Random(4)
    lock = threading.Lock()
    applied_answers: Counter[str] = Counter()

    def answer(method: str, request_id: str, count: int) -> Answer:
        time.sleep(rng.random() * 0.03)
        quick = _number(request_id) % 3 == 0
        if method == "POST" and not quick:
            return 202, {}, {"outcome": "accepted"}
        if method == "GET" and count == 1 and _number(request_id) % 2 == 0:
            return 200, {}, {"outcome": "accepted"}
        with lock:
            applied_answers[request_id] += 1
        return 200, {}, {"outcome": "applied"}

    graph = []
    for n in range(72):
        deps = [f"op{d}" for d in rng.sample(range(n), min(n, 2)) if rng.random() < 0.3]
        graph.append(intent(f"op{n}", [f"c{n % 24}"], deps))
    with recording_server(answer) as server:
        async with ledger_worker(client, task_queue, ledger_activities(server.base_url)):
            config = http_input(
                concurrency=16, continue_as_new_after_events=60, report_by_completion=True
            )
            handle = await start_ledger(client, unique, task_queue, config)
            first_run = _first_run_id(handle)
            await enqueue(handle, *graph)
            snap = await settled(handle, timeout=150)
            await record_history(client, handle.id, "handover", first_run)
            parent_runs = await _runs(client, handle.id)
            children = {
                r["id"]: await _runs(client, f"request:{unique}:{r['id']}")
                for r in snap["requests"]
            }
            # For the replay test: a child handed over mid-loop that then signalled its end.
            replayed = next(
                rid
                for rid, runs in children.items()
                if _signals_sent(runs[0], "request_finished") == 1
                and _signals_sent(runs[0], "request_progress") >= 1
                and any(_signaled(e, REPORT_BY_SIGNAL) for e in runs[0])
            )
            await record_history(client, f"request:{unique}:{replayed}", "request_handed_over")
    ops = operations(snap)
    assert {o["phase"] for o in ops.values()} == {"resolved"}
    assert {o["outcome"] for o in ops.values()} == {"applied"}
    assert len(snap["requests"]) == len(graph)
    assert {r["phase"] for r in snap["requests"]} == {"resolved"}
    assert len({o["request_id"] for o in ops.values()}) == len(graph)
    assert snap["claims"] == {}
    assert server.violations == []
    assert set(applied_answers) == set(requests(snap))
    assert set(applied_answers.values()) == {1}
    assert len(parent_runs) >= 4
    handed_over = sum(_signals_sent(run, REPORT_BY_SIGNAL) for run in parent_runs)
    assert handed_over > 0
    by_signal = [
        rid for rid, runs in children.items() if _signals_sent(runs[-1], "request_finished") == 1
    ]
    assert 0 < len(by_signal) < len(children)
    for runs in children.values():
        assert len(runs) == 1
        assert _kind(runs[0][-1]) == "workflow_execution_completed_event_attributes"
    # Diagnostics (visible with -s): the races this run exercised.
    refused = [
        rid
        for rid, runs in children.items()
        if any(_kind(e) == "workflow_task_failed_event_attributes" for e in runs[0])
    ]
    closed = sum(
        _kind(e) == "signal_external_workflow_execution_failed_event_attributes"
        for run in parent_runs
        for e in run
    )
    print(
        f"parent runs {len(parent_runs)}, handed over {handed_over}, by signal {len(by_signal)}"
        f"/{len(children)}, child completions refused {len(refused)}, hand-overs to closed {closed}"
    )


async def test_a_handed_over_request_keeps_reporting_by_signal_across_its_continue_as_new(
    client: Client, task_queue: str, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger_workflow, "REQUEST_ATTEMPTS_PER_RUN", 2)

    def slow(method: str, _request_id: str, count: int) -> Answer:
        if method == "POST" or count < 6:
            return 202 if method == "POST" else 200, {}, {"outcome": "accepted"}
        return 200, {}, {"outcome": "applied"}

    with recording_server(slow) as server:
        async with ledger_worker(client, task_queue, ledger_activities(server.base_url)):
            config = http_input(continue_as_new_after_events=30, report_by_completion=True)
            handle = await start_ledger(client, unique, task_queue, config)
            await enqueue(handle, intent("a", ["c1"]), intent("b", ["c2"]))
            snap = await settled(handle, timeout=60)
            children = {
                r["id"]: await _runs(client, f"request:{unique}:{r['id']}")
                for r in snap["requests"]
            }
            parent_runs = await _runs(client, handle.id)
    assert {o["outcome"] for o in snap["operations"]} == {"applied"}
    assert server.violations == []
    assert len(parent_runs) >= 2
    for runs in children.values():
        # 7 attempts at 2 per run: the loop continued as new 3 times.
        assert len(runs) == 4
        inputs = [_input_flag(run) for run in runs]
        assert inputs[0] is True
        assert inputs[-1] is False  # handed over before the last run started
        assert inputs == sorted(inputs, reverse=True)  # once handed over, stays handed over
        assert _signals_sent(runs[-1], "request_finished") == 1
        for run in runs[:-1]:
            assert _signals_sent(run, "request_finished") == 0


def _input_flag(run: list[HistoryEvent]) -> bool:
    started = run[0].workflow_execution_started_event_attributes
    value = json.loads(started.input.payloads[0].data)
    return bool(value.get("report_by_completion"))


async def test_a_hand_over_that_arrives_while_the_request_completes_is_still_seen(
    client: Client, task_queue: str, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the hand-over relies on: the ledger's `durability.report_by_signal` arrives
    while the child's completing workflow task runs. Temporal refuses that completion (a signal
    came in during the task); the retried task sees the signal and reports by signal, to the
    ledger's next run, which holds no handle to the child."""
    in_final_task = threading.Event()
    handed_over = threading.Event()
    original = ledger_workflow.FrozenRequestWorkflow._reports_by_completion

    def held_decision(self: Any, input: Any) -> bool:
        if not in_final_task.is_set():
            in_final_task.set()
            # Block this workflow task (in its worker thread) until the hand-over signal has
            # reached the child; at most 1.5 s, under the SDK's 2 s deadlock detection.
            handed_over.wait(1.5)
        return original(self, input)

    monkeypatch.setattr(
        ledger_workflow.FrozenRequestWorkflow, "_reports_by_completion", held_decision
    )

    def applied_at_once(_method: str, _request_id: str, _count: int) -> Answer:
        return 200, {}, {"outcome": "applied"}

    with recording_server(applied_at_once) as server:
        activities = ledger_activities(server.base_url)
        async with ledger_worker(client, task_queue, activities):
            config = http_input(continue_as_new_after_events=40, report_by_completion=True)
            handle = await start_ledger(client, unique, task_queue, config)
            first_run = _first_run_id(handle)
            await enqueue(handle, intent("a", ["c1"]))
            await eventually(in_final_task.is_set, timeout=10)
            # Grow the ledger's history past its limit while the child is mid-completion,
            # until the ledger's hand-over signal has been delivered to the child.
            first = client.get_workflow_handle(handle.id, run_id=first_run)
            try:
                while True:
                    kinds = [_kind(e) async for e in first.fetch_history_events()]
                    if "external_workflow_execution_signaled_event_attributes" in kinds:
                        break
                    if "signal_external_workflow_execution_initiated_event_attributes" in kinds:
                        await asyncio.sleep(0.05)
                        continue
                    with contextlib.suppress(RPCError):  # a task refused (new events): again
                        await first.execute_update("hold", {}, result_type=str)
            finally:
                handed_over.set()
            snap = await settled(client.get_workflow_handle(handle.id), timeout=30)
            request_id = operations(snap)["a"]["request_id"]
            child_id = f"request:{unique}:{request_id}"
            await record_history(client, child_id, "request_handover_while_completing")
            (child,) = await _runs(client, child_id)
            parent_runs = await _runs(client, handle.id)
    assert operations(snap)["a"]["outcome"] == "applied"
    assert server.violations == []
    if len(parent_runs) < 2:
        # Timing: the ledger settled before its continue-as-new went through, so the race
        # this test is about did not happen (seen once in a CI run on a loaded machine).
        pytest.skip("the ledger did not continue as new during the race on this run")
    assert _signals_sent(parent_runs[0], REPORT_BY_SIGNAL) == 1
    # Nothing in the later runs awaits the child: its report came by signal.
    assert all(
        "child_workflow_execution_completed_event_attributes" not in map(_kind, run)
        for run in parent_runs[1:]
    )
    kinds = [_kind(e) for e in child]
    print("child events:", " ".join(k.removesuffix("_event_attributes") for k in kinds))
    (refused,) = [e for e in child if e.HasField("workflow_task_failed_event_attributes")]
    cause = refused.workflow_task_failed_event_attributes.cause
    assert cause == WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND
    assert "workflow_execution_signaled_event_attributes" in kinds
    assert _signals_sent(child, "request_finished") == 1
    assert kinds[-1] == "workflow_execution_completed_event_attributes"
    assert len(server.sent(request_id)) == 1  # the refused task sent nothing twice
