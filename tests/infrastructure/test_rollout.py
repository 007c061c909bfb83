"""The rollout walkthrough of docs/operations.md ("Rolling out a build on Kubernetes"), each
step that runs on a dev server: one build per Worker Deployment version, the old build kept
until no running workflow is left on it, and a rollout stopped halfway: a build that never
came up cannot be made current, and one that did is rolled back by making the old build
current again, with no run lost or run twice."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from durability.client import DurabilityClient
from harness.recorder import Recorder
from tests.support.deployment import (
    OPTIONS,
    cancel_and_check_each_run_ran_once,
    set_current_version,
    two_builds,
    workflow_build_id,
)
from tests.support.helpers import eventually, temporal


async def running_on(address: str, deployment: str, build_id: str, queue: str) -> int:
    """`temporal workflow count` of the running workflows a build still serves: the check
    before its workers are stopped."""
    result = await temporal(
        address,
        "workflow",
        "count",
        "--query",
        f"TemporalWorkerDeploymentVersion = '{deployment}:{build_id}' "
        f"AND ExecutionStatus = 'Running' AND TaskQueue = '{queue}'",
    )
    return int(result.stdout.split(":")[-1].strip())


@pytest.mark.timeout(200)
async def test_a_rollout_moves_workflows_and_one_stopped_halfway_rolls_back(
    client: Client, dev_server_address: str, tmp_path: Path
) -> None:
    recorder = Recorder(seed=13, slow_run_rate=0.0, outcome_fail_rate=0.0)
    recorder.start()
    queue = f"rollout-{uuid.uuid4().hex[:8]}"
    deployment = f"durability-{uuid.uuid4().hex[:6]}"
    builds = two_builds(dev_server_address, queue, deployment, tmp_path)
    durability = DurabilityClient(client, queue)
    object_id = f"rollout-{uuid.uuid4().hex[:6]}"
    workflow_id = f"schedule:{object_id}"
    params = {"url": f"{recorder.base_url}/run", "outcome_url": f"{recorder.base_url}/outcome"}

    async def none_left_on(build_id: str) -> bool:
        return await running_on(dev_server_address, deployment, build_id, queue) == 0

    async def on_build(build_id: str) -> bool:
        return (await workflow_build_id(dev_server_address, workflow_id))[1] == build_id

    try:
        for fleet in builds.values():
            fleet.directory.mkdir()
        # 1. The first build: its Deployment up, then made current.
        builds["v1"].start()
        await eventually(
            lambda: set_current_version(dev_server_address, deployment, "v1"), timeout=60
        )
        await durability.set_schedule(object_id, "@every 1s", 1, params=params, options=OPTIONS)
        await eventually(lambda: recorder.runs_finished_since(0.0) >= 2, timeout=30)
        assert await on_build("v1")

        async def some_on_v1() -> bool:
            return await running_on(dev_server_address, deployment, "v1", queue) > 0

        # The count that step 3 waits on sees the schedule on its build (so 0 means moved).
        await eventually(some_on_v1, timeout=30, interval=1.0)

        # Stopped halfway, before it polled (image pull failing, pods crash-looping): the
        # server refuses to make a build without pollers current, and nothing moves.
        assert not await set_current_version(dev_server_address, deployment, "v3")
        assert await on_build("v1")

        # 2. The new build's Deployment beside the old one, then made current: the schedule
        # moves on its next workflow task.
        builds["v2"].start()
        await eventually(
            lambda: set_current_version(dev_server_address, deployment, "v2"), timeout=60
        )
        await eventually(lambda: on_build("v2"), timeout=30, interval=0.5)
        # 3. The old build is kept until none of its workflows is left running on it.
        await eventually(lambda: none_left_on("v1"), timeout=60, interval=1.0)
        moved_at = time.time()
        await eventually(lambda: recorder.runs_finished_since(moved_at) >= 2, timeout=30)

        # Stopped halfway after the switch (the new build misbehaves): the old build's
        # workers are still up, so make it current again; the schedule moves back.
        assert await set_current_version(dev_server_address, deployment, "v1")
        await eventually(lambda: on_build("v1"), timeout=30, interval=0.5)
        await eventually(lambda: none_left_on("v2"), timeout=60, interval=1.0)
        await builds["v2"].stop()
        rolled_back_at = time.time()
        await eventually(lambda: recorder.runs_finished_since(rolled_back_at) >= 3, timeout=30)

        await cancel_and_check_each_run_ran_once(durability, object_id, recorder)
    finally:
        for fleet in builds.values():
            await fleet.stop()
        recorder.close()
