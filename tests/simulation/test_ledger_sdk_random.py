"""Keeps the ledger simulation's model honest: a small seeded random run through the real SDK on
the dev server (the time-skipping server is not needed: every wait here is short, and the
run is about interleavings, not long spans).

The test's own activities play the far side (compile, submit, query, complete), answering
seeded random statuses (applied, rejected, accepted, unresolved with or without
`retry_after_ms`, blocked, raising, slow); the test sends seeded random messages (enqueue
with dependencies and shared participants, hold with and without a token, release, settle,
resume, skip, configure) through the client and the raw workflow handle, in bursts, with
worker restarts (a new, cold worker) and a short history (continue-as-new) along the way,
then stops the ledger. Checked from outside, against the promises of `LEDGER_CHECKS`:

- L12: nothing is launched (compile, request started, retry granted) while a hold is
  outstanding or once stopped, read from the ledger's histories in event order; and no
  far-side call starts inside a hold unless its attempt was admitted before the hold.
- L11: no request of a protocol version the ledger did not support then is launched.
- L5: never two requests open on one canvas at the far side (a skipped request excepted: the
  ledger gave up on it); the snapshot never shows one canvas claimed twice.
- L6/L7: every call of a request carries the one body frozen for it, keyed by its ID.
- L4: at most the highest `concurrency` set of attempts at the far side at once, and at most
  the highest `asset.upload` lane of that type.
- 3.10: at stop nothing is in flight, and every request the far side received that is not
  resolved is listed in `unknown` with the body it was sent.
- No workflow task failed, in any run of the ledger or of its requests (except, printed, the
  known open race of a closing task refused as `UnhandledCommand`; see `check_histories`).

Replay a failing seed with `DURABILITY_SDK_SEED=<n>` (the messages and answers repeat; the
real interleaving is the server's)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities.ledger import compile_passthrough
from durability.client import DurabilityClient, RejectedError
from durability.registry import workflow_runner
from tests.support.cold_worker import named
from tests.support.helpers import cache_options
from tests.support.ledger import intent, operations, snapshot
from workflows.ledger.request import FrozenRequestWorkflow
from workflows.ledger.workflow import OperationLedgerWorkflow

pytestmark = pytest.mark.cacheless

SEED_ENV = "DURABILITY_SDK_SEED"
SEEDS = [int(s) for s in os.environ[SEED_ENV].split(",")] if SEED_ENV in os.environ else [3, 8]
CANVASES = ["c1", "c2", "c3", "c4", "c5", "c6"]
STEPS = 16
# After this many calls for one operation the far side answers `applied`: every run ends.
CALLS_BEFORE_APPLIED = 5
SETTLE_TIMEOUT_S = 45


@dataclass
class Call:
    """One call the far side received."""

    activity: str  # compile, submit, query, complete
    target: str  # the request ID (the operation ID for a compile)
    operation_id: str
    kind: str
    body: str  # canonical JSON of the frozen request (the intent for a compile)
    key: str | None
    protocol: Any
    canvases: list[str]
    started: float
    ended: float | None = None
    answer: Any = None
    where: str = ""  # the calling workflow run and activity, for diagnostics


@dataclass
class FarSide:
    """The test's activities: the far side of a ledger, answering from a seeded random table
    per operation and call, recording every call."""

    seed: int
    calls: list[Call] = field(default_factory=list)
    per_operation: Counter[str] = field(default_factory=Counter)
    bodies: dict[str, str] = field(default_factory=dict)
    open_canvases: dict[str, str] = field(default_factory=dict)
    conflicts: list[tuple[str, str, str]] = field(default_factory=list)  # canvas, holder, other
    resolved: set[str] = field(default_factory=set)
    in_progress: Counter[str] = field(default_factory=Counter)  # by operation type
    max_in_progress: int = 0
    max_by_type: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    def _begin(self, name: str, target: str, body: dict[str, Any], key: str | None) -> Call:
        canonical = json.dumps(body, sort_keys=True)
        operation_id = str((body.get("operation_ids") or [body.get("id")])[0])
        call = Call(
            name, target, operation_id, str(body.get("kind") or body.get("operation_type")),
            canonical, key, body.get("protocol_version", 1), list(body.get("canvas_ids", [])),
            time.time(),
        )  # fmt: skip
        if activity.in_activity():
            info = activity.info()
            call.where = (
                f"{info.workflow_id}/{info.workflow_run_id} act {info.activity_id} "
                f"try {info.attempt}"
            )
        self.calls.append(call)
        if name in ("submit", "query"):
            if key != target:
                self.violations.append(f"{name} of {target} keyed {key!r}")
            if self.bodies.setdefault(target, canonical) != canonical:
                self.violations.append(f"{target} was sent two different bodies")
        if name == "submit" and target not in self.resolved:
            for canvas in call.canvases:
                holder = self.open_canvases.setdefault(canvas, target)
                if holder != target:
                    self.conflicts.append((canvas, holder, target))
        if name != "complete":
            self.in_progress[call.kind] += 1
            self.max_in_progress = max(self.max_in_progress, sum(self.in_progress.values()))
            self.max_by_type[call.kind] = max(
                self.max_by_type[call.kind], self.in_progress[call.kind]
            )
        return call

    def _end(self, call: Call, answer: Any) -> None:
        call.ended, call.answer = time.time(), answer
        if call.activity != "complete":
            self.in_progress[call.kind] -= 1
        outcome = answer.get("outcome") if isinstance(answer, dict) else None
        if call.activity in ("submit", "query") and outcome in ("applied", "rejected"):
            self.resolved.add(call.target)
            for canvas in [c for c, r in self.open_canvases.items() if r == call.target]:
                del self.open_canvases[canvas]

    def _table(self, operation_id: str) -> tuple[random.Random, int]:
        self.per_operation[operation_id] += 1
        count = self.per_operation[operation_id]
        return random.Random(f"{self.seed}:{operation_id}:{count}"), count

    async def _answer(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        key = request.get("idempotency_key")
        call = self._begin(name, str(request.get("id")), request, key)
        rng, count = self._table(call.operation_id)
        status: dict[str, Any]
        try:
            pick = "applied" if count > CALLS_BEFORE_APPLIED else rng.choices(
                ["applied", "rejected", "accepted", "unresolved", "blocked", "raising", "slow"],
                [25, 5, 12, 12, 3, 8, 35],
            )[0]  # fmt: skip
            if pick == "slow":
                deadline = time.monotonic() + rng.uniform(0.4, 1.5)
                while time.monotonic() < deadline:
                    activity.heartbeat()
                    await asyncio.sleep(0.05)
                pick = rng.choice(["applied", "accepted"])
            if pick == "raising":
                raise ApplicationError("the far side dropped the connection", type="Transport")
            if pick == "blocked":
                status = {"outcome": "unresolved", "blocked": True, "error": "token expired"}
            else:
                status = {"outcome": pick}
            if pick in ("unresolved", "accepted") and rng.random() < 0.5:
                status["retry_after_ms"] = rng.randint(20, 300)
        except BaseException as error:
            self._end(call, {"raised": type(error).__name__})
            raise
        self._end(call, status)
        return status

    def activities(self) -> list[Callable[..., Any]]:
        @activity.defn(name="compile")
        async def compile_op(op: dict[str, Any], request_id: str) -> dict[str, Any]:
            call = self._begin("compile", str(op.get("id")), op, None)
            try:
                await asyncio.sleep(random.Random(f"{self.seed}:{op.get('id')}").uniform(0, 0.3))
                return await compile_passthrough(op, request_id)
            finally:
                self._end(call, None)

        @activity.defn(name="submit")
        async def submit(request: dict[str, Any]) -> dict[str, Any]:
            return await self._answer("submit", request)

        @activity.defn(name="query")
        async def query(request: dict[str, Any]) -> dict[str, Any]:
            return await self._answer("query", request)

        @activity.defn(name="complete")
        async def complete(request: dict[str, Any], status: dict[str, Any]) -> Any:
            call = self._begin("complete", str(request.get("id")), request, None)
            rng, _ = self._table(f"{call.operation_id}:complete")
            answer = {"blocked": True, "error": "receipt mismatch"} if rng.random() < 0.05 else None
            self._end(call, answer)
            return answer

        return [compile_op, submit, query, complete]


class Workers:
    """The ledger's worker, which the test stops and replaces by a new (cold) one."""

    def __init__(self, client: Client, task_queue: str, far_side: FarSide) -> None:
        self.client, self.task_queue, self.far_side = client, task_queue, far_side
        self.worker: Worker | None = None
        self.running: asyncio.Task[None] | None = None
        self.restarts = 0

    async def start(self) -> None:
        self.worker = Worker(
            self.client,
            task_queue=self.task_queue,
            workflows=[OperationLedgerWorkflow, FrozenRequestWorkflow],
            activities=self.far_side.activities(),
            workflow_runner=workflow_runner(),
            **cache_options(),
        )
        self.running = asyncio.create_task(self.worker.run())

    async def stop(self) -> None:
        if self.worker is not None and self.running is not None:
            await self.worker.shutdown()
            await self.running
        self.worker = self.running = None

    async def restart(self) -> None:
        await self.stop()
        self.restarts += 1
        await self.start()


