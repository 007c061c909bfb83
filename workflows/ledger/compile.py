"""Compiling one operation's intent into its request body: the `compile_activity` call.

With `local_compile` it is a local activity, whose result (a marker) is recorded in the same
workflow task completion that starts the request's child (L6); otherwise a plain activity on
the activity task queue.

A transient failure (a timeout, a lost worker, a retryable error) is retried with backoff for
`TRANSIENT_RETRY_WINDOW` while the operation keeps its canvases; a refusal (a non-retryable
error) blocks the operation at once with its message (L6). A compile still failing
transiently at the window's end blocks as `compile_unavailable: <cause>`; `resume` compiles
it again.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import FailureError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from workflows import metrics
    from workflows.ledger import core
    from workflows.ledger.models import LedgerConfig, LedgerState
    from workflows.ledger.request import (
        TRANSIENT_RETRY,
        TRANSIENT_RETRY_WINDOW,
        failure_message,
        is_refusal,
    )

COMPILE_TIMEOUT = timedelta(seconds=60)
# The retry policy of a compile recorded before `COMPILE_RETRY_PATCH`: 3 attempts, any failure.
COMPILE_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=3)
# Asked before each compile: a run recorded with at most 3 attempts per compile replays so; a
# new one retries transient failures (`TRANSIENT_RETRY` for `TRANSIENT_RETRY_WINDOW`).
COMPILE_RETRY_PATCH = "ledger-compile-retries-transient"


async def compile_intent(
    config: LedgerConfig, op_id: str, args: list[Any], transient_retry: bool
) -> Any:
    """The compiled request of `op_id`: `compile_activity(intent, request_id)`'s result."""
    retry_policy = TRANSIENT_RETRY if transient_retry else COMPILE_RETRY
    window = TRANSIENT_RETRY_WINDOW if transient_retry else None
    if config.local_compile:
        return await workflow.execute_local_activity(
            config.compile_activity,
            args=args,
            start_to_close_timeout=COMPILE_TIMEOUT,
            schedule_to_close_timeout=window,
            retry_policy=retry_policy,
            summary=f"compile {op_id}",
        )
    return await workflow.execute_activity(
        config.compile_activity,
        args=args,
        task_queue=config.activity_task_queue,
        start_to_close_timeout=COMPILE_TIMEOUT,
        schedule_to_close_timeout=window,
        retry_policy=retry_policy,
        summary=f"compile {op_id}",
    )


async def compile_operation(
    state: LedgerState, config: LedgerConfig, op_id: str, request_id: str
) -> Any | None:
    """Compile `op_id` for `request_id`; None when the compile failed, and the operation is
    blocked with the failure's message (`core.compile_blocker`). A cancelled compile gives
    the dispatch up."""
    args = [state.operations[op_id].intent.model_dump(mode="json"), request_id]
    transient_retry = workflow.patched(COMPILE_RETRY_PATCH)
    try:
        return await compile_intent(config, op_id, args, transient_retry)
    except FailureError as error:
        # An ActivityError; a local activity's failure arrives unwrapped (ApplicationError,
        # TimeoutError), still with the error's message.
        if is_cancelled_exception(error):
            core.abandon_dispatch(state, op_id)
            raise
        transient = transient_retry and not is_refusal(error)
        blocker = core.compile_blocker(failure_message(error), transient=transient)
        core.block_compile(state, op_id, blocker)
        metrics.operations("blocked")
        return None
    except asyncio.CancelledError:
        core.abandon_dispatch(state, op_id)
        raise
