"""A typed client for durability's workflows, thin over `temporalio.client.Client`.

It speaks only the public wire contract (workflow types, IDs, message names and payloads of
docs/contract.md), so what it does can also be done with the `temporal` CLI or any SDK.

    client = await DurabilityClient.connect()
    await client.set_schedule("acct-42", "@every 5m", version=3, params={"plan": "pro"})
    print(await client.get_schedule("acct-42"))

`DurabilityClient` is built from one module per concern, and every name is importable from
here: what every call shares (`durability.sending`), the workflows' rules checked before
sending (`durability.checks`), the schedule's and the ledger's calls
(`durability.schedule_client`, `durability.ledger_client`), bulk operations
(`durability.bulk`) and the errors (`durability.errors`).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable, Generator
from typing import Any

from durability.bulk import (
    BULK_MESSAGES,
    BULK_POLL_S,
    BULK_SAMPLE,
    BULK_WAIT,
    MAX_BULK_QUERY_CHARS,
    MAX_BULK_REASON_CHARS,
    BulkClient,
    BulkJob,
    ScheduleMatches,
    bulk_payload,
    bulk_reason,
    schedule_query,
)
from durability.checks import (
    ledger_start_input,
    ledger_workflow_id,
    schedule_start_input,
    schedule_workflow_id,
    set_payload,
    skip_payload,
)
from durability.connect import connect_client
from durability.errors import (
    BatchBusyError,
    ClosedError,
    DurabilityError,
    InvalidQueryError,
    LedgerStopped,
    NotFoundError,
    NoWorkerError,
    RejectedError,
    UnansweredError,
    closed_error,
    summary_for,
)
from durability.ledger_client import EnqueueResult, LedgerClient, unknown_requests
from durability.listing import Listed
from durability.schedule_client import RunView, ScheduleClient, ScheduleView, preview_schedule
from durability.sending import (
    CLOSED_STATUS,
    MAX_MESSAGE_BYTES,
    MAX_START_INPUT_BYTES,
    SCHEDULE_WORKFLOW,
    UPDATE_ATTEMPTS,
    UPDATE_TIMEOUT,
    WORKER_GRACE,
    Sent,
)
from workflows.ledger import LEDGER_WORKFLOW
from workflows.validation import InvalidRequest

__all__ = [
    "BULK_MESSAGES",
    "BULK_POLL_S",
    "BULK_SAMPLE",
    "BULK_WAIT",
    "CLOSED_STATUS",
    "CLOSE_GRACE_S",
    "LEDGER_WORKFLOW",
    "MAX_BULK_QUERY_CHARS",
    "MAX_BULK_REASON_CHARS",
    "MAX_MESSAGE_BYTES",
    "MAX_START_INPUT_BYTES",
    "SCHEDULE_WORKFLOW",
    "UPDATE_ATTEMPTS",
    "UPDATE_TIMEOUT",
    "WORKER_GRACE",
    "BatchBusyError",
    "BulkJob",
    "ClosedError",
    "Connecting",
    "DurabilityClient",
    "DurabilityError",
    "EnqueueResult",
    "InvalidQueryError",
    "InvalidRequest",
    "LedgerStopped",
    "Listed",
    "NoWorkerError",
    "NotFoundError",
    "RejectedError",
    "RunView",
    "ScheduleMatches",
    "ScheduleView",
    "Sent",
    "UnansweredError",
    "bulk_payload",
    "bulk_reason",
    "closed_error",
    "ledger_start_input",
    "ledger_workflow_id",
    "preview_schedule",
    "schedule_query",
    "schedule_start_input",
    "schedule_workflow_id",
    "set_payload",
    "skip_payload",
    "summary_for",
    "unknown_requests",
]  # fmt: skip

# How long `DurabilityClient.close` lets the SDK's threads finish releasing the connection.
CLOSE_GRACE_S = 0.1


class Connecting:
    """What `DurabilityClient.connect` returns: await it for a client, or `async with` it for
    one that is closed on exit."""

    def __init__(self, connect: Callable[[], Awaitable[DurabilityClient]]) -> None:
        self._connect = connect
        self._client: DurabilityClient | None = None

    def __await__(self) -> Generator[Any, None, DurabilityClient]:
        return self._connect().__await__()

    async def __aenter__(self) -> DurabilityClient:
        self._client = await self._connect()
        return self._client

    async def __aexit__(self, *_exc: object) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()


class DurabilityClient(ScheduleClient, LedgerClient, BulkClient):
    """Schedules and ledgers by business ID: `acct-42`, not `schedule:acct-42`.

    Only `set_schedule` and `enqueue` (and their signal variants) create a workflow; every
    other call on an ID with no workflow raises NotFoundError, and on a closed one
    ClosedError. Input is checked with the workflows' own rules before it is sent.
    """

    @classmethod
    def connect(cls, task_queue_name: str | None = None, *, tracing: bool = True) -> Connecting:
        """Connect with Temporal's environment configuration and the product's converter
        (`durability.connect.connect_client`); `tracing=False` leaves OpenTelemetry's
        interceptor out. Await it for a client, or use it as an async context manager,
        which closes the client on exit (`close`):

            async with DurabilityClient.connect() as client:
                await client.set_schedule("acct-42", "@hourly", version=1)
        """

        async def connecting() -> DurabilityClient:
            return cls(await connect_client(tracing=tracing), task_queue_name)

        return Connecting(connecting)

    async def close(self) -> None:
        """Let go of the Temporal connection before the interpreter exits.

        The SDK has no way to close a client (temporalio/sdk-python#300): its Rust threads
        can still be releasing the connection while a short script's interpreter finalizes,
        which aborts the process (`Fatal Python error: PyGILState_Release`) after its work
        is done. This drops the client's reference to the connection, collects it and gives
        those threads a moment, while the interpreter still runs: it makes that abort rare,
        not impossible (docs/python-api.md has the figures). The client is unusable
        afterwards; a `Client` the caller passed in and still holds stays open.
        """
        self.__dict__.pop("temporal", None)
        gc.collect()
        await asyncio.sleep(CLOSE_GRACE_S)