@dataclass
class Driver:
    """The messages of one seeded run and what they were answered."""

    rng: random.Random
    ledger_id: str
    handle: WorkflowHandle[Any, Any]
    durability: DurabilityClient
    enqueued: list[str] = field(default_factory=list)
    participants: dict[str, list[str]] = field(default_factory=dict)
    tokens: set[str] = field(default_factory=set)
    next_op: int = 0
    next_token: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    max_concurrency: int = 2
    max_upload_lane: int = 1

    def _intents(self) -> list[dict[str, Any]]:
        batch: list[dict[str, Any]] = []
        for _ in range(self.rng.randint(1, 3)):
            self.next_op += 1
            op_id = f"op-{self.next_op}"
            earlier = self.enqueued + [i["id"] for i in batch]
            dependencies = self.rng.sample(
                earlier, min(len(earlier), self.rng.choice([0, 0, 1, 2]))
            )
            batch.append(
                intent(
                    op_id,
                    self.rng.sample(CANVASES, self.rng.choice([1, 1, 2])),
                    dependencies,
                    operation_type=self.rng.choice(
                        ["shape.update", "shape.update", "asset.upload"]
                    ),
                    protocol_version=self.rng.choice([1, 1, 1, 2]),
                )
            )
        return batch

    def message(self, known: dict[str, dict[str, Any]]) -> tuple[str, Callable[[], Awaitable[Any]]]:
        """A random message and how it is sent (client or raw handle, update or signal)."""
        rng, handle, client, ledger = self.rng, self.handle, self.durability, self.ledger_id
        name = rng.choice(
            ["enqueue"] * 4 + ["hold", "hold", "release", "release", "settle", "resume", "skip"]
            + ["configure", "configure"]
        )  # fmt: skip
        raw = rng.random() < 0.4
        signal = rng.random() < 0.3
        if name == "enqueue":
            batch = self._intents()

            async def enqueue() -> Any:
                if signal:
                    await handle.signal("enqueue", {"operations": batch})
                elif raw:
                    await handle.execute_update("enqueue", {"operations": batch})
                else:
                    await client.enqueue(ledger, batch)
                self.enqueued.extend(i["id"] for i in batch)
                self.participants.update({i["id"]: i["participants"] for i in batch})

            return name, enqueue
        if name == "hold":
            self.next_token += 1
            own = f"t-{self.next_token}" if rng.random() < 0.5 else None

            async def hold() -> Any:
                payload = {} if own is None else {"token": own}
                if raw:
                    token = await handle.execute_update("hold", payload, result_type=str)
                else:
                    token = await client.hold(ledger, own)
                self.tokens.add(token)

            return name, hold
        if name == "release":
            token = rng.choice(sorted(self.tokens)) if self.tokens else "never-held"

            async def release() -> Any:
                if signal:
                    await handle.signal("release", {"token": token})
                elif raw:
                    await handle.execute_update("release", {"token": token})
                else:
                    await client.release(ledger, token)
                self.tokens.discard(token)

            return name, release
        if name == "settle":
            return name, lambda: client.settle(ledger)
        if name == "resume":
            if signal:
                return name, lambda: handle.signal("resume", {})
            return name, lambda: client.resume(ledger)
        if name == "skip":
            stuck = [o for o, v in known.items() if v["phase"] in ("pending", "blocked")]
            target = rng.choice(sorted(stuck)) if stuck else "op-unknown"
            if signal:
                return name, lambda: handle.signal("skip", {"operation_id": target})
            return name, lambda: client.skip(ledger, target, "given up by the test")
        changes: dict[str, Any] = rng.choice(
            [{"concurrency": rng.randint(1, 2)},
             {"supported_protocol_versions": rng.choice([[1], [1, 2]])},
             {"lanes": {"asset.upload": rng.randint(1, 2)}},
             {"retry": {"initial_interval_ms": rng.randint(20, 200), "maximum_interval_ms": 500}}]
        )  # fmt: skip
        self.max_concurrency = max(self.max_concurrency, changes.get("concurrency", 0))
        self.max_upload_lane = max(
            self.max_upload_lane, changes.get("lanes", {}).get("asset.upload", 0)
        )
        if signal:
            return name, lambda: handle.signal("configure", changes)
        if raw:
            return name, lambda: handle.execute_update("configure", changes)
        return name, lambda: client.configure_ledger(ledger, changes)


