"""Topology: several `python worker.py` processes against one dev server share the
`durability` work, and schedules keep ticking while workers are killed one by one as long
as one remains (the `docker compose up --scale worker=3` topology, run locally)."""

from __future__ import annotations

import asyncio
import time
import uuid
from functools import partial
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import Client

from durability.client import DurabilityClient
from harness.fleet import FLEET_START_GRACE, WorkerFleet
from harness.recorder import Recorder
from tests.support.deployment import (
    OPTIONS,
    cancel_and_check_each_run_ran_once,
    set_current_version,
    two_builds,
    workflow_build_id,
)
from tests.support.helpers import eventually


async def activity_workers(client: Client, keys: list[str]) -> set[str]:
    """Identities (`pid@host`) of the workers that started the run activity of these runs.
    Temporal writes an activity's started event only when the attempt ends, which can come
    after the far side saw the run's call finish: this waits (30 s at most) until each run's
    history has it."""

    async def recorded() -> set[str] | None:
        identities: set[str] = set()
        for key in keys:
            history = await client.get_workflow_handle(f"schedule-run:{key}").fetch_history()
            started = [
                event.activity_task_started_event_attributes.identity
                for event in history.events
                if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
            ]
            if not started:
                return None
            identities.add(started[0])
        return identities

    if not keys:
        return set()
    found: set[str] = await eventually(recorded, timeout=30)
    return found


def pid_of(identity: str) -> int:
    return int(identity.split("@", 1)[0])


TIMED_OUT = EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT
TIMER_STARTED = EventType.EVENT_TYPE_TIMER_STARTED


async def run_event_kinds(client: Client, key: str) -> list[EventType.ValueType]:
    """The event types of a run's history (`schedule-run:<key>`)."""
    history = await client.get_workflow_handle(f"schedule-run:{key}").fetch_history()
    return [event.event_type for event in history.events]


@pytest.mark.slow
@pytest.mark.timeout(170)
async def test_workers_share_the_work_and_ticking_survives_all_but_one(
    client: Client, dev_server_address: str, tmp_path: Path
) -> None:
    recorder = Recorder(seed=3, slow_run_rate=0.0, outcome_fail_rate=0.0)
    recorder.start()
    queue = f"fleet-{uuid.uuid4().hex[:8]}"
    fleet = WorkerFleet(dev_server_address, queue, 3, tmp_path, {"DURABILITY_LOG_LEVEL": "INFO"})
    fleet.start()
    durability = DurabilityClient(client, queue, worker_grace=FLEET_START_GRACE)
    object_ids = [f"fleet-{uuid.uuid4().hex[:6]}-{i}" for i in range(4)]
    params = {"url": f"{recorder.base_url}/run", "outcome_url": f"{recorder.base_url}/outcome"}

    def completed_since(moment: float) -> list[str]:
        with recorder.lock:
            return [
                key
                for key, posts in recorder.runs.items()
                if any(post.finished and post.received_at > moment for post in posts)
            ]

    try:
        for object_id in object_ids:
            await durability.set_schedule(object_id, "@every 1s", 1, params=params, options=OPTIONS)
        pids = {slot.index: slot.process.pid for slot in fleet.slots if slot.process}

        async def shared() -> set[str] | None:
            served = await activity_workers(client, completed_since(0.0))
            return served if len(served) >= 2 else None

        # The three processes poll one queue: runs land on more than one of them.
        served = await eventually(shared, timeout=60, interval=1.0)
        assert {pid_of(identity) for identity in served} <= set(pids.values())

        def every_schedule_ticked_since(moment: float) -> bool:
            ticked = [key.rsplit(":", 1)[0] for key in completed_since(moment)]
            return all(ticked.count(object_id) >= 2 for object_id in object_ids)

        for victim in (0, 1):
            fleet.kill(victim)
            killed_at = time.time()
            # Every schedule goes on ticking: two fresh runs of each complete after the kill
            # (workflows cached on the dead worker move on once its sticky queue times out).
            await eventually(partial(every_schedule_ticked_since, killed_at), timeout=60)
        assert fleet.alive() == [2]
        last = time.time() + 1.0  # past anything the dead workers sent before dying
        fresh = await eventually(lambda: completed_since(last)[:6] or None, timeout=45)
        served = await activity_workers(client, fresh)
        assert {pid_of(identity) for identity in served} == {pids[2]}, (served, pids, fresh)

        for object_id in object_ids:
            assert await durability.cancel_schedule(object_id) is True

        async def acknowledged() -> bool:
            runs = await asyncio.gather(*(durability.list_runs(o) for o in object_ids))
            return not any(runs)

        await eventually(acknowledged, timeout=60, interval=0.5)
        with recorder.lock:
            assert all(len(posts) == 1 for posts in recorder.runs.values())
    finally:
        await fleet.stop()
        recorder.close()
    survivor = fleet.slots[2].process
    assert survivor is not None
    log = fleet.log_path(2).read_text()
    assert "worker stopped" in log, log[-2000:]  # SIGTERM drained and returned cleanly
    # worker.py leaves with os._exit after the drain, so the SDK's finalization abort
    # (temporalio/sdk-python#300, exit -6) can no longer turn a clean stop into a crash.
    assert survivor.returncode == 0, (survivor.returncode, log[-2000:])
    assert fleet.kills == 2 and fleet.unexpected_exits == 0


