"""`--scenario ledger-retry-slots`: the ledger bench's graph at `concurrency: 2` against a far
side that answers `503` with `Retry-After: 2` to the first attempt of a third of the requests,
side by side in one run: requests on their own retry timers, holding their slot while they
wait (0.1.0: `own_retry_timers`, a start field only the bench sets), then requests that free
their slot and wait for the ledger's grant (0.1.1, L4). Ops/s, makespan, how soon the
independent operations resolve while others wait, and the cost per operation."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from http.server import ThreadingHTTPServer
from typing import Any

from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.ledger import ledger_activities
from bench import cost
from bench.load import _terminate
from bench.scenarios.common import Ctx, top
from bench.scenarios.ledger import _phases, critical_path, ledger_operations, start_ledger
from harness.http import JSON, QuietHandler

RETRY_AFTER_S = 2
CONCURRENCY = 2


class FarSide:
    """A far side on 127.0.0.1: a POST of an operation whose `n % 3 == 0` is answered `503`
    + `Retry-After: 2` the first time; any other POST is applied; a GET says `applied` for an
    applied request, else 404 (unresolved: submit again). Notes when each operation was
    applied (monotonic seconds)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.refused: set[str] = set()
        self.applied: dict[str, str] = {}  # request ID -> operation ID
        self.applied_at: dict[str, float] = {}  # operation ID -> when
        self.calls = 0
        far = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                raw = self.request_body()
                body = json.loads(raw)
                request_id, op_id = body["id"], body["operation_ids"][0]
                with far.lock:
                    far.calls += 1
                    busy = body["payload"]["n"] % 3 == 0 and request_id not in far.refused
                    if busy:
                        far.refused.add(request_id)
                    else:
                        far.applied[request_id] = op_id
                        far.applied_at.setdefault(op_id, time.monotonic())
                if busy:
                    self.answer(503, {"error": "busy"}, {**JSON, "Retry-After": str(RETRY_AFTER_S)})
                else:
                    self.answer(200, {"outcome": "applied"}, JSON)

            def do_GET(self) -> None:
                request_id = self.path.rsplit("/", 1)[-1]
                with far.lock:
                    far.calls += 1
                    known = request_id in far.applied
                if known:
                    self.answer(200, {"outcome": "applied"}, JSON)
                else:
                    self.answer(404, {"error": "unknown"}, JSON)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        host, port = self.server.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _count(ctx: Ctx) -> int:
    return 90 if ctx.quick else 150


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def ledger_retry_slots(ctx: Ctx) -> None:
    r = ctx.results
    count = _count(ctx)
    ops = ledger_operations(count, 64, seed=7)
    depth = critical_path(ops)
    busy = {o["id"] for o in ops if o["payload"]["n"] % 3 == 0}
    independent = [o["id"] for o in ops if not o["dependencies"] and o["id"] not in busy]
    far = FarSide()
    queue = f"bench-slots-act-{uuid.uuid4().hex[:8]}"
    measured: dict[str, dict[str, float]] = {}
    try:
        async with Worker(ctx.client, task_queue=queue, activities=ledger_activities(far.url)):
            for label, own_timers in (("before (own timers)", True), ("after (grants)", False)):
                measured[label] = await _run(ctx, far, queue, ops, independent, own_timers)
    finally:
        far.server.shutdown()
    r.note(
        f"ledger-retry-slots: {count} operations (the ledger bench's graph: 64 canvases, seeded "
        f"random dependencies, critical path {depth}), concurrency {CONCURRENCY}, "
        f"{len(busy)} requests answered 503 + Retry-After: {RETRY_AFTER_S} on their first "
        f"submit (then GET 404, submit again, applied); retry initial 100 ms; "
        f"{len(independent)} independent operations (no dependency, never refused). 'before' "
        "is the 0.1.0 behaviour through the start field `own_retry_timers: true` (only the "
        "bench sets it; each request sleeps its own timer and keeps its slot); 'after' is the "
        "default (the request frees its slot, the ledger grants its retry)"
    )
    before, after = measured["before (own timers)"], measured["after (grants)"]
    rows = [
        ("ops/s", "rate", "{:.2f}"),
        ("makespan (s)", "makespan", "{:.1f}"),
        ("independent ops: time to resolve from enqueue, p50 (s)", "ind_p50", "{:.1f}"),
        ("independent ops: time to resolve from enqueue, p90 (s)", "ind_p90", "{:.1f}"),
        ("independent ops: time to resolve from enqueue, max (s)", "ind_max", "{:.1f}"),
        ("Cloud actions per operation", "actions", "{:.2f}"),
        ("history events per operation (ledger + requests)", "events", "{:.1f}"),
    ]
    for metric, key, fmt in rows:
        b, a = before.get(key, float("nan")), after.get(key, float("nan"))
        ratio = a / b if b else float("nan")
        r.row(
            "ledger-retry-slots",
            metric,
            f"{fmt.format(b)} -> {fmt.format(a)}",
            f"before (own timers) -> after (grants); after / before = {ratio:.2f}",
        )
    for label, values in measured.items():
        r.row(
            "ledger-retry-slots",
            f"{label}: resolved / enqueued",
            f"{values['resolved']:.0f} / {count}",
            str(values.get("detail_text", "")),
        )