def check_snapshot(snap: dict[str, Any]) -> list[str]:
    """What one snapshot must show: one claimant per canvas, each unresolved request holding
    its canvases, hold tokens distinct and `held` agreeing with them."""
    found: list[str] = []
    owner: dict[str, str] = {}
    for request in snap["requests"]:
        if request["phase"] == "resolved":
            continue
        for canvas in request["canvas_ids"]:
            if owner.setdefault(canvas, request["id"]) != request["id"]:
                found.append(f"{canvas} claimed by {owner[canvas]} and {request['id']}")
            if snap["claims"].get(canvas) != request["id"]:
                found.append(f"{request['id']} does not hold its canvas {canvas}")
    tokens = snap["hold_tokens"]
    if len(tokens) != len(set(tokens)) or snap["held"] != bool(tokens):
        found.append(f"hold tokens {tokens} with held={snap['held']}")
    return found


def check_far_side(far: FarSide, driver: Driver, skipped: set[str]) -> list[str]:
    """The far side's own records: bodies and keys, canvases, attempts at once."""
    found = list(far.violations)
    for canvas, holder, other in far.conflicts:
        holder_ops = {c.operation_id for c in far.calls if c.target == holder}
        if not holder_ops <= skipped:
            found.append(f"canvas {canvas} open at the far side for {holder} and {other}")
    if far.max_in_progress > driver.max_concurrency:
        found.append(
            f"{far.max_in_progress} attempts at once > concurrency {driver.max_concurrency}"
        )
    if far.max_by_type["asset.upload"] > driver.max_upload_lane:
        found.append(
            f"{far.max_by_type['asset.upload']} asset.upload at once > its lane, e.g. "
            + " and ".join(map(str, first_overlap(far, "asset.upload")))
        )
    return found


