"""The worker as a real subprocess: it polls, drains on SIGTERM, and refuses bad settings."""

from __future__ import annotations

import asyncio
import json
import shlex
import signal
import sys

import pytest

from durability.run import DEMO
from tests.helpers import PROJECT_ROOT, eventually, run_command, subprocess_env, temporal


async def start_worker_process(
    address: str, task_queue: str, **extra: str
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(PROJECT_ROOT / "worker.py"),
        env=subprocess_env(address, DURABILITY_TASK_QUEUE=task_queue, **extra),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )


async def pollers(address: str, task_queue: str) -> list[dict[str, object]]:
    result = await temporal(
        address, "task-queue", "describe", "--task-queue", task_queue, "--output", "json"
    )
    described = json.loads(result.stdout)
    return [poller for poller in described.get("pollers", []) or []]


async def stop_worker(process: asyncio.subprocess.Process) -> tuple[int, str]:
    process.send_signal(signal.SIGTERM)
    stdout, _ = await asyncio.wait_for(process.communicate(), timeout=30)
    return process.returncode or 0, stdout.decode()


async def test_worker_polls_its_task_queue_and_exits_zero_on_sigterm(
    dev_server_address: str, task_queue: str
) -> None:
    process = await start_worker_process(
        dev_server_address, task_queue, DURABILITY_DRAIN_SECONDS="5"
    )
    try:
        found = await eventually(lambda: pollers(dev_server_address, task_queue), timeout=30)
        assert found, "the worker never polled its task queue"
    finally:
        returncode, output = await stop_worker(process)
    assert returncode == 0, output
    assert "worker stopped" in output


@pytest.mark.parametrize(
    ("setting", "value", "expected"),
    [
        (
            "TEMPORAL_ADDRESS",
            "not-an-address",
            "TEMPORAL_ADDRESS must be host:port, got 'not-an-address'",
        ),
        ("TEMPORAL_ADDRESS", "127.0.0.1:1", "cannot connect to Temporal at '127.0.0.1:1'"),
        (
            "DURABILITY_DRAIN_SECONDS",
            "soon",
            "DURABILITY_DRAIN_SECONDS must be an integer, got 'soon'",
        ),
        ("DURABILITY_TASK_QUEUE", " ", "DURABILITY_TASK_QUEUE must not be empty"),
    ],
)
async def test_bad_setting_exits_nonzero_with_one_clear_line(
    dev_server_address: str, setting: str, value: str, expected: str
) -> None:
    env = subprocess_env(dev_server_address, **{setting: value})
    result = await run_command(
        [sys.executable, str(PROJECT_ROOT / "worker.py")], check=False, env=env
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert "Traceback" not in result.stderr


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
        queried = await temporal(
            dev_server_address, "workflow", "query", "--workflow-id", workflow_id, "--name", "get",
            "--output", "json",
        )  # fmt: skip
        result = json.loads(queried.stdout)["queryResult"][0]
        assert result["expression"] == "@every 10s" and result["params"] == {"plan": "pro"}
    finally:
        await temporal(
            dev_server_address, "workflow", "terminate", "--workflow-id", workflow_id, check=False
        )
        returncode, output = await stop_worker(process)
    assert returncode == 0, output
