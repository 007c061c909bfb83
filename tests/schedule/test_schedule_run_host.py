"""Who hosts a run (`run_host`, S9, S10): runs hosted by a worker with `DurabilityPlugin`
(the default on durability's own task queue) and runs hosted elsewhere, on the real dev
server, with real workers (worker processes where one is killed)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import (
    Client,
    WorkflowHandle,
)
from temporalio.worker import Worker

from durability.client import DurabilityClient
from durability.connect import data_converter
from durability.plugin import DurabilityPlugin
from harness.fleet import WorkerFleet
from harness.recorder import Recorder
from tests.support.fakes import ScheduleFake
from tests.support.helpers import cache_options, eventually, record_history, schedule_worker
from tests.support.schedule import (
    no_runs_left,
    patch_ids,
    set_schedule,
    start_schedule,
)
from workflows.schedule.models import PLUGIN_RUN_STOP_ALLOWANCE_MS

YEARLY = "@yearly"  # a live schedule that does not tick during a test: runs come by trigger
SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
TIMED_OUT = EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT
TIMER_STARTED = EventType.EVENT_TYPE_TIMER_STARTED
TIMER_FIRED = EventType.EVENT_TYPE_TIMER_FIRED
MARKER = EventType.EVENT_TYPE_MARKER_RECORDED


async def run_events(client: Client, object_id: str, scheduled_time: int) -> list[HistoryEvent]:
    handle = client.get_workflow_handle(f"schedule-run:{object_id}:{scheduled_time}")
    return [event async for event in handle.fetch_history_events()]


def run_activity_scheduled(events: list[HistoryEvent], name: str = "run") -> Any:
    """The attributes of the run activity's ActivityTaskScheduled event."""
    return next(
        e.activity_task_scheduled_event_attributes
        for e in events
        if e.event_type == SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == name
    )


@asynccontextmanager
async def plugin_worker(
    address: str, task_queue: str, activities: list[Any], **options: Any
) -> AsyncIterator[Worker]:
    """A worker as the plugin's docs show it: a client connected with `DurabilityPlugin`, and
    a plain Worker from it with the user's own activities (the plugin adds the rest)."""
    client = await Client.connect(address, plugins=[DurabilityPlugin()])
    async with Worker(
        client, task_queue=task_queue, activities=activities, **{**cache_options(), **options}
    ) as worker:
        yield worker