def first_overlap(far: FarSide, kind: str) -> list[Call]:
    """Two attempts of `kind` (compile, submit or query) at the far side at once, the first
    found: what a broken bound is shown with (their requests, workflow runs and times)."""
    attempts = [c for c in far.calls if c.activity != "complete" and c.kind == kind]
    for index, first in enumerate(attempts):
        for second in attempts[index + 1 :]:
            if second.started < (first.ended or float("inf")) and first.started < (
                second.ended or float("inf")
            ):
                return [first, second]
    return []


@dataclass
class Admission:
    """A start of work in the ledger's history: compile scheduled, request started, retry
    granted; `order` is its place across the ledger's runs."""

    order: tuple[int, int]
    at: float
    kind: str
    target: str


async def ledger_histories(client: Client, handle: WorkflowHandle[Any, Any]) -> list[Any]:
    """Every run of the ledger, first to last (following continue-as-new)."""
    runs = []
    run_id = handle.first_execution_run_id or handle.result_run_id
    while run_id:
        history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
        runs.append(history)
        run_id = next(
            (
                e.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                for e in history.events
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
            ),
            None,
        )
    return runs


async def _decoded(client: Client, payloads: Any) -> list[Any]:
    return list(await client.data_converter.decode(list(payloads.payloads))) if payloads else []


