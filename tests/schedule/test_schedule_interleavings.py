"""Two things at once on a real schedule: a cancellation while the schedule closes for
continue-as-new with an outcome delivery in flight, concurrent `trigger`s, messages to a
schedule closing as cancelled, and the outcome deliveries counted in the metrics."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from durability.client import DurabilityClient
from harness.server import free_port
from tests.support.fakes import ScheduleFake
from tests.support.helpers import durability_cli, eventually, record_history, schedule_worker
from workflows.schedule.models import run_workflow_id
from workflows.search_attributes import SCHEDULE_STATE_MEMO_KEY

pytestmark = pytest.mark.cacheless

YEARLY = "0 0 1 1 *"


async def _events(handle: Any) -> list[Any]:
    return [event async for event in handle.fetch_history_events()]


async def test_a_cancellation_while_closing_for_continue_as_new_delivers_and_closes(
    client: Client, task_queue: str, unique: str
) -> None:
    """The close for continue-as-new stops the outcome deliveries; a cancellation meanwhile
    must lift that stop, deliver the outcome, and close the schedule as cancelled."""
    fake = ScheduleFake()
    async with schedule_worker(client, task_queue, fake.activities()):
        handle = await client.start_workflow(
            "DurabilitySchedule",
            {"continue_as_new_after_events": 60, "outcome_retries": {"initial_interval_ms": 100}},
            id=f"schedule:cancel-closing-{unique}",
            task_queue=task_queue,
        )
        payload = {"expression": YEARLY, "version": 1, "params": {"gated_then_refused": True}}
        await handle.execute_update("set", payload)
        scheduled_time = await handle.execute_update("trigger", {}, result_type=int)
        await eventually(lambda: fake.outcomes, timeout=20)  # the delivery is in flight

        async def closing() -> bool:
            # Grow the history (each update adds events) until the run begins its close:
            # it asks the delivery going to cancel.
            types = [event.event_type for event in await _events(handle)]
            if EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED in types:
                return True
            await handle.execute_update("pause", {})
            await handle.execute_update("unpause", {})
            return False

        await eventually(closing, timeout=60, interval=0.05)
        await handle.cancel()
        fake.outcome_gate.set()  # the attempt going now fails: the delivery was interrupted
        with pytest.raises(WorkflowFailureError) as closed:
            await asyncio.wait_for(handle.result(), timeout=60)
    assert isinstance(closed.value.cause, CancelledError)
    assert fake.refused_after_gate == [scheduled_time]
    assert fake.accepted == [scheduled_time]  # delivered by the cancelled run itself
    record_history("schedule_parent_0_1_1_deliver_while_cancelling", await handle.fetch_history())


async def test_concurrent_triggers_each_record_their_own_run(
    client: Client, task_queue: str, unique: str
) -> None:
    """Triggers handled in one workflow task share `now`: each still records its own run at
    its own scheduled_time (or is refused), never merged into another's."""
    fake = ScheduleFake()
    object_id = f"triggers-{unique}"
    async with schedule_worker(client, task_queue, fake.activities()):
        durability = DurabilityClient(client, task_queue)
        await durability.set_schedule(
            object_id, YEARLY, 1, options={"max_concurrent_runs": 20, "max_queued_runs": 20}
        )
        answers = await asyncio.gather(
            *(durability.trigger_schedule(object_id) for _ in range(20)),
            return_exceptions=True,
        )
        times = [answer for answer in answers if isinstance(answer, int)]
        assert len(times) == 20, answers
        assert len(set(times)) == 20, sorted(times)
        await eventually(lambda: len(fake.accepted) == 20, timeout=60)
        handle = client.get_workflow_handle(f"schedule:{object_id}")
        record_history("schedule_parent_0_1_1_distinct_triggers", await handle.fetch_history())
    assert sorted(run["scheduled_time"] for run in fake.started) == sorted(times)
    assert sorted(fake.accepted) == sorted(times)