@pytest.mark.timeout(170)
async def test_rolling_upgrade_moves_running_schedules_to_the_new_build(
    client: Client, dev_server_address: str, tmp_path: Path
) -> None:
    """The upgrade path of docs/upgrading.md: build v1 serves a ticking schedule; build v2
    starts beside it and is made current; the schedule (AUTO_UPGRADE) moves to v2 on its next
    workflow task, v1 is stopped, and ticking goes on without a run lost or run twice."""
    recorder = Recorder(seed=5, slow_run_rate=0.0, outcome_fail_rate=0.0)
    recorder.start()
    queue = f"upgrade-{uuid.uuid4().hex[:8]}"
    deployment = f"durability-{uuid.uuid4().hex[:6]}"
    builds = two_builds(dev_server_address, queue, deployment, tmp_path)
    durability = DurabilityClient(client, queue, worker_grace=FLEET_START_GRACE)
    object_id = f"upgrade-{uuid.uuid4().hex[:6]}"
    params = {"url": f"{recorder.base_url}/run", "outcome_url": f"{recorder.base_url}/outcome"}

    try:
        for build, fleet in builds.items():
            fleet.directory.mkdir()
            if build == "v1":
                fleet.start()
        await eventually(
            lambda: set_current_version(dev_server_address, deployment, "v1"), timeout=60
        )
        await durability.set_schedule(object_id, "@every 1s", 1, params=params, options=OPTIONS)
        await eventually(lambda: recorder.runs_finished_since(0.0) >= 3, timeout=30)
        assert await workflow_build_id(dev_server_address, f"schedule:{object_id}") == (
            "VERSIONING_BEHAVIOR_AUTO_UPGRADE",
            "v1",
        )

        builds["v2"].start()
        await eventually(
            lambda: set_current_version(dev_server_address, deployment, "v2"), timeout=60
        )

        async def on_v2() -> bool:
            found = await workflow_build_id(dev_server_address, f"schedule:{object_id}")
            return found[1] == "v2"

        await eventually(on_v2, timeout=30, interval=0.5)
        await builds["v1"].stop()
        stopped_at = time.time()
        await eventually(lambda: recorder.runs_finished_since(stopped_at) >= 3, timeout=30)
        await cancel_and_check_each_run_ran_once(durability, object_id, recorder)
    finally:
        for fleet in builds.values():
            await fleet.stop()
        recorder.close()


@pytest.mark.timeout(120)
async def test_run_killed_mid_flight_is_interrupted_even_if_its_deadline_passes_while_dead(
    client: Client, dev_server_address: str, tmp_path: Path
) -> None:
    """A worker dies mid-run; its externally hosted run's heartbeat times out after 1 s, and
    its 3 s run timeout (the run activity's schedule-to-close timeout: such a run sets no
    timer) passes while no worker is alive. The test keeps the only worker dead until both
    have passed (it does not rely on how long a restarted worker takes to get the task).
    S10: the run is `ScheduledRunInterruptedError` all the same: the server records the one
    timeout that came first, the heartbeat's."""
    recorder = Recorder(seed=7, slow_run_rate=1.0, slow_run_s=(8.0, 8.0), outcome_fail_rate=0.0)
    recorder.start()
    queue = f"killed-{uuid.uuid4().hex[:8]}"
    fleet = WorkerFleet(dev_server_address, queue, 1, tmp_path)
    fleet.start()
    durability = DurabilityClient(client, queue, worker_grace=FLEET_START_GRACE)
    object_id = f"killed-{uuid.uuid4().hex[:6]}"
    base = recorder.base_url
    try:
        await durability.set_schedule(
            object_id,
            "@every 1s",
            1,
            params={"url": f"{base}/run", "outcome_url": f"{base}/outcome"},
            options={
                **OPTIONS,
                "run_timeout_ms": 3000,
                "run_heartbeat_timeout_ms": 1000,
                "run_host": "external",
            },
        )
        await eventually(lambda: bool(recorder.runs), timeout=30)
        await durability.cancel_schedule(object_id)
        fleet.kill(0)  # the run's POST is still in the recorder's (8 s) handler
        killed_at = time.monotonic()
        in_flight: list[str] = []  # runs whose POST reached the recorder before the kill

        async def timed_out() -> bool:
            with recorder.lock:
                in_flight[:] = list(recorder.runs)
            for key in in_flight:
                if TIMED_OUT not in await run_event_kinds(client, key):
                    return False
            return True

        await eventually(timed_out, timeout=30, interval=0.2)
        # The 3 s deadline also passes while no worker lives.
        await asyncio.sleep(max(0.0, killed_at + 3.5 - time.monotonic()))
        fleet.revive()

        async def acknowledged() -> bool:
            return not await durability.list_runs(object_id)

        await eventually(acknowledged, timeout=60, interval=0.5)
        with recorder.lock:
            cut = [key for key, posts in recorder.runs.items() if posts[0].client_gone]
        assert cut and sorted(cut) == sorted(in_flight)
        for key in cut:
            handle = client.get_workflow_handle(f"schedule-run:{key}")
            history = await handle.fetch_history()
            events = list(history.events)
            assert TIMER_STARTED not in [e.event_type for e in events]
            [timeout] = [e for e in events if e.event_type == TIMED_OUT]
            failure = timeout.activity_task_timed_out_event_attributes.failure
            assert failure.timeout_failure_info.timeout_type == TimeoutType.TIMEOUT_TYPE_HEARTBEAT
            result = await handle.result()
            assert result["outcome"]["error"]["name"] == "ScheduledRunInterruptedError", result
    finally:
        await fleet.stop()
        recorder.close()