async def check_histories(
    client: Client, handle: WorkflowHandle[Any, Any], far: FarSide
) -> tuple[list[str], int]:
    """L12 and L11 in event order over the ledger's runs, the far side's calls against the
    hold windows, and no failed workflow task in the ledger's or its requests' runs. Returns
    the violations and how many runs the ledger had."""
    found: list[str] = []
    runs = await ledger_histories(client, handle)
    tolerated: list[str] = []
    held: set[str] = set()
    hold_windows: list[tuple[tuple[int, int], float, float | None]] = []  # order, from, to
    supported = {1, 2}
    stopped = False
    protocol: dict[str, Any] = {}
    admissions: list[Admission] = []
    children: list[tuple[str, str]] = []
    pending_updates: dict[str, tuple[str, list[Any]]] = {}

    def take_hold(token: str, order: tuple[int, int], at: float) -> None:
        if not held:
            hold_windows.append((order, at, None))
        held.add(token)

    def drop_hold(token: str, at: float) -> None:
        if token in held:
            held.discard(token)
            if not held:
                start, since, _ = hold_windows[-1]
                hold_windows[-1] = (start, since, at)

    for index, history in enumerate(runs):
        for event in history.events:
            order, at = (index, event.event_id), event.event_time.ToMicroseconds() / 1e6
            kind = event.event_type
            if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                failed = event.workflow_task_failed_event_attributes
                raced = (
                    failed.cause
                    == WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND
                )
                (tolerated if raced else found).append(
                    f"ledger run {index}: workflow task failed at event {event.event_id}: "
                    f"{failed.failure.message[:200]}; events "
                    + ", ".join(map(named, history.events[: event.event_id + 6]))
                    + f"; run ends {named(history.events[-1])}"
                )
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
                accepted = event.workflow_execution_update_accepted_event_attributes
                name = accepted.accepted_request.input.name
                args = await _decoded(client, accepted.accepted_request.input.args)
                pending_updates[accepted.accepted_request.meta.update_id] = (name, args)
                if name == "release":
                    drop_hold(args[0]["token"], at)
                elif name == "stop":
                    stopped = True
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
                completed = event.workflow_execution_update_completed_event_attributes
                name, args = pending_updates.pop(completed.meta.update_id, ("", []))
                if completed.outcome.HasField("failure"):
                    continue
                result = await _decoded(client, completed.outcome.success)
                if name == "hold":
                    take_hold(result[0], order, at)
                elif name == "configure":
                    supported = set(result[0]["supported_protocol_versions"])
            elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                signaled = event.workflow_execution_signaled_event_attributes
                args = await _decoded(client, signaled.input)
                if signaled.signal_name == "release" and isinstance(args[0], dict):
                    drop_hold(str(args[0].get("token")), at)
                elif signaled.signal_name == "configure" and "supported_protocol_versions" in (
                    args[0] if isinstance(args[0], dict) else {}
                ):
                    supported = set(args[0]["supported_protocol_versions"])
            elif kind == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
                started = event.start_child_workflow_execution_initiated_event_attributes
                child_input = (await _decoded(client, started.input))[0]
                request = child_input["request"]
                protocol[request["id"]] = request.get("protocol_version")
                if child_input.get("final_query"):
                    continue
                admissions.append(Admission(order, at, "launch", request["id"]))
            elif kind == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
                execution = event.child_workflow_execution_started_event_attributes
                children.append(
                    (execution.workflow_execution.workflow_id, execution.workflow_execution.run_id)
                )
            elif kind == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
                signal = event.signal_external_workflow_execution_initiated_event_attributes
                if signal.signal_name == "grant":
                    request_id = signal.workflow_execution.workflow_id.rsplit(":", 1)[-1]
                    admissions.append(Admission(order, at, "grant", request_id))
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                scheduled = event.activity_task_scheduled_event_attributes
                if scheduled.activity_type.name == "compile":
                    op = (await _decoded(client, scheduled.input))[0]
                    admissions.append(Admission(order, at, "compile", str(op["id"])))
            else:
                continue
            if admissions and admissions[-1].order == order:
                latest = admissions[-1]
                if held or stopped:
                    state = f"held by {sorted(held)}" if held else "stopped"
                    found.append(f"L12: {latest.kind} of {latest.target} while {state} ({order})")
                if latest.kind != "compile" and protocol.get(latest.target) not in supported:
                    found.append(
                        f"L11: {latest.kind} of {latest.target}, protocol "
                        f"{protocol.get(latest.target)!r}, supported {sorted(supported)}"
                    )
    # A far-side call inside a hold must belong to an attempt admitted before that hold.
    for call in far.calls:
        if call.activity == "complete":
            continue
        for start, since, until in hold_windows:
            if not (since < call.started and (until is None or call.started < until)):
                continue
            earlier = [a for a in admissions if a.target == call.target and a.at <= call.started]
            if not earlier or earlier[-1].order > start:
                found.append(
                    f"{call.activity} of {call.target} during a hold, not admitted before it"
                )
    for workflow_id, run_id in children:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        if any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED for e in history.events):
            found.append(f"{workflow_id}: a workflow task failed")
    if tolerated:
        print(f"known close races (UnhandledCommand), tolerated: {tolerated}")
    return found, len(runs)