async def test_messages_to_a_schedule_closing_as_cancelled_are_refused_and_it_shows_closing(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    """Between a cancellation request and the close, nothing sent to the schedule would last:
    every update is refused (`ScheduleClosing`), every signal dropped and counted, and `get`
    and `describe` say it is closing. The run's own result does not claim its outcome was
    left undelivered."""
    fake = ScheduleFake()
    object_id = f"closing-{unique}"
    async with schedule_worker(client, task_queue, fake.activities()):
        handle = await client.start_workflow(
            "DurabilitySchedule", {}, id=f"schedule:{object_id}", task_queue=task_queue
        )
        await handle.execute_update(
            "set", {"expression": YEARLY, "version": 1, "params": {"gated_run": True}}
        )
        scheduled_time = await handle.execute_update("trigger", {}, result_type=int)
        await eventually(lambda: fake.started, timeout=20)
        await handle.cancel()
        await eventually(lambda: _query(handle, "describe"), timeout=20, interval=0.2)  # closing
        view = await handle.query("get")
        assert view is not None and view["closing"] is True
        for command in ("get", "describe"):  # and a person reading the CLI is told so
            shown = await durability_cli(dev_server_address, "schedule", command, object_id)
            assert re.search(r"^closing\s+yes: cancellation requested", shown.stdout, re.M), (
                command,
                shown.stdout,
            )

        async def listed_closing() -> bool:  # what `durability schedule list` shows
            memo = await (await handle.describe()).memo_value(SCHEDULE_STATE_MEMO_KEY, None)
            return bool(memo == {"state": "closing"})

        await eventually(listed_closing, timeout=20, interval=0.2)
        refusals: list[str] = []
        for name, payload in [
            ("set", {"expression": YEARLY, "version": 2}),
            ("pause", {}),
            ("trigger", {}),
            ("configure", {"max_concurrent_runs": 3}),
        ]:
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update(name, payload)
            assert isinstance(refused.value.cause, ApplicationError)
            assert refused.value.cause.type == "ScheduleClosing", refused.value.cause
            refusals.append(name)
        await handle.signal("set", {"expression": YEARLY, "version": 3})
        await eventually(lambda: _dropped(handle), timeout=20, interval=0.2)
        assert (await handle.query("get"))["version"] == 1
        fake.run_gate.set()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), timeout=30)
        child = client.get_workflow_handle(run_workflow_id(object_id, scheduled_time))
        result = await child.result()
        record_history("schedule_parent_0_1_1_closing_refuses", await handle.fetch_history())
    assert refusals == ["set", "pause", "trigger", "configure"]
    assert fake.accepted == [scheduled_time]
    assert result["outcome_pending"] is True
    assert result["delivered"] is None  # the schedule delivered it, not the run


async def _query(handle: Any, name: str) -> bool:
    described = await handle.query(name, {})
    return bool(described["closing"])


async def _dropped(handle: Any) -> bool:
    return int(await handle.query("dropped_signals")) == 1


def _delivered_count(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        exposition = response.read().decode()
    total = 0.0
    for line in exposition.splitlines():
        if line.startswith("durability_outcome_deliveries") and 'result="delivered"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_outcomes_the_schedule_delivers_are_counted_as_delivered(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    port = free_port()
    runtime = Runtime(
        telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"127.0.0.1:{port}"))
    )
    client = await Client.connect(
        dev_server_address, runtime=runtime, data_converter=client.data_converter
    )
    fake = ScheduleFake()
    async with schedule_worker(client, task_queue, fake.activities()):
        handle = await client.start_workflow(
            "DurabilitySchedule", {}, id=f"schedule:metrics-{unique}", task_queue=task_queue
        )
        await handle.execute_update("set", {"expression": YEARLY, "version": 1})
        for _ in range(2):
            await handle.execute_update("trigger", {})
        await eventually(lambda: len(fake.accepted) == 2, timeout=30)
        await eventually(lambda: _delivered_count(port) == 2, timeout=20)
        await handle.terminate()
