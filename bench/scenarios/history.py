"""`--scenario history`: history length after a simulated day, on the time-skipping server."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from datetime import timedelta

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.api.testservice.v1 import SleepRequest
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from bench import cost
from bench.activities import RECORDER
from bench.env import worker
from bench.scenarios.common import Ctx
from durability.connect import data_converter
from durability.devserver import test_server
from workflows import search_attributes


async def history_day(ctx: Ctx) -> None:
    """History length after a simulated day, on the time-skipping test server."""
    r = ctx.results
    interval = "5m" if ctx.quick else "1m"
    objects = 1
    t0 = time.monotonic()
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=test_server(), data_converter=data_converter()
    )
    try:
        await env.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace="default",
                search_attributes={
                    key.name: IndexedValueType.Value(
                        "INDEXED_VALUE_TYPE_" + key.indexed_value_type.name
                    )
                    for key in search_attributes.ALL
                },
            )
        )
        tq = f"bench-ts-{uuid.uuid4().hex[:6]}"
        async with worker(env.client, ctx.ledger_url, task_queue=tq):
            tag = f"ts-{uuid.uuid4().hex[:6]}"
            ids = [f"schedule:bench-day-{tag}-{i}" for i in range(objects)]
            for wid in ids:
                await env.client.start_workflow(
                    "DurabilitySchedule",
                    {"run_activity": "bench_run", "outcome_activity": "bench_outcome"},
                    id=wid,
                    task_queue=tq,
                    start_signal="set",
                    start_signal_args=[
                        {
                            "expression": f"@every {interval}",
                            "version": 1,
                            "params": {"bench_tag": tag},
                        }
                    ],
                )
            began = await env.get_current_time()
            day_end = began + timedelta(days=1)
            wall_deadline = time.monotonic() + (240 if ctx.quick else 600)
            while time.monotonic() < wall_deadline:  # an hour of server time per call
                left = day_end - await env.get_current_time()
                if left <= timedelta(0):
                    break
                request = SleepRequest()
                request.duration.FromTimedelta(min(left, timedelta(hours=1)))
                with contextlib.suppress(RPCError, TimeoutError):
                    await asyncio.wait_for(
                        env.client.test_service.unlock_time_skipping_with_sleep(request),
                        timeout=max(1.0, wall_deadline - time.monotonic()),
                    )
            simulated = await env.get_current_time() - began
            if simulated < timedelta(days=1):
                r.note(
                    f"history: the time-skipping server stalled after {simulated} of simulated "
                    f"time (wall deadline hit); rows below are for that span"
                )
            for wid in ids:
                runs = await cost.chain_histories(env.client, wid)
                lengths = [len(h.events) for h in runs]
                ticks = sum(
                    1
                    for h in runs
                    for e in h.events
                    if e.HasField("start_child_workflow_execution_initiated_event_attributes")
                )
                r.row(
                    "scale",
                    f"history after a simulated day, @every {interval} ({wid[-1]})",
                    f"{len(runs)} runs, max {max(lengths)} events/run, current {lengths[-1]}",
                    f"{ticks} ticks in {simulated} simulated on the time-skipping server in "
                    f"{time.monotonic() - t0:.0f} s; continue-as-new bounds each run",
                )
            r.row(
                "scale",
                "runs seen by the run activity in the simulated day",
                str(len(RECORDER.marks.get(tag, []))),
                f"{objects} object(s)",
            )
    finally:
        await env.shutdown()
