"""Set-up the fleet, rollout and drain tests share: worker deployment versions, and the
manifests' drain bound."""

from __future__ import annotations

import json
from pathlib import Path

from durability.client import DurabilityClient
from harness.fleet import WorkerFleet
from harness.recorder import Recorder
from tests.support.helpers import eventually, temporal

OPTIONS = {
    "run_activity": "run_webhook",
    "outcome_activity": "on_outcome_webhook",
    "run_heartbeat_timeout_ms": 2000,
    "outcome_timeout_ms": 5000,
}


async def set_current_version(address: str, deployment: str, build_id: str) -> bool:
    """`temporal worker deployment set-current-version` (fails until that build has polled)."""
    result = await temporal(
        address,
        "worker",
        "deployment",
        "set-current-version",
        "--deployment-name",
        deployment,
        "--build-id",
        build_id,
        "--yes",
        check=False,
    )
    return result.returncode == 0


async def workflow_build_id(address: str, workflow_id: str) -> tuple[str | None, str | None]:
    """(versioning behavior, build ID) of a workflow, as `temporal workflow describe` shows."""
    result = await temporal(
        address, "workflow", "describe", "--workflow-id", workflow_id, "--output", "json"
    )
    info = json.loads(result.stdout).get("workflowExecutionInfo", {}).get("versioningInfo") or {}
    version = info.get("deploymentVersion") or {}
    return info.get("behavior"), version.get("buildId")


# What the worker needs after its drain to leave (workflow tasks in hand, the goodbye to the
# server, flushing traces), as tests/infrastructure/test_drain.py measures it, with room to spare.
EXIT_AFTER_DRAIN_SECONDS = 10


async def cancel_and_check_each_run_ran_once(
    durability: DurabilityClient, object_id: str, recorder: Recorder
) -> None:
    """Cancel the schedule, wait until every run is acknowledged, then check that each run
    reached the far side once and had its outcome delivered."""
    assert await durability.cancel_schedule(object_id) is True

    async def acknowledged() -> bool:
        return not await durability.list_runs(object_id)

    await eventually(acknowledged, timeout=30, interval=0.5)
    with recorder.lock:
        assert all(len(posts) == 1 for posts in recorder.runs.values())
        assert all(recorder.outcomes[key] for key in recorder.runs)


def two_builds(address: str, queue: str, deployment: str, data: Path) -> dict[str, WorkerFleet]:
    """One worker process each for builds `v1` and `v2` of `deployment` on `queue`, not yet
    started."""
    return {
        build: WorkerFleet(
            address,
            queue,
            1,
            data / build,
            {"DURABILITY_DEPLOYMENT_NAME": deployment, "DURABILITY_BUILD_ID": build},
        )
        for build in ("v1", "v2")
    }