@pytest.mark.slow
@pytest.mark.timeout(150)
# Not `cacheless`: its worker is a `python -m worker` process, which the suite's cache setting
# does not reach; the cacheless pass would run it unchanged.
async def test_a_plugin_hosted_run_whose_worker_is_killed_is_interrupted_by_default_and_not_rerun(
    client: Client, dev_server_address: str, tmp_path: Path
) -> None:
    """S10 by default: no `run_heartbeat_timeout_ms` set, the run's worker process (the
    product's `python -m worker`) is SIGKILLed mid-run; the run ends interrupted at the
    default heartbeat timeout (30 s after its start: the plugin had not heartbeated yet),
    never by a run timer (there is none), and it is not run again."""
    recorder = Recorder(seed=3, slow_run_rate=1.0, slow_run_s=(60.0, 60.0), outcome_fail_rate=0.0)
    recorder.start()
    queue = f"plugin-kill-{uuid.uuid4().hex[:8]}"
    fleet = WorkerFleet(dev_server_address, queue, 1, tmp_path)
    fleet.start()
    durability = DurabilityClient(client, queue)
    object_id = f"plugin-kill-{uuid.uuid4().hex[:6]}"
    base = recorder.base_url
    try:
        await durability.set_schedule(
            object_id,
            YEARLY,
            1,
            params={"url": f"{base}/run", "outcome_url": f"{base}/outcome"},
            options={
                "run_activity": "run_webhook",
                "outcome_activity": "on_outcome_webhook",
                "run_timeout_ms": 600_000,
            },
        )
        scheduled_time = await durability.trigger_schedule(object_id)
        await eventually(lambda: bool(recorder.runs), timeout=60)
        fleet.kill(0)  # the run's POST is in the recorder's (60 s) handler
        killed_at = time.time()
        fleet.revive()  # a live worker: the schedule and the run's workflow go on

        async def acknowledged() -> bool:
            return not await durability.list_runs(object_id)

        await eventually(acknowledged, timeout=80, interval=0.5)
        events = await run_events(client, object_id, scheduled_time)
        kinds = [event.event_type for event in events]
        assert TIMED_OUT in kinds and TIMER_STARTED not in kinds
        timed_out = next(e for e in events if e.event_type == TIMED_OUT)
        failure = timed_out.activity_task_timed_out_event_attributes.failure
        assert failure.timeout_failure_info.timeout_type == TimeoutType.TIMEOUT_TYPE_HEARTBEAT
        noticed = timed_out.event_time.ToDatetime().timestamp() - killed_at
        assert noticed < 32, f"interrupted {noticed:.1f} s after the kill (heartbeat timeout 30 s)"
        scheduled = run_activity_scheduled(events, "run_webhook")
        assert scheduled.heartbeat_timeout.ToTimedelta() == timedelta(seconds=30)
        result = await client.get_workflow_handle(
            f"schedule-run:{object_id}:{scheduled_time}"
        ).result()
        assert result["outcome"]["error"]["name"] == "ScheduledRunInterruptedError", result
        key = f"{object_id}:{scheduled_time}"
        with recorder.lock:
            assert len(recorder.runs[key]) == 1, "an interrupted run is never re-run"
            outcomes = [o.body["outcome"] for o in recorder.outcomes[key]]
        assert outcomes and outcomes[-1]["error"]["name"] == "ScheduledRunInterruptedError"
    finally:
        await fleet.stop()
        recorder.close()


class SwallowingRun:
    """A `run` that, the first time, ignores its cancellation for `swallow_s` and then
    returns normally; later runs return at once."""

    def __init__(self, swallow_s: float) -> None:
        self.swallow_s = swallow_s
        self.calls: list[tuple[int, float]] = []  # (scheduled_time, started at)
        self.cancelled_at: float | None = None
        self.stopped_at: float | None = None

    @activity.defn(name="run")
    async def run(self, run: dict[str, Any]) -> None:
        self.calls.append((run["scheduled_time"], time.monotonic()))
        if len(self.calls) > 1:
            return
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled_at = time.monotonic()
            await asyncio.sleep(self.swallow_s)  # winding down, not stopping
        finally:
            self.stopped_at = time.monotonic()


async def start_plugin_schedule(
    durability: DurabilityClient, object_id: str, **options: Any
) -> WorkflowHandle[Any, Any]:
    await durability.set_schedule(object_id, YEARLY, 1, options=options)
    return durability.temporal.get_workflow_handle(f"schedule:{object_id}")


