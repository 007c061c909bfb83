"""`--scenario scale`: thousands of idle hourly schedules: time to start, worker memory,
history per schedule."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from typing import Any

from bench import cost
from bench.load import _gather_bounded, _terminate
from bench.machine import rss_mib
from bench.scenarios.common import Ctx


async def scale(ctx: Ctx) -> None:
    r = ctx.results
    count = 1000 if ctx.quick else 10_000
    minute = (time.gmtime().tm_min + 30) % 60  # hourly, half an hour away from now
    expression = await _hourly_expression(ctx, f"{minute} * * * *")
    rss_before = rss_mib()
    prefix = f"bench-idle-{uuid.uuid4().hex[:6]}"
    t0 = time.monotonic()
    handles = await _gather_bounded(
        [
            ctx.client.start_workflow(
                "DurabilitySchedule",
                {"run_activity": "bench_run", "outcome_activity": "bench_outcome"},
                id=f"schedule:{prefix}-{i}",
                task_queue=ctx.task_queue,
                start_signal="set",
                start_signal_args=[{"expression": expression, "version": 1}],
            )
            for i in range(count)
        ],
        limit=64,
    )
    started = time.monotonic() - t0
    # Settled: every schedule has stored its `set` (answering `get` with the expression).
    probe = handles[-50:]

    async def stored(handle: Any) -> bool:
        try:
            answer = await handle.query("get", rpc_timeout=timedelta(seconds=10))
        except Exception:  # not processed yet (query timeout) or overloaded: not settled
            return False
        return isinstance(answer, dict) and answer.get("expression") == expression

    try:
        while time.monotonic() - t0 < 900:
            if all(await _gather_bounded([stored(h) for h in probe], limit=16)):
                break
            await asyncio.sleep(1.0)
        settled = time.monotonic() - t0
        await asyncio.sleep(3)
        rss_after = rss_mib()
        sample = await cost.chain_histories(ctx.client, handles[0].id)
    finally:
        t1 = time.monotonic()
        await _terminate(handles)
        terminate_s = time.monotonic() - t1
    r.row(
        "scale",
        f"{count} idle hourly schedules: time to start (signal-with-start, 64 at once)",
        f"{started:.1f} s ({count / started:.0f}/s)",
        f"all first workflow tasks done after {settled:.1f} s (probe: `get` on the last 50)",
    )
    r.row(
        "scale",
        "worker process RSS before / after (MiB)",
        f"{rss_before:.0f} / {rss_after:.0f}",
        f"{(rss_after - rss_before) * 1024 / count:.1f} KiB per cached schedule "
        "(max_cached_workflows 12000; VmRSS of this process: worker + client + bench)",
    )
    r.row("scale", "history events per idle schedule after start", str(len(sample[-1].events)), "")
    r.note(
        f"scale: the {count} idle schedules use `{expression}`; terminated after measuring "
        f"({terminate_s:.0f} s) so none fires during the rest of the bench"
    )


async def _hourly_expression(ctx: Ctx, cron_expression: str) -> str:
    """The cron form when the product handles it; `@every 1h` (with a note) when it does not."""
    wid = f"schedule:bench-cron-probe-{uuid.uuid4().hex[:6]}"
    handle = await ctx.client.start_workflow(
        "DurabilitySchedule",
        {"run_activity": "bench_run", "outcome_activity": "bench_outcome"},
        id=wid,
        task_queue=ctx.task_queue,
        start_signal="set",
        start_signal_args=[{"expression": cron_expression, "version": 1}],
    )
    try:
        answer = await handle.query("get", rpc_timeout=timedelta(seconds=5))
        if isinstance(answer, dict) and answer.get("expression") == cron_expression:
            return cron_expression
        problem = f"`get` answered {answer!r}"
    except Exception as error:
        problem = f"{type(error).__name__}: {error}"
    finally:
        await _terminate([handle])
    ctx.results.note(
        f"PRODUCT BUG: `set` with the cron expression `{cron_expression}` did not take "
        f"({problem}). When this bench was written the cause was a TypeError in "
        "cron.next_occurrence inside the workflow sandbox (`cursor.astimezone(zone)` got a "
        "sandbox-proxied ZoneInfo), failing the workflow task of the `set` signal forever. "
        "The scale scenario used `@every 1h` instead"
    )
    return "@every 1h"
