"""`--scenario cpu`: CPU ms per run of the worker and of the dev server, for each side at one
load."""

from __future__ import annotations

from bench.cpu import measure_cpu
from bench.scenarios.common import Ctx
from bench.stats import fmt_ms, fmt_ratio


async def cpu(ctx: Ctx) -> None:
    """Who pays for a run: CPU ms of the worker process and of the dev server, per run, for
    each side at the same fixed load."""
    r = ctx.results
    objects, duration = 10, (15 if ctx.quick else 30)
    sides = ["durability", "native", "chain"]
    totals: dict[str, float] = {}
    for side in sides:
        usage = await measure_cpu(ctx.client, ctx.task_queue, side, objects, duration)
        totals[side] = usage.worker_ms_per_run + usage.server_ms_per_run
        r.row(
            "cpu",
            f"{side}: CPU ms per run, worker + server = total",
            f"{usage.worker_ms_per_run:.1f} + {usage.server_ms_per_run:.1f} = {totals[side]:.1f}",
            f"{objects} objects x {duration} s, {usage.runs} runs, p99 {fmt_ms(usage.p99)} ms; "
            "worker = this process (workflow tasks, activities, the bench's client)",
        )
    if "durability" in totals:
        for other in ("native", "chain"):
            if totals.get(other):
                r.row(
                    "cpu",
                    f"durability / {other} CPU per run",
                    fmt_ratio(totals["durability"] / totals[other]),
                    "the capacity ratio's inverse, on a machine where CPU is what runs out",
                )
