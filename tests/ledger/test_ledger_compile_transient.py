"""A compile that fails for a transient reason (its worker lost mid-compile, so the attempt
times out; here a retryable error) is retried with backoff, past the 3 attempts that used to
block the operation (L6 blocks only a refusal; a transient failure is infrastructure, as a
submit's transport error is, L7). Found by the long chaos run (seed 35), where the operation
stayed blocked until `resume`."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    RetryState,
    TimeoutError,
    TimeoutType,
)

from activities.ledger import compile_passthrough, ledger_activities
from tests.support.helpers import eventually
from tests.support.ledger import intent, ledger_worker, operations, record_history, snapshot
from workflows.ledger.models import LedgerInput
from workflows.ledger.request import is_refusal

# More than the 3 attempts the compile had before `ledger-compile-retries-transient`.
TRANSIENT_FAILURES = 4


@pytest.mark.cacheless
@pytest.mark.parametrize("local_compile", [False, True], ids=["remote", "local"])
async def test_a_compile_failing_transiently_is_retried_not_blocked(
    client: Client, task_queue: str, unique: str, local_compile: bool
) -> None:
    attempts: Counter[str] = Counter()

    @activity.defn(name="compile")
    async def flaky_compile(intent: dict[str, Any], request_id: str) -> dict[str, Any]:
        attempts[intent["id"]] += 1
        if attempts[intent["id"]] <= TRANSIENT_FAILURES:
            raise ApplicationError("worker lost mid-compile")  # retryable
        return await compile_passthrough(intent, request_id)

    activities = [flaky_compile, *ledger_activities()[1:]]
    async with ledger_worker(client, task_queue, activities):
        handle = await client.start_workflow(
            "OperationLedger",
            LedgerInput(local_compile=local_compile),
            id=f"ledger:{unique}",
            task_queue=task_queue,
        )
        await handle.execute_update(
            "enqueue", {"operations": [intent("op", ["c1"])]}, result_type=dict
        )

        async def decided() -> dict[str, Any] | None:
            op = operations(await snapshot(handle))["op"]
            return op if op["phase"] in ("resolved", "blocked") else None

        op = await eventually(decided)
        if not local_compile:
            await handle.execute_update("stop", {})
            await record_history(client, handle.id, "compile_retries_transient")
    assert op["phase"] == "resolved", op
    assert attempts["op"] == TRANSIENT_FAILURES + 1


def _activity_error(cause: BaseException, retry_state: RetryState) -> ActivityError:
    error = ActivityError(
        "activity failed",
        scheduled_event_id=5,
        started_event_id=6,
        identity="worker",
        activity_type="compile",
        activity_id="1",
        retry_state=retry_state,
    )
    error.__cause__ = cause
    return error


def test_only_a_non_retryable_failure_is_a_refusal() -> None:
    """What blocks as a compile error (or `completion_failed`) at once, and what is transient:
    retried, and blocked only as `compile_unavailable` / `completion_unavailable` once its
    retry window is over."""
    refused = ApplicationError("canvas c1 has no layer 7", non_retryable=True)
    assert is_refusal(refused)  # a local activity's failure arrives unwrapped
    assert is_refusal(_activity_error(refused, RetryState.NON_RETRYABLE_FAILURE))
    assert is_refusal(_activity_error(ApplicationError("typed"), RetryState.NON_RETRYABLE_FAILURE))
    timed_out = TimeoutError(
        "activity timeout", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[]
    )
    assert not is_refusal(timed_out)
    assert not is_refusal(_activity_error(timed_out, RetryState.TIMEOUT))
    retryable = ApplicationError("worker lost mid-compile")
    assert not is_refusal(retryable)
    assert not is_refusal(_activity_error(retryable, RetryState.TIMEOUT))
    assert not is_refusal(_activity_error(retryable, RetryState.MAXIMUM_ATTEMPTS_REACHED))
