"""The benchmark's own workflows: the floors (raw timer loop, raw chain, activity throughput)
and the workflow native Temporal Schedules start. Kept minimal on purpose: each does exactly
what its floor measures and nothing more."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.workflow import ParentClosePolicy

SCHEDULED_START_TIME = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")
ACTIVITY_TIMEOUT = timedelta(seconds=60)


def _now_ms() -> int:
    return int(workflow.now().timestamp() * 1000)


def _next_second(now_ms: int) -> int:
    return (now_ms // 1000 + 1) * 1000


@workflow.defn(name="BenchTimerLoop")
class BenchTimerLoop:
    """Sleep to each next whole second until `until_ms`; return [target_ms, lateness_ms] pairs
    where lateness is workflow.now() after waking minus the target."""

    @workflow.run
    async def run(self, args: dict[str, Any]) -> list[list[int]]:
        until_ms = int(args["until_ms"])
        samples: list[list[int]] = []
        while True:
            now = _now_ms()
            target = _next_second(now)
            if target > until_ms:
                return samples
            await workflow.sleep(timedelta(milliseconds=target - now))
            samples.append([target, _now_ms() - target])


@workflow.defn(name="BenchChain")
class BenchChain:
    """What one tick must do, minimally: an aligned timer, then a child workflow that runs a
    no-op activity. The child is started without waiting for it, like a schedule's run."""

    @workflow.run
    async def run(self, args: dict[str, Any]) -> int:
        until_ms = int(args["until_ms"])
        tag = str(args["tag"])
        ticks = 0
        starts: list[asyncio.Task[Any]] = []
        while True:
            now = _now_ms()
            target = _next_second(now)
            if target > until_ms:
                break
            await workflow.sleep(timedelta(milliseconds=target - now))
            ticks += 1
            starts.append(
                asyncio.create_task(
                    workflow.start_child_workflow(
                        "BenchChainChild",
                        {"tag": tag, "key": workflow.info().workflow_id, "due_ms": target},
                        id=f"{workflow.info().workflow_id}:{target}",
                        parent_close_policy=ParentClosePolicy.ABANDON,
                    )
                )
            )
        await asyncio.gather(*starts, return_exceptions=True)
        return ticks


@workflow.defn(name="BenchChainChild")
class BenchChainChild:
    @workflow.run
    async def run(self, args: dict[str, Any]) -> None:
        await workflow.execute_activity("bench_mark", args, start_to_close_timeout=ACTIVITY_TIMEOUT)


@workflow.defn(name="BenchNativeRun")
class BenchNativeRun:
    """Started by a native Temporal Schedule: run the same no-op activity, telling it the
    `TemporalScheduledStartTime` the schedule stamped on this workflow."""

    @workflow.run
    async def run(self, args: dict[str, Any]) -> None:
        scheduled = workflow.info().typed_search_attributes.get(SCHEDULED_START_TIME)
        due_ms = int(scheduled.timestamp() * 1000) if scheduled is not None else -1
        await workflow.execute_activity(
            "bench_mark",
            {"tag": args["tag"], "key": args["key"], "due_ms": due_ms},
            start_to_close_timeout=ACTIVITY_TIMEOUT,
        )


@workflow.defn(name="BenchActivityThroughput")
class BenchActivityThroughput:
    """`count` no-op activities from one workflow with `parallel` in flight; returns elapsed
    workflow time in ms (first schedule to last completion)."""

    @workflow.run
    async def run(self, args: dict[str, Any]) -> int:
        count = int(args["count"])
        parallel = int(args["parallel"])
        started = _now_ms()

        async def lane(n: int) -> None:
            for _ in range(n):
                await workflow.execute_activity(
                    "bench_noop", start_to_close_timeout=ACTIVITY_TIMEOUT
                )

        per_lane = [count // parallel + (1 if i < count % parallel else 0) for i in range(parallel)]
        await asyncio.gather(*(lane(n) for n in per_lane if n))
        return _now_ms() - started


BENCH_WORKFLOWS: list[type] = [
    BenchTimerLoop,
    BenchChain,
    BenchChainChild,
    BenchNativeRun,
    BenchActivityThroughput,
]
