"""`--scenario schedule`: run-start lateness of durability schedules at `@every 1s` against
native Schedules and the raw chain floor."""

from __future__ import annotations

from bench.load import LoadResult, run_load
from bench.results import Results
from bench.scenarios.common import Ctx, verdict
from bench.scenarios.floors import ensure_floors
from bench.stats import Summary, fmt_ms, fmt_ratio


def _load_rows(r: Results, scenario: str, res: LoadResult, label: str) -> Summary:
    s = Summary.of(res.lateness)
    r.row(
        scenario,
        f"{label}: run-start lateness p50 / p99 / max (ms)",
        f"{fmt_ms(s.p50)} / {fmt_ms(s.p99)} / {fmt_ms(s.max)}",
        f"{res.objects} objects, {s.n} runs measured",
    )
    r.row(
        scenario,
        f"{label}: runs started / expected (missing)",
        f"{res.seen} / {res.expected} ({res.missing})",
        "missing = collapsed ticks (durability, S6) or starts not seen by end + grace"
        + (f"; {res.duplicates} duplicate runs" if res.duplicates else ""),
    )
    if res.side == "durability":
        r.row(
            scenario,
            f"{label}: runs completed (outcome delivered, complete)",
            str(res.completed),
            "",
        )
    return s


async def schedule(ctx: Ctx) -> None:
    r = ctx.results
    await ensure_floors(ctx)
    duration = 20 if ctx.quick else 60
    d = await run_load(ctx.client, ctx.task_queue, "durability", 10, duration, grace_s=5)
    ds = _load_rows(r, "schedule", d, "durability @every 1s")
    r.series["durability (10 objects)"] = d.lateness
    r.values["durability_p99"] = ds.p99
    ratio = ds.p99 / r.values["chain_p99"] if r.values.get("chain_p99") else float("nan")
    r.row(
        "schedule",
        "ratio durability p99 / chain floor p99",
        fmt_ratio(ratio),
        "goal <= 1.5: "
        + verdict(ratio, ratio <= 1.5 and d.missing == 0)
        + (f" ({d.missing} ticks collapsed/missing)" if d.missing else ""),
    )
    r.values["schedule_ratio"] = ratio
    n = await run_load(ctx.client, ctx.task_queue, "native", 10, duration, grace_s=5)
    ns = _load_rows(r, "schedule", n, "native Schedule every 1s")
    r.series["native Schedules (10)"] = n.lateness
    r.values["native_p99"] = ns.p99
    if "durability_p99" in r.values and ns.p99:
        r.row(
            "schedule",
            "ratio durability p99 / native p99",
            fmt_ratio(r.values["durability_p99"] / ns.p99),
            "",
        )