def check_final_result(result: dict[str, Any], far: FarSide) -> list[str]:
    """3.10 at stop: nothing in flight, every request the far side received and not resolved
    listed in `unknown` with the body it was sent."""
    found: list[str] = []
    unknown = {e["request_id"]: e for e in result.get("unknown", [])}
    requests = {r["id"]: r for r in result["requests"]}
    for request in requests.values():
        if request["phase"] == "in_flight":
            found.append(f"{request['id']} still in flight after stop")
    for op in result["operations"]:
        request = requests.get(op["request_id"]) or {}
        never_sent = request.get("phase") == "frozen" and op["request_id"] not in far.bodies
        if op["phase"] == "dispatched" and op["request_id"] not in unknown and not never_sent:
            found.append(f"{op['id']} dispatched at stop, its request {request} not listed")
    for request_id, body in far.bodies.items():
        request = requests.get(request_id)
        if request is None or request["phase"] == "resolved":
            continue
        entry = unknown.get(request_id)
        if entry is None:
            found.append(f"{request_id} ({request['phase']}) received, not listed at stop")
        elif json.dumps(entry.get("request"), sort_keys=True) != body:
            found.append(f"{request_id} listed at stop with another body than it was sent")
    return found


def _busy(snap: dict[str, Any], participants: dict[str, list[str]]) -> list[dict[str, Any]]:
    """What is not at an end yet: requests in flight, and operations neither resolved,
    blocked, waiting for another, nor waiting for a canvas a blocked request holds (L5)."""
    phases = {r["id"]: r["phase"] for r in snap["requests"]}
    stuck = {c for c, r in snap["claims"].items() if phases.get(r) == "blocked"}
    return [
        o for o in snap["operations"]
        if o["phase"] not in ("resolved", "blocked") and not o["waiting_for"]
        and not (o["phase"] == "pending" and stuck & set(participants.get(o["id"], [])))
    ] + [r for r in snap["requests"] if r["phase"] == "in_flight"]  # fmt: skip


