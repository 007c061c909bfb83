"""The Python client tells the truth and leaves nothing behind (real dev server, real worker).

Input is checked with the workflows' own rules before anything is sent, so a refused first
message creates no workflow; calls other than `set_schedule` and `enqueue` never create one;
a closed ID is neither read as live nor reborn without `new=True`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from durability.client import (
    MAX_MESSAGE_BYTES,
    MAX_START_INPUT_BYTES,
    ClosedError,
    DurabilityClient,
    LedgerStopped,
    NotFoundError,
    RejectedError,
    unknown_requests,
)
from tests.support.helpers import eventually, running_worker


async def assert_no_workflow(client: Client, workflow_id: str) -> None:
    with pytest.raises(RPCError) as missing:
        await client.get_workflow_handle(workflow_id).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND, workflow_id


async def refused(call: Awaitable[Any]) -> RejectedError:
    with pytest.raises(RejectedError) as error:
        await call
    return error.value


async def test_a_refused_first_set_or_enqueue_creates_nothing(client: Client, unique: str) -> None:
    """No worker runs: every refusal here is the client's own, made before sending."""
    durability = DurabilityClient(client, f"tq-{unique}")
    schedule, ledger = f"schedule:bad-{unique}", f"ledger:bad-{unique}"
    cases: list[tuple[Awaitable[Any], str, str]] = [
        (durability.set_schedule(f"bad-{unique}", "61 * * * *", 1), "set", "payload: expression"),
        (durability.set_schedule(f"bad-{unique}", "@hourly", 1, params=[1, 2]),  # type: ignore[arg-type]
         "set", "invalid set payload: params: Input should be an object (got [1, 2])"),
        (durability.set_schedule(f"bad-{unique}", "@hourly", -1), "set", "payload: version"),
        (durability.set_schedule(f"bad-{unique}", "@hourly", 1,
                                 options={"max_concurrent_runs": 0}),
         "start", "max_concurrent_runs"),
        (durability.set_schedule(f"bad-{unique}", "@hourly", 1,
                                 options={"max_concurent_runs": 2}),
         "start", "unknown field(s) max_concurent_runs"),
        (durability.set_schedule(f"bad-{unique}", "@hourly", 1, options=[1]),  # type: ignore[arg-type]
         "start", "the start options must be a JSON object"),
        (durability.set_schedule(f"bad-{unique}", "@hourly", 1,
                                 options={"max_concurrent_runs": "2"}),
         "start", "max_concurrent_runs: Input should be a valid integer (got '2')"),
        (durability.set_schedule(f"bad-{unique}", "@hourly", 1, options={"carried": {}}),
         "start", "carried is internal"),
        (durability.signal_set_schedule(f"bad-{unique}", "not a cron", 1), "set",
         "expression: does not parse"),
        (durability.enqueue(f"bad-{unique}", [{"id": "op-1"}]), "enqueue",
         "operations.0.operation_type"),
        (durability.enqueue(f"bad-{unique}", [{"id": "a", "operation_type": "t",
                                               "dependencies": ["a"]}]),
         "enqueue", "dependency cycle"),
        (durability.enqueue(f"bad-{unique}", [], options={"concurency": 3}), "start",
         "concurency: Extra inputs are not permitted"),
        (durability.enqueue(f"bad-{unique}", [], options={"carried_state": {}}), "start",
         "carried_state is internal"),
        (durability.enqueue(f"bad-{unique}", [], options={"concurrency": 0}), "start",
         "concurrency"),
        (durability.signal_enqueue(f"bad-{unique}", [{"id": ""}]), "enqueue", "operations.0.id"),
    ]  # fmt: skip
    for call, message, named in cases:
        error = await refused(call)
        assert (error.update, named in str(error)) == (message, True), (named, str(error))
        assert "\n" not in str(error), str(error)  # one line, as a CLI prints it
    await assert_no_workflow(client, schedule)
    await assert_no_workflow(client, ledger)


