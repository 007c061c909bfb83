"""The benchmark's own dev server and in-process worker, on the product's server settings."""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.ledger import ledger_activities
from activities.schedule import schedule_activities
from bench.activities import BENCH_ACTIVITIES
from bench.workflows import BENCH_WORKFLOWS
from durability.connect import data_converter, interceptors
from durability.devserver import TIMER_SHIFT_ARGS, temporal_cli
from durability.registry import all_workflows, workflow_runner
from workflows import search_attributes


@contextlib.asynccontextmanager
async def dev_server(
    file_backed: bool, db_filename: str | None = None
) -> AsyncIterator[tuple[WorkflowEnvironment, str]]:
    """`temporal server start-dev` on 127.0.0.1 with the lowered timer shift; in memory, or
    with a database file: `db_filename`, else one in a fresh temporary directory."""
    with tempfile.TemporaryDirectory(prefix="durability-bench-") as tmp:
        db = db_filename or (str(Path(tmp) / "bench.db") if file_backed else None)
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_cli(),
            dev_server_extra_args=TIMER_SHIFT_ARGS,
            dev_server_database_filename=db,
            dev_server_log_level="error",
            search_attributes=search_attributes.ALL,
            data_converter=data_converter(),
            interceptors=interceptors(),
            ip="127.0.0.1",
        )
        try:
            yield env, ("file " + "(" + db + ")" if db else "in-memory")
        finally:
            await env.shutdown()


@contextlib.asynccontextmanager
async def worker(
    client: Client, ledger_url: str, *, task_queue: str | None = None
) -> AsyncIterator[Worker]:
    """One in-process worker: the product's workflows and built-in activities (the ledger's HTTP
    ones calling `ledger_url`) plus the bench's own."""
    queue = task_queue or f"bench-{uuid.uuid4().hex[:8]}"
    bench_activities = list(BENCH_ACTIVITIES)
    with ThreadPoolExecutor(max_workers=500) as executor:
        w = Worker(
            client,
            task_queue=queue,
            workflows=[*all_workflows(), *BENCH_WORKFLOWS],
            activities=[*schedule_activities(), *ledger_activities(ledger_url), *bench_activities],
            activity_executor=executor,
            workflow_runner=workflow_runner(),
            max_concurrent_workflow_tasks=200,
            max_concurrent_activities=500,
            max_cached_workflows=12_000,
            max_concurrent_workflow_task_polls=10,
            max_concurrent_activity_task_polls=10,
        )
        async with w:
            yield w
