"""Compiling one operation's intent into its request body: the `compile_activity` call.

With `local_compile` it is a local activity, whose result (a marker) is recorded in the same
workflow task completion that starts the request's child (L6); otherwise a plain activity on
the activity task queue.
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
    from workflows.ledger.request import failure_message

COMPILE_TIMEOUT = timedelta(seconds=60)
COMPILE_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=3)


async def compile_intent(config: LedgerConfig, op_id: str, args: list[Any]) -> Any:
    """The compiled request of `op_id`: `compile_activity(intent, request_id)`'s result."""
    if config.local_compile:
        return await workflow.execute_local_activity(
            config.compile_activity,
            args=args,
            start_to_close_timeout=COMPILE_TIMEOUT,
            retry_policy=COMPILE_RETRY,
            summary=f"compile {op_id}",
        )
    return await workflow.execute_activity(
        config.compile_activity,
        args=args,
        task_queue=config.activity_task_queue,
        start_to_close_timeout=COMPILE_TIMEOUT,
        retry_policy=COMPILE_RETRY,
        summary=f"compile {op_id}",
    )


async def compile_operation(
    state: LedgerState, config: LedgerConfig, op_id: str, request_id: str
) -> Any | None:
    """Compile `op_id` for `request_id`; None when the compile failed, and the operation is
    blocked with the failure's message. A cancelled compile gives the dispatch up."""
    args = [state.operations[op_id].intent.model_dump(mode="json"), request_id]
    try:
        return await compile_intent(config, op_id, args)
    except FailureError as error:
        # An ActivityError; a local activity's failure arrives unwrapped (ApplicationError,
        # TimeoutError), still with the error's message.
        if is_cancelled_exception(error):
            core.abandon_dispatch(state, op_id)
            raise
        core.block_compile(state, op_id, failure_message(error))
        metrics.operations("blocked")
        return None
    except asyncio.CancelledError:
        core.abandon_dispatch(state, op_id)
        raise
