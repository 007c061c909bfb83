"""`--scenario cost`: history events per tick and Temporal Cloud actions per run, durability
against a native Schedule and the raw chain."""

from __future__ import annotations

from temporalio.client import Client, WorkflowHistory

from bench import cost
from bench.activities import RECORDER
from bench.load import _gather_bounded, run_load
from bench.scenarios.common import Ctx, top


async def _histories(client: Client, ids: list[str]) -> list[WorkflowHistory]:
    return list(
        await _gather_bounded([client.get_workflow_handle(i).fetch_history() for i in ids], limit=8)
    )


# A tick's own billed commands in the parent (the rest is set-up, amortised).
STEADY_PARENT_ACTIONS = (
    "TimerStarted",
    "StartChildWorkflowExecutionInitiated",
    "ActivityTaskScheduled",
)


async def cost_scenario(ctx: Ctx) -> None:
    r = ctx.results
    duration = 15 if ctx.quick else 30
    names_seen: set[str] = set()
    d = await run_load(ctx.client, ctx.task_queue, "durability", 2, duration)
    parent = cost.Tally()
    ticks = 0
    for key in d.keys:
        for h in await cost.chain_histories(ctx.client, f"schedule:{key}"):
            t = cost.tally(h.events, skip_setup=True)
            parent.add(t)
            ticks += t.by_type.get("StartChildWorkflowExecutionInitiated", 0)
    runs = [(k, t) for k, t, _ in RECORDER.outcomes.get(d.tag, [])][:20]
    child = cost.Tally()
    for h in await _histories(ctx.client, [f"schedule-run:{k}:{t}" for k, t in runs]):
        child.add(cost.tally(h.events))
    names_seen |= set(parent.by_type) | set(child.by_type)
    per_child = child.actions / len(runs) if runs else float("nan")
    per_tick_events = parent.events / ticks if ticks else float("nan")
    per_tick_actions = parent.actions / ticks if ticks else float("nan")
    r.row(
        "cost",
        "durability: parent history events per tick",
        f"{per_tick_events:.1f}",
        f"{parent.events} events / {ticks} ticks (2 objects, {duration} s; events by type: "
        + top(parent.by_type, 12)
        + ")",
    )
    r.row(
        "cost",
        "durability: actions per run",
        f"{per_tick_actions + per_child:.1f}",
        f"parent {per_tick_actions:.1f}/tick ({top(parent.actions_by_type)}) + "
        f"ScheduledRun child {per_child:.1f} ({top(child.actions_by_type)}); "
        "setup (signal-with-start) excluded",
    )
    steady = sum(parent.actions_by_type.get(name, 0) for name in STEADY_PARENT_ACTIONS)
    steady_per_run = (steady / ticks if ticks else float("nan")) + per_child
    r.row(
        "cost",
        "durability: actions per run, steady state / set-up and continue-as-new amortised",
        f"{steady_per_run:.1f} / {per_tick_actions + per_child - steady_per_run:.2f}",
        "steady state: the parent's timer, child start and outcome activity, and the child's "
        "own actions; the rest (search-attribute upserts, a continue-as-new's start and the "
        "signals of runs handed over) spread over this load's ticks, less on a longer one",
    )
    memos = parent.by_type.get("WorkflowPropertiesModified", 0) + child.by_type.get(
        "WorkflowPropertiesModified", 0
    )
    r.row(
        "cost",
        "durability: memo upserts per run (not in the actions above)",
        f"{memos / ticks if ticks else float('nan'):.2f}",
        "WorkflowPropertiesModified events; docs.temporal.io/cloud/actions lists no action for "
        "a memo upsert, so they are counted apart: if billed, add them to the actions",
    )
    r.row(
        "cost",
        "durability: ScheduledRun child history events per run",
        f"{child.events / len(runs) if runs else float('nan'):.1f}",
        "",
    )
    r.values["durability_actions_per_run"] = per_tick_actions + per_child
    r.values["durability_events_per_tick"] = per_tick_events
    n = await run_load(ctx.client, ctx.task_queue, "native", 1, duration)
    listed = [
        w.id
        async for w in ctx.client.list_workflows(
            f"WorkflowType = 'BenchNativeRun' AND TemporalScheduledById = '{n.keys[0]}'"
        )
    ][:20]
    native = cost.Tally()
    for h in await _histories(ctx.client, listed):
        native.add(cost.tally(h.events))
    names_seen |= set(native.by_type)
    per = native.actions / len(listed) if listed else float("nan")
    r.row(
        "cost",
        "native Schedule: actions per run",
        f"{per + 2:.1f}",
        f"Schedule Start 2 + started workflow {per:.1f} "
        f"({top(native.actions_by_type)}; its start counted as the Schedule's Workflow started)",
    )
    r.row(
        "cost",
        "native Schedule: started workflow history events per run",
        f"{native.events / len(listed) if listed else float('nan'):.1f}",
        "plus the schedule's own internal workflow, not visible",
    )
    ch = await run_load(ctx.client, ctx.task_queue, "chain", 1, duration)
    chain_parent = cost.Tally()
    for h in await cost.chain_histories(ctx.client, ch.keys[0]):
        chain_parent.add(cost.tally(h.events, skip_setup=True))
    chain_ticks = chain_parent.by_type.get("StartChildWorkflowExecutionInitiated", 0)
    chain_children = [
        h
        for h in await _histories(
            ctx.client, [f"{ch.keys[0]}:{m.due_ms}" for m in RECORDER.marks.get(ch.tag, [])][:10]
        )
    ]
    cc = cost.Tally()
    for h in chain_children:
        cc.add(cost.tally(h.events))
    if chain_ticks and chain_children:
        r.row(
            "cost",
            "raw chain: parent events per tick / actions per run",
            f"{chain_parent.events / chain_ticks:.1f} / "
            f"{chain_parent.actions / chain_ticks + cc.actions / len(chain_children):.1f}",
            "the minimum a tick costs done as timer -> child -> activity",
        )
    names_seen |= set(chain_parent.by_type)
    r.note(
        "Temporal Cloud actions counted from histories with the rules of "
        + cost.DOCS
        + ": "
        + "; ".join(cost.rules_used(names_seen))
        + "; "
        + cost.QUERY_RULE
        + "; "
        + cost.SCHEDULE_RULE
    )
