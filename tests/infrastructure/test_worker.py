"""The worker as a real subprocess: it polls, drains on SIGTERM, and refuses bad settings."""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
import sys
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import PollerBehaviorAutoscaling, PollerBehaviorSimpleMaximum

import worker
from durability.run import DEMO
from tests.support.helpers import (
    PROJECT_ROOT,
    eventually,
    run_command,
    start_worker_process,
    stop_worker,
    subprocess_env,
    temporal,
    temporal_query,
)
from workflows import search_attributes


async def pollers(address: str, task_queue: str) -> list[dict[str, object]]:
    result = await temporal(
        address, "task-queue", "describe", "--task-queue", task_queue, "--output", "json"
    )
    described = json.loads(result.stdout)
    return [poller for poller in described.get("pollers", []) or []]


async def test_worker_polls_its_task_queue_and_exits_zero_on_sigterm(
    dev_server_address: str, task_queue: str
) -> None:
    process = await start_worker_process(
        dev_server_address,
        task_queue,
        DURABILITY_DRAIN_SECONDS="5",
        DURABILITY_MAX_CACHED_WORKFLOWS="0",
        DURABILITY_MAX_CONCURRENT_ACTIVITIES="7",
    )
    try:
        found = await eventually(lambda: pollers(dev_server_address, task_queue), timeout=30)
        assert found, "the worker never polled its task queue"
    finally:
        returncode, output = await stop_worker(process)
    assert returncode == 0, output
    assert "worker stopped" in output
    assert (
        "max_cached_workflows=0, max_concurrent_workflow_tasks=100, max_concurrent_activities=7, "
        "poller_autoscaling=True" in output
    )


def test_worker_tuning_defaults() -> None:
    defaults = worker.worker_tuning({})
    assert defaults == worker.WorkerTuning(
        max_cached_workflows=1000,
        max_concurrent_workflow_tasks=100,
        max_concurrent_activities=100,
        poller_autoscaling=True,
    )
    assert isinstance(defaults.poller_behavior(), PollerBehaviorAutoscaling)
    fixed = worker.worker_tuning({"DURABILITY_POLLER_AUTOSCALING": "0"})
    assert isinstance(fixed.poller_behavior(), PollerBehaviorSimpleMaximum)


async def bare_namespace(address: str, unique: str) -> str:
    """A new namespace on the session server: none of durability's search attributes."""
    namespace = f"bare-{unique}"
    await temporal(address, "operator", "namespace", "create", "--namespace", namespace)

    async def visible() -> bool:
        described = await temporal(
            address, "operator", "search-attribute", "list", "--namespace", namespace,
            check=False,
        )  # fmt: skip
        return described.returncode == 0

    await eventually(visible, timeout=30, interval=0.5)
    return namespace


async def run_worker_to_exit(address: str, namespace: str) -> tuple[int, list[str]]:
    env = subprocess_env(address, TEMPORAL_NAMESPACE=namespace)
    result = await run_command(
        [sys.executable, str(PROJECT_ROOT / "worker.py")], check=False, env=env
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stderr.strip().splitlines()


async def test_namespace_without_the_search_attributes_exits_two_naming_each_and_the_fix(
    dev_server_address: str, unique: str
) -> None:
    namespace = await bare_namespace(dev_server_address, unique)
    returncode, lines = await run_worker_to_exit(dev_server_address, namespace)
    assert returncode == 2
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"durability worker: namespace '{namespace}' search attributes: ")
    for key in search_attributes.ALL:
        kind = search_attributes.CLI_TYPE_NAMES[key.indexed_value_type.name]
        assert f"{key.name} ({kind}) is missing" in line
        assert (
            f"temporal operator search-attribute create --namespace {namespace} "
            f"--name {key.name} --type {kind}"
        ) in line

    # The printed commands are the fix: run them, and the worker starts.
    commands = line.split("register them with: ", 1)[1]
    for command in commands.split(" && "):
        argv = shlex.split(command)
        assert argv[:4] == ["temporal", "operator", "search-attribute", "create"]
        await temporal(dev_server_address, *argv[1:])
    task_queue = f"tq-{unique}"
    process = await start_worker_process(
        dev_server_address, task_queue, TEMPORAL_NAMESPACE=namespace
    )
    try:

        async def polled() -> list[dict[str, object]]:
            described = await temporal(
                dev_server_address, "task-queue", "describe", "--task-queue", task_queue,
                "--namespace", namespace, "--output", "json",
            )  # fmt: skip
            return list(json.loads(described.stdout).get("pollers", []) or [])

        assert await eventually(polled, timeout=30), "the worker never polled"
    finally:
        returncode, output = await stop_worker(process)
    assert returncode == 0, output