async def test_payloads_over_every_bound_are_refused_before_sending_in_under_a_second(
    client: Client, task_queue: str, unique: str
) -> None:
    durability = DurabilityClient(client, task_queue)
    object_id, ledger_id = f"big-{unique}", f"big-{unique}"
    blob = "x" * 3_000_000
    async with running_worker(client, task_queue):
        # Nothing runs under these IDs yet: the workflows' own limits, applied by the client.
        over_limit: list[tuple[Callable[[], Awaitable[Any]], str]] = [
            (lambda: durability.set_schedule(object_id, "@hourly", 1, params={"blob": blob}),
             "more than the limit of 8192"),
            (lambda: durability.signal_set_schedule(object_id, "@hourly", 1,
                                                    params={"blob": blob}),
             "more than the limit of 8192"),
            (lambda: durability.enqueue(ledger_id, [{"id": "op", "operation_type": "t",
                                                     "payload": blob}]),
             "more than the limit of 16384"),
            (lambda: durability.signal_enqueue(ledger_id, [{"id": "op", "operation_type": "t",
                                                            "payload": blob}]),
             "more than the limit of 16384"),
            # What the workflows leave unbounded: the client's envelope.
            (lambda: durability.enqueue(ledger_id, [], options={"lanes": {blob: 1}}),
             "start input is 3000"),
        ]  # fmt: skip
        for call, named in over_limit:
            started = time.monotonic()
            error = await refused(call())
            elapsed = time.monotonic() - started
            assert elapsed < 3.0, (named, elapsed)  # refused here, not after a server round
            assert named is not None and named in str(error), str(error)
        await assert_no_workflow(client, f"schedule:{object_id}")
        await assert_no_workflow(client, f"ledger:{ledger_id}")

        # On running workflows: a token or key the workflow does not bound, by update and signal.
        assert await durability.set_schedule(object_id, "@hourly", 1)
        await durability.enqueue(ledger_id, [])
        on_running: list[Callable[[], Awaitable[Any]]] = [
            lambda: durability.release(ledger_id, blob),
            lambda: durability.signal_release(ledger_id, blob),
            lambda: durability.redeliver(object_id, blob),
            lambda: durability.skip(ledger_id, "op", blob),
            lambda: durability.signal_skip(ledger_id, "op", blob),
        ]
        for call in on_running:
            started = time.monotonic()
            error = await refused(call())
            assert time.monotonic() - started < 1.0
            assert error.type in {"PayloadTooLarge", "InvalidRequest"}, str(error)
        assert (await refused(durability.release(ledger_id, blob))).type == "PayloadTooLarge"
        assert f"more than the limit of {MAX_MESSAGE_BYTES}" in str(
            await refused(durability.redeliver(object_id, blob))
        )
        # Both still answer: nothing reached them.
        view = await durability.get_schedule(object_id)
        assert view is not None and view["version"] == 1
        assert (await durability.snapshot(ledger_id))["counts"]["operations"] == {}
        assert MAX_START_INPUT_BYTES < MAX_MESSAGE_BYTES < 2 * 1024 * 1024
        for workflow_id in (f"schedule:{object_id}", f"ledger:{ledger_id}"):
            await client.get_workflow_handle(workflow_id).terminate("test done")


async def test_every_call_but_set_and_enqueue_on_a_missing_id_creates_nothing(
    client: Client, unique: str
) -> None:
    durability = DurabilityClient(client, f"tq-{unique}")
    object_id = ledger_id = f"nope-{unique}"
    schedule_calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: durability.get_schedule(object_id),
        lambda: durability.list_runs(object_id),
        lambda: durability.cancel_schedule(object_id),
        lambda: durability.cancel_schedule(object_id, 3),
        lambda: durability.signal_cancel_schedule(object_id),
        lambda: durability.pause_schedule(object_id),
        lambda: durability.unpause_schedule(object_id),
        lambda: durability.trigger_schedule(object_id),
        lambda: durability.backfill_schedule(object_id, 0, 1000),
        lambda: durability.dead_letters(object_id),
        lambda: durability.redeliver(object_id, f"{object_id}:1"),
    ]
    ledger_calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: durability.snapshot(ledger_id),
        lambda: durability.claims(ledger_id),
        lambda: durability.stop(ledger_id),
        lambda: durability.hold(ledger_id),
        lambda: durability.release(ledger_id, "token"),
        lambda: durability.signal_release(ledger_id, "token"),
        lambda: durability.resume(ledger_id),
        lambda: durability.signal_resume(ledger_id),
        lambda: durability.skip(ledger_id, "op-1"),
        lambda: durability.signal_skip(ledger_id, "op-1"),
    ]
    for kind, calls in (("schedule", schedule_calls), ("ledger", ledger_calls)):
        for call in calls:
            with pytest.raises(NotFoundError) as missing:
                await call()
            assert str(missing.value) == f"no such {kind} {object_id}"
    await assert_no_workflow(client, f"schedule:{object_id}")
    await assert_no_workflow(client, f"ledger:{ledger_id}")


