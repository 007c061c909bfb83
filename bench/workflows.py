"""The benchmark's own workflows: the floors (raw timer loop, raw chain, activity throughput)
and the workflow native Temporal Schedules start. Kept minimal on purpose: each does exactly
what its floor measures and nothing more. They run outside the SDK's sandbox like the
product's workflows (`workflows.SANDBOXED`): a sandboxed workflow re-imports its module for
every new instance, which would slow the baselines and not durability."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.workflow import ParentClosePolicy

from workflows import SANDBOXED

SCHEDULED_START_TIME = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")
ACTIVITY_TIMEOUT = timedelta(seconds=60)


def _now_ms() -> int:
    return int(workflow.now().timestamp() * 1000)


def _next_second(now_ms: int) -> int:
    return (now_ms // 1000 + 1) * 1000


@workflow.defn(name="BenchTimerLoop", sandboxed=SANDBOXED)
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


@workflow.defn(name="BenchChain", sandboxed=SANDBOXED)
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


@workflow.defn(name="BenchChainChild", sandboxed=SANDBOXED)
class BenchChainChild:
    @workflow.run
    async def run(self, args: dict[str, Any]) -> None:
        await workflow.execute_activity("bench_mark", args, start_to_close_timeout=ACTIVITY_TIMEOUT)


@workflow.defn(name="BenchAwaitedChain", sandboxed=SANDBOXED)
class BenchAwaitedChain:
    """A raw tick of the schedule's shape for replay comparison (`python -m bench.coldtick`):
    timer -> child workflow -> no-op activity, awaiting each child before the next timer, so
    a tick is 3 workflow tasks and 14 events (the schedule's 15 less its memo upsert).
    `ticks` ticks, `period_ms` timers (short: replay cost does not depend on the wall time
    between events); returns the tick count."""

    @workflow.run
    async def run(self, args: dict[str, Any]) -> int:
        ticks = int(args["ticks"])
        period = timedelta(milliseconds=int(args.get("period_ms", 50)))
        workflow_id = workflow.info().workflow_id
        for tick in range(ticks):
            await workflow.sleep(period)
            await workflow.execute_child_workflow(
                "BenchAwaitedChild",
                {"tick": tick},
                id=f"{workflow_id}:{tick}",
                parent_close_policy=ParentClosePolicy.ABANDON,
            )
        return ticks


@workflow.defn(name="BenchAwaitedChild", sandboxed=SANDBOXED)
class BenchAwaitedChild:
    @workflow.run
    async def run(self, args: dict[str, Any]) -> None:
        await workflow.execute_activity("bench_noop", start_to_close_timeout=ACTIVITY_TIMEOUT)


@workflow.defn(name="BenchNativeRun", sandboxed=SANDBOXED)
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


@workflow.defn(name="BenchActivityThroughput", sandboxed=SANDBOXED)
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


@workflow.defn(name="BenchRawLedger", sandboxed=SANDBOXED)
class BenchRawLedger:
    """The ledger's graph done the plainest way, as a fair baseline: one workflow calls the
    submit activity for each operation directly (no child workflows, no frozen bodies, no
    compile), under the same rules: an operation starts once its dependencies are done and
    none of its canvases is held, in sequence order, with at most `concurrency` in flight and
    `lanes` per operation type. Returns the elapsed workflow time in ms."""

    @workflow.run
    async def run(self, args: dict[str, Any]) -> int:
        operations: list[dict[str, Any]] = args["operations"]
        concurrency = int(args["concurrency"])
        lanes: dict[str, int] = dict(args.get("lanes") or {})
        submit = str(args["submit_activity"])
        done: set[str] = set()
        held: set[str] = set()
        in_flight: dict[str, int] = {}
        waiting = list(operations)
        started = _now_ms()

        async def one(op: dict[str, Any]) -> None:
            await workflow.execute_activity(
                submit,
                {"id": op["id"], "idempotency_key": op["id"], "payload": op.get("payload")},
                start_to_close_timeout=ACTIVITY_TIMEOUT,
            )
            done.add(op["id"])
            held.difference_update(op["participants"])
            in_flight[op["operation_type"]] -= 1

        def ready(op: dict[str, Any]) -> bool:
            kind = op["operation_type"]
            return (
                all(d in done for d in op["dependencies"])
                and not held.intersection(op["participants"])
                and in_flight.get(kind, 0) < lanes.get(kind, concurrency)
            )

        tasks: set[asyncio.Task[None]] = set()
        while waiting or tasks:
            for op in list(waiting):
                if len(tasks) >= concurrency:
                    break
                if ready(op):
                    waiting.remove(op)
                    held.update(op["participants"])
                    in_flight[op["operation_type"]] = in_flight.get(op["operation_type"], 0) + 1
                    task = asyncio.create_task(one(op))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
            count = len(done)
            await workflow.wait_condition(lambda: len(done) != count)  # noqa: B023
        return _now_ms() - started


@workflow.defn(name="BenchHopChild", sandboxed=SANDBOXED)
class BenchHopChild:
    """One hop of the ledger's shape: a child workflow that calls the submit activity once."""

    @workflow.run
    async def run(self, args: dict[str, Any]) -> None:
        await workflow.execute_activity(
            str(args["submit_activity"]),
            {"id": args["id"], "idempotency_key": args["id"], "payload": None},
            start_to_close_timeout=ACTIVITY_TIMEOUT,
        )


@workflow.defn(name="BenchChildHops", sandboxed=SANDBOXED)
class BenchChildHops:
    """`count` hops one after another (start a child that submits once, await it); returns
    each hop's workflow time in ms: the floor of one step of a ledger's critical path."""

    @workflow.run
    async def run(self, args: dict[str, Any]) -> list[int]:
        hops: list[int] = []
        for n in range(int(args["count"])):
            began = _now_ms()
            await workflow.execute_child_workflow(
                BenchHopChild.run,
                {
                    "id": f"{workflow.info().workflow_id}-{n}",
                    "submit_activity": args["submit_activity"],
                },
                id=f"{workflow.info().workflow_id}-hop-{n}",
            )
            hops.append(_now_ms() - began)
        return hops


BENCH_WORKFLOWS: list[type] = [
    BenchTimerLoop,
    BenchChain,
    BenchChainChild,
    BenchNativeRun,
    BenchActivityThroughput,
    BenchRawLedger,
    BenchHopChild,
    BenchChildHops,
    BenchAwaitedChain,
    BenchAwaitedChild,
]
