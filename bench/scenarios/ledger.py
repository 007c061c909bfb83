"""`--scenario ledger`: ledger throughput and makespan against a same-graph raw baseline and
the child-hop floor, with its cost per operation."""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from http.server import ThreadingHTTPServer
from typing import Any

from temporalio.service import RPCError

from bench import cost
from bench.load import _terminate
from bench.scenarios.common import Ctx, top, verdict
from bench.scenarios.floors import floors
from bench.stats import fmt_ratio
from harness.http import JSON, QuietHandler


class _AppliedHandler(QuietHandler):
    requests_seen = 0
    lock = threading.Lock()

    def _answer(self) -> None:
        self.request_body()
        with self.lock:
            type(self).requests_seen += 1
        self.answer(200, {"outcome": "applied"}, JSON)

    do_POST = _answer
    do_GET = _answer


def start_http_server() -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AppliedHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    return server, f"http://{host!s}:{port}"


def ledger_operations(count: int, canvases: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    ops: list[dict[str, Any]] = []
    for i in range(count):
        participants = rng.sample(
            [f"canvas-{c:02d}" for c in range(canvases)], rng.choice((1, 1, 2))
        )
        earlier = [o["id"] for o in ops[-50:]]
        deps = rng.sample(earlier, min(len(earlier), rng.choice((0, 0, 1, 2))))
        ops.append(
            {
                "id": f"op-{i:05d}",
                "operation_type": "canvas.edit",
                "participants": participants,
                "dependencies": deps,
                "payload": {"n": i},
            }
        )
    return ops


def critical_path(ops: list[dict[str, Any]]) -> int:
    """Operations that must run one after another: dependencies plus per-canvas claims taken
    in sequence order. Even unbounded concurrency needs this many round trips."""
    level: dict[str, int] = {}
    canvas_level: dict[str, int] = {}
    for op in ops:
        before = [level[d] for d in op["dependencies"]]
        before += [canvas_level.get(c, 0) for c in op["participants"]]
        level[op["id"]] = 1 + max(before, default=0)
        for c in op["participants"]:
            canvas_level[c] = level[op["id"]]
    return max(level.values(), default=0)


def _phases(snapshot: Any) -> dict[str, int]:
    """Operations per phase from the snapshot's counts; resolved: all since the ledger began."""
    counts = snapshot.get("counts", {}) if isinstance(snapshot, dict) else {}
    phases = dict(counts.get("operations", {}))
    phases["resolved"] = counts.get("resolved_total", phases.get("resolved", 0))
    return phases


async def ledger(ctx: Ctx) -> None:
    r = ctx.results
    if "activity_rate_32" not in r.values:
        await floors(ctx)
    await _ledger_baseline(ctx)
    # compile as an activity (the default, any SDK may host it), then as a local activity on
    # the ledger's own worker (`local_compile`, opt-in).
    for label, extra in (("activity compile", {}), ("local_compile", {"local_compile": True})):
        await _ledger_variant(ctx, label, extra)


def _ledger_count(ctx: Ctx) -> int:
    return 300 if ctx.quick else 1000


async def _ledger_baseline(ctx: Ctx) -> None:
    """The fair baseline: the same graph (operations, dependencies, canvases, concurrency)
    run by one plain workflow calling the submit activity directly; and the floor of one
    step of the critical path, a child workflow hop."""
    r = ctx.results
    count = _ledger_count(ctx)
    ops = ledger_operations(count, 64, seed=7)
    submit = "http_submit"
    t0 = time.monotonic()
    workflow_ms = await ctx.client.execute_workflow(
        "BenchRawLedger",
        {
            "operations": ops,
            "concurrency": 32,
            "lanes": {"asset.upload": 1},
            "submit_activity": submit,
        },
        id=f"bench-raw-ledger-{uuid.uuid4().hex[:8]}",
        task_queue=ctx.task_queue,
        result_type=int,
    )
    elapsed = time.monotonic() - t0
    r.values["raw_ledger_rate"] = count / elapsed
    r.values["raw_ledger_makespan_s"] = elapsed
    depth = critical_path(ops)
    r.row(
        "ledger",
        "raw same-graph baseline: ops/s (one workflow, submit activities, no children)",
        f"{count / elapsed:.1f}",
        f"{count} operations in {elapsed:.1f} s wall ({workflow_ms / 1000:.1f} s workflow time); "
        f"same operations, dependencies, 64 canvases, concurrency 32, {submit}; critical path "
        f"{depth}: {elapsed * 1000 / depth:.0f} ms per step",
    )
    hops = sorted(
        await ctx.client.execute_workflow(
            "BenchChildHops",
            {"count": 21, "submit_activity": submit},
            id=f"bench-hops-{uuid.uuid4().hex[:8]}",
            task_queue=ctx.task_queue,
            result_type=list[int],
        )
    )
    hop_p50 = hops[len(hops) // 2]
    r.values["child_hop_p50_ms"] = hop_p50
    r.row(
        "ledger",
        "child-hop floor: one step of the critical path, p50 / p90 (ms)",
        f"{hop_p50} / {hops[int(len(hops) * 0.9)]}",
        f"{len(hops)} sequential hops: start a child workflow that submits once, await it; "
        f"critical path {depth} x p50 = {depth * hop_p50 / 1000:.1f} s makespan floor for a "
        "design with a child per request",
    )


async def _ledger_variant(ctx: Ctx, label: str, extra: dict[str, Any]) -> None:
    r = ctx.results
    count = _ledger_count(ctx)
    ops = ledger_operations(count, 64, seed=7)
    start_input = {
        "concurrency": 32,
        "compile_activity": "compile",
        "submit_activity": "http_submit",
        "query_activity": "http_query",
        "activity_task_queue": ctx.task_queue,
        **extra,
    }
    ledger_id = f"bench-{uuid.uuid4().hex[:8]}"
    before_http = _AppliedHandler.requests_seen
    t0 = time.monotonic()
    handle = await start_ledger(ctx, ledger_id, start_input, ops)
    enqueued = time.monotonic() - t0
    polls = 0
    phases: dict[str, int] = {}
    deadline = t0 + (120 if ctx.quick else 600)
    while time.monotonic() < deadline:
        phases = _phases(await handle.query("snapshot"))
        polls += 1
        if phases.get("resolved", 0) + phases.get("blocked", 0) >= count:
            break
        await asyncio.sleep(0.5)
    elapsed = time.monotonic() - t0
    resolved = phases.get("resolved", 0)
    rate = resolved / elapsed if elapsed > 0 else 0.0
    raw = r.values["activity_rate_32"]
    r.row(
        "ledger",
        f"{label}: operations resolved / enqueued",
        f"{resolved} / {count}",
        f"phases at the end {phases}; 64 canvases, seeded random deps, concurrency 32; "
        f"enqueue took {enqueued:.1f} s",
    )
    r.row(
        "ledger",
        f"{label}: ops/s (until the snapshot shows all resolved)",
        f"{rate:.1f}",
        f"{elapsed:.1f} s; snapshot polled every 0.5 s ({polls} queries); "
        f"{_AppliedHandler.requests_seen - before_http} HTTP requests to 127.0.0.1 "
        f"via {start_input['submit_activity']}/{start_input['query_activity']}",
    )
    depth = critical_path(ops)
    r.row(
        "ledger",
        f"{label}: critical path (operations that must run one after another)",
        str(depth),
        f"dependencies + per-canvas claims in sequence order; {elapsed * 1000 / depth:.0f} ms "
        "per step observed; even unbounded concurrency needs this many round trips",
    )
    ratio = rate / raw if raw else float("nan")
    r.row(
        "ledger",
        f"{label}: ratio ops/s / raw 32-in-flight activity rate",
        fmt_ratio(ratio),
        "independent activities: no design with a child per request can approach it",
    )
    same_graph = rate / r.values["raw_ledger_rate"] if r.values.get("raw_ledger_rate") else 0.0
    r.row(
        "ledger",
        f"{label}: ratio ops/s / raw same-graph baseline",
        fmt_ratio(same_graph),
        "goal >= 0.5: " + verdict(same_graph, same_graph >= 0.5),
    )
    floor_s = depth * r.values.get("child_hop_p50_ms", float("nan")) / 1000
    makespan_ratio = elapsed / floor_s if floor_s else float("nan")
    r.row(
        "ledger",
        f"{label}: makespan / (critical path x child-hop p50)",
        fmt_ratio(makespan_ratio),
        f"{elapsed:.1f} s vs {floor_s:.1f} s; goal <= 1.5: "
        + verdict(makespan_ratio, makespan_ratio <= 1.5),
    )
    r.values[f"ledger_rate {label}"] = rate
    # Cost per operation, from the ledger's and its requests' histories.
    try:
        parents = await cost.chain_histories(ctx.client, handle.id)
        parent = cost.Tally()
        for h in parents:
            parent.add(cost.tally(h.events, skip_setup=False))
        child_ids = [
            e.start_child_workflow_execution_initiated_event_attributes.workflow_id
            for h in parents
            for e in h.events
            if e.HasField("start_child_workflow_execution_initiated_event_attributes")
        ]
        sample = child_ids[:: max(1, len(child_ids) // 40)][:40]
        child = cost.Tally()
        for wid in sample:
            child.add(
                cost.tally((await ctx.client.get_workflow_handle(wid).fetch_history()).events)
            )
        per_child = child.actions / len(sample) if sample else 0.0
        total = parent.actions + per_child * len(child_ids)
        r.row(
            "cost",
            f"ledger ({label}): actions per operation",
            f"{total / count:.1f}",
            f"parent {parent.actions:.0f} actions / {parent.events} events over {len(parents)} "
            f"run(s), {len(child_ids)} FrozenRequest children x {per_child:.1f} actions "
            f"(sampled {len(sample)}); snapshot queries (1 action each) not included",
        )
        r.row(
            "cost",
            f"ledger ({label}): parent history events per operation",
            f"{parent.events / count:.1f}",
            "parent actions by type: " + top(parent.actions_by_type),
        )
        r.values[f"ledger_actions_per_op {label}"] = total / count
    except RPCError as error:
        r.note(f"ledger cost not measured: {error}")
    await _terminate([handle])


async def start_ledger(
    ctx: Ctx, ledger_id: str, start_input: dict[str, Any], ops: list[dict[str, Any]]
) -> Any:
    """Start `ledger:<ledger_id>` by signal-with-start of the first 100 operations, then
    enqueue the rest 100 at a time; returns its handle."""
    batches = [ops[i : i + 100] for i in range(0, len(ops), 100)]
    handle = await ctx.client.start_workflow(
        "OperationLedger",
        start_input,
        id=f"ledger:{ledger_id}",
        task_queue=ctx.task_queue,
        start_signal="enqueue",
        start_signal_args=[{"operations": batches[0]}],
    )
    for batch in batches[1:]:
        await handle.execute_update("enqueue", {"operations": batch})
    return handle