async def test_a_closed_schedule_is_not_read_as_live_nor_reborn_without_new(
    client: Client, task_queue: str, unique: str
) -> None:
    durability = DurabilityClient(client, task_queue)
    object_id = f"closed-{unique}"
    handle = client.get_workflow_handle(f"schedule:{object_id}")
    async with running_worker(client, task_queue):
        assert await durability.set_schedule(object_id, "@hourly", 5, params={"v": 5})
        await handle.terminate("retired by the test")
        for call in (
            durability.get_schedule(object_id),
            durability.list_runs(object_id),
            durability.dead_letters(object_id),
            durability.pause_schedule(object_id),
            durability.cancel_schedule(object_id),
        ):
            with pytest.raises(ClosedError) as closed:
                await call
            assert closed.value.status == "terminated", str(closed.value)
            assert str(closed.value).startswith(f"schedule {object_id} is closed (terminated")
        for start in (
            durability.set_schedule(object_id, "@hourly", 1),
            durability.signal_set_schedule(object_id, "@hourly", 1),
        ):
            with pytest.raises(ClosedError) as refused_start:
                await start
            assert refused_start.value.start_refused and "new=True" in str(refused_start.value)
        assert (await handle.describe()).status == WorkflowExecutionStatus.TERMINATED

        # Asked for explicitly: a new schedule, without the old one's version 5.
        assert await durability.set_schedule(object_id, "@hourly", 1, new=True)
        view = await durability.get_schedule(object_id)
        assert view is not None and (view["version"], view["paused"]) == (1, False)
        # A running schedule takes a with-start as before, signal-with-start included.
        assert await durability.set_schedule(object_id, "@hourly", 2)
        await durability.signal_set_schedule(object_id, "@hourly", 3)

        async def version_3() -> bool:
            current = await durability.get_schedule(object_id)
            return current is not None and current["version"] == 3

        await eventually(version_3)
        await handle.terminate("test done")


async def test_a_stopped_ledger_is_closed_and_takes_an_enqueue_only_with_new(
    client: Client, task_queue: str, unique: str
) -> None:
    durability = DurabilityClient(client, task_queue)
    ledger_id = f"closed-{unique}"
    operation = {"id": "op-1", "operation_type": "run.cancel"}
    async with running_worker(client, task_queue):
        assert (await durability.enqueue(ledger_id, [operation]))["accepted"] == ["op-1"]
        final = await durability.stop(ledger_id)
        assert unknown_requests(final) == []  # op-1 resolved, before or by the stop's query
        assert await durability.final_result(ledger_id) == final
        stopped_run = (await durability.ledger_handle(ledger_id).describe()).run_id
        calls = (durability.snapshot(ledger_id), durability.claims(ledger_id))
        for call in (*calls, durability.stop(ledger_id)):  # a second stop says it is stopped
            with pytest.raises(LedgerStopped) as closed:
                await call
            assert closed.value.type == "LedgerStopped"
            assert str(closed.value) == (
                f"ledger {ledger_id} is stopped (its last run completed by stop)"
            )
        for with_start in (durability.enqueue, durability.signal_enqueue):
            with pytest.raises(LedgerStopped) as refused_start:
                await with_start(ledger_id, [operation])
            assert refused_start.value.start_refused
            assert isinstance(refused_start.value, ClosedError)
            assert str(refused_start.value).startswith(
                f"ledger {ledger_id} is stopped (its last run completed by stop): enqueue "
                f"refused, nothing was created; new=True starts a new, empty ledger under ID "
                f"{ledger_id!r}"
            )
        # Nothing was created: the stopped run is still the ledger's last.
        assert (await durability.ledger_handle(ledger_id).describe()).run_id == stopped_run
        # A new ledger under the ID: op-1 is a new operation there, not a duplicate.
        again = await durability.enqueue(ledger_id, [operation], new=True)
        assert again == {"accepted": ["op-1"], "duplicates": [], "conflicts": []}
        with pytest.raises(RejectedError) as running:
            await durability.final_result(ledger_id)
        assert running.value.type == "LedgerRunning"
        with pytest.raises(RejectedError) as bad_stop:
            await durability.stop(ledger_id, query_limit=101)
        assert bad_stop.value.type == "InvalidRequest" and "query_limit" in str(bad_stop.value)
        assert (await durability.snapshot(ledger_id))["stopped"] is False
        await client.get_workflow_handle(f"ledger:{ledger_id}").terminate("test done")


@workflow.defn(name="DurabilitySchedule")
class SchedulerThatFailsOnItsFirstSet:
    """A deployment's schedule with a rule of its own: it applies the first `set`, then fails."""

    def __init__(self) -> None:
        self._set = False

    @workflow.run
    async def run(self, input: Any = None) -> None:
        await workflow.wait_condition(lambda: self._set)
        raise ApplicationError(
            "this deployment takes no schedule", type="InvalidScheduleInput", non_retryable=True
        )

    @workflow.update(name="set")
    def set(self, raw: Any = None) -> bool:
        self._set = True
        return True


async def test_a_with_start_whose_workflow_fails_is_reported_as_a_failure_with_its_reason(
    client: Client, task_queue: str, unique: str
) -> None:
    durability = DurabilityClient(client, task_queue)
    object_id = f"fails-{unique}"
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[SchedulerThatFailsOnItsFirstSet],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        with pytest.raises(ClosedError) as failed:
            await durability.set_schedule(object_id, "@hourly", 1)
    assert (failed.value.status, failed.value.reason) == (
        "failed",
        "this deployment takes no schedule",
    )
    with pytest.raises(ClosedError):
        await durability.get_schedule(object_id)