async def test_a_search_attribute_of_the_wrong_type_exits_two_and_the_skip_setting_starts(
    dev_server_address: str, unique: str
) -> None:
    namespace = await bare_namespace(dev_server_address, unique)
    for key in search_attributes.ALL:
        kind = search_attributes.CLI_TYPE_NAMES[key.indexed_value_type.name]
        if key is search_attributes.SCHEDULE_VERSION:
            kind = "Keyword"
        await temporal(
            dev_server_address, "operator", "search-attribute", "create", "--namespace",
            namespace, "--name", key.name, "--type", kind,
        )  # fmt: skip
    returncode, lines = await run_worker_to_exit(dev_server_address, namespace)
    assert returncode == 2 and len(lines) == 1, lines
    assert "DurabilityScheduleVersion is Keyword, needs Int" in lines[0]
    assert "DurabilityObjectId" not in lines[0]
    assert (
        f"temporal operator search-attribute remove --namespace {namespace} "
        "--name DurabilityScheduleVersion --yes && temporal operator search-attribute create "
        f"--namespace {namespace} --name DurabilityScheduleVersion --type Int"
    ) in lines[0]

    process = await start_worker_process(
        dev_server_address,
        f"tq-{unique}",
        TEMPORAL_NAMESPACE=namespace,
        DURABILITY_SKIP_SEARCH_ATTRIBUTE_CHECK="1",
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
    returncode, output = await stop_worker(process)
    assert "worker polling task queue" in line.decode() + output, output
    assert returncode == 0, output


class _Refusing:
    def __init__(self, status: RPCStatusCode) -> None:
        self.status = status

    async def list_search_attributes(self, request: Any) -> Any:
        raise RPCError("not allowed here", self.status, b"")


@pytest.mark.parametrize("status", [RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNIMPLEMENTED])
async def test_a_namespace_that_may_not_be_asked_warns_and_goes_on(
    status: RPCStatusCode, caplog: pytest.LogCaptureFixture
) -> None:
    client: Any = SimpleNamespace(namespace="hosted.acct", operator_service=_Refusing(status))
    with caplog.at_level(logging.WARNING, logger="durability.worker"):
        await worker.check_search_attributes(client)
    [record] = caplog.records
    assert "cannot list search attributes of namespace hosted.acct" in record.getMessage()
    assert status.name in record.getMessage()


async def test_workflow_started_with_temporal_cli_runs_on_the_worker_process(
    dev_server_address: str, task_queue: str, unique: str
) -> None:
    """The whole loop: worker.py subprocess, `temporal workflow start`, history via `show`."""
    process = await start_worker_process(dev_server_address, task_queue)
    workflow_id = f"schedule:e2e-{unique}"
    try:
        await temporal(
            dev_server_address,
            "workflow",
            "start",
            "--workflow-id",
            workflow_id,
            "--type",
            "DurabilitySchedule",
            "--task-queue",
            task_queue,
            "--input",
            "{}",
        )
        await temporal(
            dev_server_address,
            "workflow",
            "signal",
            "--workflow-id",
            workflow_id,
            "--name",
            "set",
            "--input",
            '{"expression": "@every 1s", "version": 1}',
        )

        async def completed_runs() -> list[dict[str, object]]:
            shown = await temporal(
                dev_server_address,
                "workflow",
                "show",
                "--workflow-id",
                workflow_id,
                "--output",
                "json",
            )
            events = json.loads(shown.stdout)["events"]
            return [
                e for e in events if e["eventType"] == "EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED"
            ]

        started = await eventually(completed_runs, timeout=30)
        assert (
            started[0]["childWorkflowExecutionStartedEventAttributes"]["workflowType"]["name"]
            == "ScheduledRun"
        )
    finally:
        await temporal(
            dev_server_address, "workflow", "terminate", "--workflow-id", workflow_id, check=False
        )
        returncode, output = await stop_worker(process)
    assert returncode == 0, output


async def test_the_demo_line_printed_by_make_run_sets_a_schedule(
    dev_server_address: str, task_queue: str, unique: str
) -> None:
    """`make run` prints a copy-paste signal-with-start line; it must really work."""
    argv = shlex.split(DEMO)
    assert argv[:3] == ["temporal", "workflow", "signal-with-start"]
    workflow_id = f"schedule:demo-{unique}"
    argv[argv.index("--workflow-id") + 1] = workflow_id
    argv[argv.index("--task-queue") + 1] = task_queue
    process = await start_worker_process(dev_server_address, task_queue)
    try:
        await temporal(dev_server_address, *argv[1:])
        result = await temporal_query(dev_server_address, workflow_id, "get")
        assert result["expression"] == "@every 10s" and result["params"] == {"plan": "pro"}
    finally:
        await temporal(
            dev_server_address, "workflow", "terminate", "--workflow-id", workflow_id, check=False
        )
        returncode, output = await stop_worker(process)
    assert returncode == 0, output