async def _run(
    ctx: Ctx,
    far: FarSide,
    queue: str,
    ops: list[dict[str, Any]],
    independent: list[str],
    own_timers: bool,
) -> dict[str, Any]:
    count = len(ops)
    start_input: dict[str, Any] = {
        "concurrency": CONCURRENCY,
        "submit_activity": "http_submit",
        "query_activity": "http_query",
        "activity_task_queue": queue,
        "retry": {
            "initial_interval_ms": 100,
            "backoff_coefficient": 2.0,
            "maximum_interval_ms": 1000,
        },
    }
    if own_timers:
        start_input["own_retry_timers"] = True
    ledger_id = f"bench-slots-{uuid.uuid4().hex[:8]}"
    with far.lock:  # the same operation IDs in each run: forget the previous run's
        far.refused.clear()
        far.applied.clear()
        far.applied_at.clear()
    t0 = time.monotonic()
    handle = await start_ledger(ctx, ledger_id, start_input, ops)
    phases: dict[str, int] = {}
    deadline = t0 + 600
    while time.monotonic() < deadline:
        phases = _phases(await handle.query("snapshot"))
        if phases.get("resolved", 0) + phases.get("blocked", 0) >= count:
            break
        await asyncio.sleep(0.25)
    elapsed = time.monotonic() - t0
    resolved = phases.get("resolved", 0)
    with far.lock:
        latencies = [far.applied_at[o] - t0 for o in independent if o in far.applied_at]
    out: dict[str, Any] = {
        "rate": resolved / elapsed if elapsed else 0.0,
        "makespan": elapsed,
        "resolved": resolved,
        "ind_p50": _pct(latencies, 0.5),
        "ind_p90": _pct(latencies, 0.9),
        "ind_max": max(latencies, default=float("nan")),
    }
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
        child = cost.Tally()
        for wid in child_ids:
            child.add(
                cost.tally((await ctx.client.get_workflow_handle(wid).fetch_history()).events)
            )
        out["actions"] = (parent.actions + child.actions) / count
        out["events"] = (parent.events + child.events) / count
        out["detail_text"] = (
            f"phases at the end {phases}; ledger {parent.actions:.0f} actions / "
            f"{parent.events} events over {len(parents)} run(s) ({top(parent.actions_by_type)}); "
            f"{len(child_ids)} FrozenRequest children: {child.actions:.0f} actions / "
            f"{child.events} events ({top(child.actions_by_type)})"
        )
    except RPCError as error:
        out["detail_text"] = f"phases at the end {phases}; cost not measured: {error}"
    await _terminate([handle])
    return out