async def until_quiet(
    handle: WorkflowHandle[Any, Any], participants: dict[str, list[str]], seed: int
) -> dict[str, Any]:
    """The snapshot once every operation is at an end (resolved, blocked, or waiting for one
    that is); fails naming what still moves after SETTLE_TIMEOUT_S."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        snap = await snapshot(handle)
        busy = _busy(snap, participants)
        if not busy:
            return snap
        if time.monotonic() > deadline:
            shown = {k: snap[k] for k in ("held", "hold_tokens", "counts", "claims")}
            raise AssertionError(f"seed {seed}: never quiet: {busy} in {shown}")
        await asyncio.sleep(0.3)


async def _send(name: str, send: Callable[[], Awaitable[Any]], driver: Driver) -> None:
    try:
        await asyncio.wait_for(send(), SETTLE_TIMEOUT_S)
    except (WorkflowUpdateFailedError, RejectedError) as refused:
        # Refusals a random message may earn (a skip of an operation that moved on, a
        # release of a token another message released); each named by the ledger.
        driver.refused[f"{name}: {type(refused).__name__}"] += 1


@pytest.mark.parametrize("seed", SEEDS)
async def test_random_messages_through_the_sdk_keep_the_ledger_promises(
    client: Client, task_queue: str, unique: str, seed: int
) -> None:
    rng = random.Random(seed)
    far = FarSide(seed)
    workers = Workers(client, task_queue, far)
    ledger_id = f"sdk-sim-{unique}"
    durability = DurabilityClient(client, task_queue, update_timeout=None, worker_grace=None)
    restart_steps = set(rng.sample(range(2, STEPS), 2))
    await workers.start()
    try:
        handle = await client.start_workflow(
            "OperationLedger",
            {
                "concurrency": 2,
                "supported_protocol_versions": [1, 2],
                "complete_activity": "complete",
                "retry": {"initial_interval_ms": 50, "maximum_interval_ms": 400},
                "continue_as_new_after_events": rng.choice([40, 60]),
            },
            id=f"ledger:{ledger_id}",
            task_queue=task_queue,
        )
        driver = Driver(rng, ledger_id, handle, durability)
        violations: list[str] = []
        known: dict[str, dict[str, Any]] = {}
        for step in range(STEPS):
            burst = [driver.message(known) for _ in range(rng.randint(1, 3))]
            await asyncio.gather(*(_send(name, send, driver) for name, send in burst))
            if step in restart_steps:
                await workers.restart()
            await asyncio.sleep(rng.random() * 0.4)
            snap = await snapshot(handle)
            known = operations(snap)
            violations += [f"step {step}: {v}" for v in check_snapshot(snap)]
            assert not violations, f"seed {seed}: {violations}"
        # Released and resumed, the ledger runs every operation to an end: resolved,
        # blocked (and what depends on a blocked one waits for it).
        for token in sorted(driver.tokens):
            await _send("release", partial(durability.release, ledger_id, token), driver)
        await _send("resume", lambda: durability.resume(ledger_id), driver)

        snap = await until_quiet(handle, driver.participants, seed)
        # More work, then stop while it is in flight.
        batch = driver._intents()
        await durability.enqueue(ledger_id, batch)
        await asyncio.sleep(rng.random() * 0.5)
        result = await asyncio.wait_for(durability.stop(ledger_id), SETTLE_TIMEOUT_S)
        await asyncio.wait_for(handle.result(), SETTLE_TIMEOUT_S)
        skipped = {o["id"] for o in result["operations"] if o["outcome"] == "skipped"}
        violations += check_final_result(result, far)
        violations += check_far_side(far, driver, skipped)
        history_violations, runs = await check_histories(client, handle, far)
        violations += history_violations
        assert not violations, f"seed {seed} ({SEED_ENV}={seed} to replay): {violations}"
        # The run reached what it is for: continue-as-new, restarts, holds, calls.
        assert runs > 1, f"seed {seed}: the ledger never continued as new"
        assert workers.restarts == 2 and far.calls, f"seed {seed}"
        print(
            f"seed {seed}: {len(far.calls)} calls, {runs} runs, {far.max_in_progress} at once "
            f"{dict(far.max_by_type)}, refused {dict(driver.refused)}, "
            f"final {result['counts']}"
        )
    finally:
        await workers.stop()