@pytest.mark.cacheless
async def test_a_plugin_hosted_run_past_its_deadline_keeps_its_slot_until_it_really_stops(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    """S9 on the plugin: at `run_timeout_ms` the worker cancels the handler; the handler
    swallows that for 3 s and returns normally. Meanwhile `runs` shows the run `running` and
    the queued run does not start; once the handler stopped the run ends
    `ScheduledRunTimeoutError`, and only then does the queued run start. The run's child has
    no timer."""
    handler = SwallowingRun(swallow_s=3.0)
    durability = DurabilityClient(client, task_queue)
    async with plugin_worker(dev_server_address, task_queue, [handler.run]):
        await start_plugin_schedule(durability, unique, max_concurrent_runs=1, run_timeout_ms=1500)
        first = await durability.trigger_schedule(unique)
        second = await durability.trigger_schedule(unique)
        await eventually(lambda: handler.cancelled_at is not None, timeout=20)
        started_at = handler.calls[0][1]
        assert handler.cancelled_at is not None
        assert 1.4 <= handler.cancelled_at - started_at < 3.0  # at the worker's deadline
        # The handler is winding down: its run holds the slot.
        while handler.stopped_at is None:
            states = {r["scheduled_time"]: r["state"] for r in await durability.list_runs(unique)}
            if handler.stopped_at is None:
                assert states == {first: "running", second: "queued"}, states
            await asyncio.sleep(0.3)
        await eventually(lambda: len(handler.calls) == 2, timeout=20)
        assert handler.calls[1][0] == second and handler.calls[1][1] >= handler.stopped_at

        async def acknowledged() -> bool:
            return not await durability.list_runs(unique)

        await eventually(acknowledged, timeout=30)
    result = await client.get_workflow_handle(f"schedule-run:{unique}:{first}").result()
    assert result["outcome"]["error"]["name"] == "ScheduledRunTimeoutError", result
    assert "run_timeout_ms=1500" in result["outcome"]["error"]["message"]
    run_handle = client.get_workflow_handle(f"schedule-run:{unique}:{first}")
    record_history(
        "schedule_run_0_1_1_plugin_timeout_paths_from_input", await run_handle.fetch_history()
    )
    events = await run_events(client, unique, first)
    assert TIMER_STARTED not in [e.event_type for e in events]
    # Its schedule set `run_paths`: the run took the paths without the patch's two events.
    assert patch_ids(events) == []
    scheduled = run_activity_scheduled(events)
    assert scheduled.activity_id == "run:timeout_ms=1500"
    assert scheduled.heartbeat_timeout.ToTimedelta() == timedelta(seconds=30)
    assert scheduled.start_to_close_timeout.ToTimedelta() == timedelta(
        milliseconds=1500 + PLUGIN_RUN_STOP_ALLOWANCE_MS
    )


def _busy_sync_run(duration_s: float, done: list[float]) -> Any:
    @activity.defn(name="run")
    def run(run: dict[str, Any]) -> None:
        time.sleep(duration_s)  # never looks at cancellation
        done.append(time.monotonic())

    return run


@pytest.mark.cacheless
async def test_a_handler_that_returns_normally_after_its_deadline_ends_as_timeout(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    """A threaded handler cannot be interrupted: it returns normally 2.5 s into a 1 s run
    timeout. The run still ends `ScheduledRunTimeoutError`, once the handler returned."""
    done: list[float] = []
    durability = DurabilityClient(client, task_queue)
    with concurrent.futures.ThreadPoolExecutor(2) as executor:
        async with plugin_worker(
            dev_server_address, task_queue, [_busy_sync_run(2.5, done)], activity_executor=executor
        ):
            await start_plugin_schedule(durability, unique, run_timeout_ms=1000)
            first = await durability.trigger_schedule(unique)
            handle = client.get_workflow_handle(f"schedule-run:{unique}:{first}")
            await eventually(lambda: done, timeout=20)
            result = await asyncio.wait_for(handle.result(), 20)
    assert result["outcome"]["error"]["name"] == "ScheduledRunTimeoutError", result
    events = await run_events(client, unique, first)
    ended = next(e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED)
    started = next(e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
    held = ended.event_time.ToDatetime() - started.event_time.ToDatetime()
    assert held >= timedelta(seconds=2.4), "the run held its slot until the handler returned"


class HeartbeatingRun:
    """A `run` that heartbeats every 100 ms for `sleep_s`, noting when it sees cancellation."""

    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s
        self.cancelled: list[float] = []
        self.started: list[float] = []

    @activity.defn(name="run")
    async def run(self, run: dict[str, Any]) -> None:
        self.started.append(time.monotonic())
        try:
            deadline = time.monotonic() + self.sleep_s
            while time.monotonic() < deadline:
                activity.heartbeat()
                await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            self.cancelled.append(time.monotonic())
            raise

    @activity.defn(name="on_outcome")
    async def on_outcome(self, run: dict[str, Any], outcome: dict[str, Any]) -> None:
        pass


@pytest.mark.cacheless
async def test_an_external_run_is_timed_out_by_the_server_and_holds_its_slot_to_stop(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    """`activity_task_queue` set, so `run_host` is `external`: the run activity runs on a raw
    temporalio Worker (no plugin, no interceptors). The child sets no run timer: the server
    times the activity out at `run_timeout_ms` (its schedule-to-close timeout), the handler
    learns it through its heartbeats and is cancelled, and the run holds its slot for the
    30 s stop allowance before it ends `ScheduledRunTimeoutError` (S9)."""
    handler = HeartbeatingRun(sleep_s=30)
    activity_queue = f"{task_queue}-external"
    raw = await Client.connect(dev_server_address, data_converter=data_converter())
    durability = DurabilityClient(client, task_queue)
    async with (
        schedule_worker(client, task_queue),
        Worker(raw, task_queue=activity_queue, activities=[handler.run, handler.on_outcome]),
    ):
        await start_plugin_schedule(
            durability,
            unique,
            activity_task_queue=activity_queue,
            run_timeout_ms=1500,
            run_heartbeat_timeout_ms=1000,
        )
        first = await durability.trigger_schedule(unique)
        handle = client.get_workflow_handle(f"schedule-run:{unique}:{first}")
        # `trigger` records the run; its child starts in a later task of the schedule.
        await eventually(lambda: run_started(client, handle.id), timeout=20)
        await eventually(lambda: bool(handler.cancelled), timeout=20)
        # The server ended the activity; the run still holds its slot while it may stop.
        assert [r["state"] for r in await durability.list_runs(unique)] == ["running"]
        result = await asyncio.wait_for(handle.result(), 60)
        schedule = client.get_workflow_handle(f"schedule:{unique}")
        record_history("schedule_parent_0_1_1_run_paths_from_input", await schedule.fetch_history())
        record_history("schedule_run_0_1_1_external_server_timeout", await handle.fetch_history())
    assert result["outcome"]["error"]["name"] == "ScheduledRunTimeoutError", result
    assert "run_timeout_ms=1500" in result["outcome"]["error"]["message"]
    assert handler.cancelled and 1.3 <= handler.cancelled[0] - handler.started[0] < 3.5
    events = await run_events(client, unique, first)
    assert patch_ids(events) == []
    timed_out = next(e for e in events if e.event_type == TIMED_OUT)
    failure = timed_out.activity_task_timed_out_event_attributes.failure
    assert failure.timeout_failure_info.timeout_type == TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE
    # The only timer is the stop allowance, set once the server timed the run out.
    [timer] = [e for e in events if e.event_type == TIMER_STARTED]
    assert timer.event_id > timed_out.event_id
    assert timer.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta() == (
        timedelta(seconds=30)
    )
    scheduled = run_activity_scheduled(events)
    assert not scheduled.activity_id.startswith("run:timeout_ms=")
    assert scheduled.schedule_to_close_timeout.ToTimedelta() == timedelta(seconds=1.5)
    assert scheduled.heartbeat_timeout.ToTimedelta() == timedelta(seconds=1)


async def run_started(client: Client, workflow_id: str) -> bool:
    """Whether the run's `ScheduledRun` child exists yet (visibility)."""
    return (await client.count_workflows(f"WorkflowId = '{workflow_id}'")).count > 0


class QuietRun:
    """A `run` that takes `sleep_s` and never heartbeats itself."""

    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s
        self.running = asyncio.Event()

    @activity.defn(name="run")
    async def run(self, run: dict[str, Any]) -> None:
        self.running.set()
        await asyncio.sleep(self.sleep_s)


async def last_heartbeat_seen(client: Client, workflow_id: str, after_s: float) -> bool:
    """Whether the server recorded a heartbeat of the workflow's one pending activity by
    `after_s` into it (describe: `last_heartbeat_time`)."""
    await asyncio.sleep(after_s)
    description = await client.get_workflow_handle(workflow_id).describe()
    [pending] = description.raw_description.pending_activities
    return pending.HasField("last_heartbeat_time")


@pytest.mark.cacheless
@pytest.mark.parametrize(("heartbeat_ms", "recorded"), [(None, False), (2000, True)])
async def test_a_plugin_hosted_run_shorter_than_the_heartbeat_interval_records_no_heartbeat(
    client: Client,
    dev_server_address: str,
    task_queue: str,
    unique: str,
    heartbeat_ms: int | None,
    recorded: bool,
) -> None:
    """Cost: the plugin adds no heartbeat to a run shorter than its heartbeat interval (half
    the heartbeat timeout, 15 s by default): 3.5 s into a quiet 5 s run the server has none.
    With a 2 s heartbeat timeout (interval 1 s) the same run has one by then, so the check
    sees heartbeats when there are some."""
    handler = QuietRun(sleep_s=5)
    durability = DurabilityClient(client, task_queue)
    options: dict[str, Any] = {"run_timeout_ms": 60_000}
    if heartbeat_ms is not None:
        options["run_heartbeat_timeout_ms"] = heartbeat_ms
    async with plugin_worker(dev_server_address, task_queue, [handler.run]):
        await start_plugin_schedule(durability, unique, **options)
        first = await durability.trigger_schedule(unique)
        await asyncio.wait_for(handler.running.wait(), 20)
        run_id = f"schedule-run:{unique}:{first}"
        assert await last_heartbeat_seen(client, run_id, 3.5) is recorded
        result = await asyncio.wait_for(client.get_workflow_handle(run_id).result(), 20)
    assert result["outcome"]["status"] == "complete", result
    if heartbeat_ms is None:
        history = await client.get_workflow_handle(run_id).fetch_history()
        record_history("schedule_run_0_1_1_plugin_complete_paths_from_input", history)
        assert patch_ids(history.events) == []


@pytest.mark.cacheless
async def test_activity_task_queue_sends_every_activity_of_a_schedule_to_that_queue(
    client: Client, task_queue: str, unique: str
) -> None:
    """The workflows' worker has no activities; a second worker serves only the activity
    queue named in the start input (e.g. activities written in another SDK)."""
    recorder = ScheduleFake()
    activity_queue = f"{task_queue}-activities"
    async with (
        schedule_worker(client, task_queue),
        Worker(client, task_queue=activity_queue, activities=recorder.activities()),
    ):
        handle = await start_schedule(
            client,
            task_queue,
            unique,
            lifecycle_activity="lifecycle",
            activity_task_queue=activity_queue,
        )
        await set_schedule(handle, expression=YEARLY, version=1)
        scheduled_time = await handle.execute_update("trigger", {}, result_type=int)
        await eventually(no_runs_left(handle), timeout=20)
        key = f"{unique}:{scheduled_time}"
        await eventually(
            lambda: (
                {"due", "started", "settled"}
                <= {e["type"] for e in recorder.events if e["id"] == key}
            ),
            timeout=10,
        )
        await handle.terminate("test done")
    assert [r["scheduled_time"] for r in recorder.started] == [scheduled_time]
    assert recorder.accepted == [scheduled_time]
    queues = set()
    for workflow_id in (handle.id, f"schedule-run:{key}"):
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        queues |= {
            e.activity_task_scheduled_event_attributes.task_queue.name
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        }
    assert queues == {activity_queue}
    # Its run completed: no run timer (the server keeps the timeout), no patch marker.
    run_history = await client.get_workflow_handle(f"schedule-run:{key}").fetch_history()
    kinds = [e.event_type for e in run_history.events]
    assert TIMER_STARTED not in kinds and MARKER not in kinds, kinds
    scheduled = run_activity_scheduled(list(run_history.events))
    assert scheduled.schedule_to_close_timeout.ToTimedelta() == timedelta(minutes=15)
