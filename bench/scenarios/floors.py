"""`--scenario floors`: the server's own floors on this machine: raw timer wake-up, a raw
timer -> child -> activity chain, raw activity throughput."""

from __future__ import annotations

import uuid

from bench.activities import now_ms
from bench.load import WARMUP_MS, run_load
from bench.scenarios.common import Ctx
from bench.stats import Summary, fmt_ms


async def floors(ctx: Ctx) -> None:
    r = ctx.results
    span_s = 15 if ctx.quick else 30
    # Raw timer wake-up: 10 loops aligned to whole seconds.
    start = now_ms()
    until = int(start + span_s * 1000)
    handles = [
        await ctx.client.start_workflow(
            "BenchTimerLoop",
            {"until_ms": until},
            id=f"bench-timer-{uuid.uuid4().hex[:8]}-{i}",
            task_queue=ctx.task_queue,
        )
        for i in range(10)
    ]
    w0 = (start // 1000 + 1) * 1000 + WARMUP_MS
    samples: list[float] = []
    for handle in handles:
        for target, lateness in await handle.result():
            if target >= w0:
                samples.append(float(lateness))
    s = Summary.of(samples)
    r.series["floor: raw timer"] = samples
    r.values["timer_p99"] = s.p99
    r.row(
        "floors",
        "raw timer wake lateness p50 / p99 (ms)",
        f"{fmt_ms(s.p50)} / {fmt_ms(s.p99)}",
        f"10 loops, {s.n} wakes, workflow.now() after waking minus target",
    )

    # Raw chain: timer -> child workflow -> no-op activity.
    chain = await run_load(ctx.client, ctx.task_queue, "chain", 10, span_s)
    cs = Summary.of(chain.lateness)
    r.series["floor: raw chain"] = chain.lateness
    r.values["chain_p99"] = cs.p99
    r.row(
        "floors",
        "raw chain (timer -> child -> activity) start lateness p50 / p99 (ms)",
        f"{fmt_ms(cs.p50)} / {fmt_ms(cs.p99)}",
        f"10 loops, {chain.seen}/{chain.expected} runs",
    )

    # Raw activity throughput from one workflow.
    for parallel, count in ((1, 100 if ctx.quick else 300), (32, 500 if ctx.quick else 1000)):
        elapsed_ms = await ctx.client.execute_workflow(
            "BenchActivityThroughput",
            {"count": count, "parallel": parallel},
            id=f"bench-throughput-{uuid.uuid4().hex[:8]}",
            task_queue=ctx.task_queue,
            result_type=int,
        )
        rate = count / max(elapsed_ms, 1) * 1000
        r.values[f"activity_rate_{parallel}"] = rate
        label = "sequential" if parallel == 1 else f"{parallel} in flight"
        r.row(
            "floors",
            f"raw no-op activity throughput, {label} (activities/s)",
            f"{rate:.0f}",
            f"{count} activities from one workflow in {elapsed_ms} ms",
        )


async def ensure_floors(ctx: Ctx) -> None:
    if "chain_p99" not in ctx.results.values:
        await floors(ctx)
