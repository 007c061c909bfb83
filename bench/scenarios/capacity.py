"""`--scenario capacity`: the highest rate each side sustains with p99 lateness <= 1 s."""

from __future__ import annotations

from bench.load import LoadResult, run_load
from bench.scenarios.common import Ctx, verdict
from bench.stats import Summary, fmt_ms, fmt_ratio


def _capacity_ratio(ours: float, theirs: float) -> float:
    """Capacity ratio; undefined (nan, shown as `-` and not MET) when neither side passed."""
    if theirs:
        return ours / theirs
    return float("inf") if ours else float("nan")


def _passes(res: LoadResult, p99: float) -> bool:
    return p99 <= 1000 and res.seen >= 0.99 * res.expected


async def capacity(ctx: Ctx) -> None:
    r = ctx.results
    # Fine steps at the low end: a file-backed server passes or fails there.
    levels = [5, 8, 11, 15, 20, 25, 35, 45, 55]
    if not ctx.quick:
        levels = [5, 8, 11, 15, 20, 30, 40, 50, 60, 80, 100]
    duration = 12 if ctx.quick else 30
    sides = ["durability", "native", "chain"]
    capacities: dict[str, float] = {side: 0.0 for side in sides}
    best_level: dict[str, int] = {side: 0 for side in sides}
    for side in sides:
        r.sweep[side] = []
    # Sides take turns at each level, so a change in the machine's background load hits all
    # of them alike instead of whichever side happened to run during it.
    live = list(sides)
    for level in levels:
        for side in list(live):
            res = await run_load(ctx.client, ctx.task_queue, side, level, duration)
            s = Summary.of(res.lateness)
            r.sweep[side].append((level, s.p99, res.runs_per_s))
            ok = _passes(res, s.p99)
            print(
                f"    capacity {side} {level}: p99 {fmt_ms(s.p99)} ms, "
                f"{res.seen}/{res.expected} runs, {'ok' if ok else 'FAIL'}",
                flush=True,
            )
            if ok:
                capacities[side], best_level[side] = res.runs_per_s, level
            else:
                if res.notes:
                    r.note(f"capacity {side} {level} failed; " + "; ".join(res.notes))
                live.remove(side)
        if not live:
            break
    for side in sides:
        tried = ", ".join(f"{n}: p99 {fmt_ms(p)} ms" for n, p, _ in r.sweep[side])
        r.row(
            "capacity",
            f"{side}: capacity (runs/s with p99 <= 1 s and >= 99% of runs)",
            f"{capacities[side]:.1f} ({best_level[side]} objects)",
            f"{duration} s per level; {tried}",
        )
    if "durability" in capacities:
        d = capacities["durability"]
        for side, name, goal in (("native", "native", 1.0), ("chain", "raw chain", 0.8)):
            if side in capacities:
                ratio = _capacity_ratio(d, capacities[side])
                r.row(
                    "capacity",
                    f"durability / {name} capacity",
                    fmt_ratio(ratio),
                    f"goal >= {goal}: " + verdict(ratio, ratio >= goal),
                )
    r.note(
        "capacity: the sides take turns at each level and each stops at its first failing "
        f"level; the resolution is the level step ({levels}), so capacities are lower bounds "
        "within one step"
    )
