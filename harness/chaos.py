"""The chaos run: a fleet of workers killed and restarted, a dev server restarted once,
schedules and ledgers driven through it all, then every record checked (never timings)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import Client, WorkflowExecutionStatus

from durability.client import DurabilityClient
from durability.connect import connect
from harness.bounds import bounded
from harness.fleet import FLEET_START_GRACE, WorkerFleet
from harness.recorder import Recorder
from harness.server import DevServer

INTERRUPTED = "ScheduledRunInterruptedError"

T = TypeVar("T")
Log = Callable[[str], None]


def _quiet(_message: str) -> None:
    pass


@dataclass
class ChaosConfig:
    """One chaos run. The suite uses the defaults; `python -m bench.chaos` a longer one."""

    schedules: int = 8
    operations: int = 100
    ledgers: int = 4
    canvases_per_ledger: int = 3
    workers: int = 3
    window_s: float = 40.0
    kill_every_s: tuple[float, float] = (3.0, 5.0)
    restart_after_s: tuple[float, float] = (0.3, 1.0)
    server_restart_at: float = 0.5  # fraction of the window
    # Settling ends when nothing is left, or after this many seconds without progress (fewer
    # runs, children or operations left), or at `settle_cap_s` (default 3 x this) in all.
    settle_timeout_s: float = 90.0
    settle_cap_s: float | None = None
    # How long after the window the harness waits for the last enqueues and pokes: what is
    # still unanswered then is a `harness_timeouts` finding, never waited out.
    feed_grace_s: float = 60.0
    run_heartbeat_timeout_ms: int = 2000
    slow_run_rate: float = 0.5  # share of runs the recorder answers after 0.3-1.5 s
    ledger_sleep_s: tuple[float, float] = (0.2, 1.0)  # each submit/query stays in flight
    # After every restart of a worker, at once: `trigger` this many schedules and `resume`
    # this many ledgers (the workflows it ran are picked up by cold workers).
    poke_schedules: int = 3
    poke_ledgers: int = 2
    seed: int = 0


@dataclass
class ChaosReport:
    config: ChaosConfig
    kills: int = 0
    server_restarts: int = 0
    unexpected_worker_exits: int = 0
    runs: int = 0
    run_posts: int = 0
    outcome_posts: int = 0
    completed: int = 0
    interrupted: int = 0
    killed_mid_run: int = 0
    killed_mid_run_names: Counter[str] = field(default_factory=Counter)
    dead_lettered: int = 0
    ops: int = 0
    requests: int = 0
    submits: int = 0
    queries: int = 0
    ledger_calls_cut: int = 0
    same_request_overlaps: int = 0
    updates_after_restarts: int = 0
    workflow_executions: int = 0
    # WORKFLOW_TASK_TIMED_OUT and ACTIVITY_TASK_TIMED_OUT events by timeout type: a worker
    # killed holding the task, or one too slow to answer in time (a loaded machine).
    task_timeouts: Counter[str] = field(default_factory=Counter)
    elapsed_s: float = 0.0
    violations: dict[str, list[str]] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        return {name: len(found) for name, found in self.violations.items()}

    def summary_line(self) -> str:
        figures = [
            f"kills={self.kills}",
            f"server_restarts={self.server_restarts}",
            f"worker_exits={self.unexpected_worker_exits}",
            f"runs={self.runs}",
            f"interrupted={self.interrupted}",
            f"killed_mid_run={self.killed_mid_run}",
            f"dead_lettered={self.dead_lettered}",
            f"ops={self.ops}",
            f"requests={self.requests}",
            f"ledger_calls_cut={self.ledger_calls_cut}",
            f"updates_after_restarts={self.updates_after_restarts}",
            f"executions_checked={self.workflow_executions}",
            f"task_timeouts={sum(self.task_timeouts.values())}",
        ]
        figures += [f"{name}={count}" for name, count in self.counts().items()]
        return "chaos: " + " ".join(figures)

    def failures(self) -> str:
        lines = []
        for name, found in self.violations.items():
            if found:
                lines.append(f"{name} ({len(found)}): " + "; ".join(found[:5]))
        return "\n".join(lines)


class GaveUp(RuntimeError):
    """A call `retrying` kept retrying until its time was up."""


async def retrying(
    call: Callable[[], Awaitable[T]],
    what: str,
    timeout: float = 180,
    attempt_s: float = 60,
    log: Log = _quiet,
) -> T:
    """Retry a client call through server restarts and dead workers; each attempt is bounded
    and so is the whole (GaveUp once `timeout` has passed)."""
    deadline = time.monotonic() + timeout
    attempt = 0
    while True:
        attempt += 1
        left = deadline - time.monotonic()
        try:
            return await bounded(call(), max(1.0, min(attempt_s, left)), what)
        except Exception as error:
            if time.monotonic() >= deadline:
                raise GaveUp(f"{what} kept failing for {timeout:.0f}s: {error!r:.300}") from error
            if attempt == 1 or attempt % 10 == 0:
                log(f"{what}: attempt {attempt} failed ({error!r:.160}); retrying")
            await asyncio.sleep(0.5)


async def _listed(temporal: Client, query: str) -> list[Any]:
    return [execution async for execution in temporal.list_workflows(query)]


def ledger_plan(config: ChaosConfig, prefix: str, rng: random.Random) -> dict[str, list[Any]]:
    """Operations per ledger: canvas updates over a few canvases (each on 1-2 canvases),
    some participant-free uploads, and dependencies on earlier operations of the ledger."""
    plan: dict[str, list[Any]] = {f"{prefix}-l{j}": [] for j in range(config.ledgers)}
    ledger_ids = list(plan)
    for number in range(config.operations):
        ledger_id = ledger_ids[number % len(ledger_ids)]
        earlier = [op["id"] for op in plan[ledger_id]]
        canvases = [f"{ledger_id}-c{k}" for k in range(config.canvases_per_ledger)]
        upload = rng.random() < 0.1
        dependencies = (
            rng.sample(earlier, k=min(len(earlier), rng.choice([1, 1, 2])))
            if earlier and rng.random() < 0.3
            else []
        )
        plan[ledger_id].append(
            {
                "id": f"op-{number}",
                "operation_type": "asset.upload" if upload else "shape.update",
                "participants": [] if upload else rng.sample(canvases, k=rng.choice([1, 1, 2])),
                "dependencies": dependencies,
                "payload": {"n": number, "text": uuid.uuid4().hex},
            }
        )
    return plan


async def run_chaos(config: ChaosConfig, directory: Path, log: Log = _quiet) -> ChaosReport:
    """Start the server, the recorder and the fleet; tick schedules and feed ledgers while
    killing workers and restarting the server once; settle; check the records."""
    began = time.monotonic()
    rng = random.Random(config.seed)
    report = ChaosReport(config=config)
    recorder = Recorder(
        seed=config.seed,
        slow_run_rate=config.slow_run_rate,
        ledger_sleep_s=config.ledger_sleep_s,
    )
    recorder.start()
    server = DevServer(directory)
    prefix = f"chaos{uuid.uuid4().hex[:6]}"
    queue = f"{prefix}-tq"
    fleet: WorkerFleet | None = None
    feeding: asyncio.Task[None] | None = None
    chaos: asyncio.Task[None] | None = None
    timeouts: list[str] = []  # what the harness waited for in vain (`harness_timeouts`)
    try:
        await server.start()
        log(f"dev server on {server.address} ({server.db}); recorder on {recorder.base_url}")
        fleet = WorkerFleet(
            server.address,
            queue,
            config.workers,
            directory,
            {"DURABILITY_LEDGER_URL": recorder.base_url},
        )
        fleet.start()
        temporal = await connect({"TEMPORAL_ADDRESS": server.address})
        durability = DurabilityClient(temporal, queue, worker_grace=FLEET_START_GRACE)
        object_ids = [f"{prefix}-s{i}" for i in range(config.schedules)]
        schedule_options = {
            "run_activity": "run_webhook",
            "outcome_activity": "on_outcome_webhook",
            "run_heartbeat_timeout_ms": config.run_heartbeat_timeout_ms,
            "run_timeout_ms": 60_000,
            "outcome_timeout_ms": 5_000,
            "outcome_retries": {
                "max_attempts": 10,
                "initial_interval_ms": 200,
                "maximum_interval_ms": 2_000,
            },
        }
        params = {"url": f"{recorder.base_url}/run", "outcome_url": f"{recorder.base_url}/outcome"}
        await asyncio.gather(
            *(
                retrying(
                    lambda object_id=object_id: durability.set_schedule(  # type: ignore[misc]
                        object_id, "@every 1s", 1, params=params, options=schedule_options
                    ),
                    f"set {object_id}",
                    log=log,
                )
                for object_id in object_ids
            )
        )
        log(f"{config.schedules} schedules ticking @every 1s on {config.workers} workers")
        plan = ledger_plan(config, prefix, rng)
        ledger_options = {
            "concurrency": 3,
            "submit_activity": "http_submit",
            "query_activity": "http_query",
            "retry": {"initial_interval_ms": 200, "maximum_interval_ms": 2_000},
        }
        stop_chaos = asyncio.Event()
        feeder = Feeder(durability, plan, ledger_options, config.window_s * 0.85, log)
        feeding = asyncio.create_task(feeder.run())
        pokes = Pokes(temporal, object_ids, list(plan), config, rng, log)
        chaos = asyncio.create_task(
            _chaos(config, rng, fleet, server, stop_chaos, log, after_revive=pokes.start)
        )
        await asyncio.sleep(config.window_s)
        stop_chaos.set()
        window_over = time.monotonic()
        log(
            f"window over: {fleet.kills} kills, {server.restarts} server restart(s), "
            f"{feeder.fed}/{feeder.total} enqueue batches answered, "
            f"{pokes.unanswered()} poke(s) unanswered"
        )
        # Each wait below is bounded: what is not done in time is a finding, not a stall.
        await _finish(chaos, 120, "the chaos loop's last kill or server restart", timeouts, log)
        fleet.revive()
        await _finish(pokes.finish(), 120, "the pokes", timeouts, log)
        report.updates_after_restarts = pokes.sent
        if not feeding.done():
            log(f"waiting up to {config.feed_grace_s:.0f}s for the last enqueues")
        feed_left = window_over + config.feed_grace_s - time.monotonic()
        await _finish(feeding, max(1.0, feed_left), "the ledger feed", timeouts, log)
        if any(feeder.unfed.values()):
            timeouts.append(f"feed: {feeder.describe_unfed()}")
        log(f"feed done ({feeder.fed}/{feeder.total} batches); cancelling the schedules")
        await asyncio.gather(
            *(
                _or_finding(
                    retrying(
                        lambda object_id=object_id: durability.cancel_schedule(  # type: ignore[misc]
                            object_id
                        ),
                        f"cancel {object_id}",
                        log=log,
                    ),
                    timeouts,
                )
                for object_id in object_ids
            )
        )
        log("settling")
        settled = await _settle(durability, object_ids, list(plan), config, fleet, log, timeouts)
        log("checking what the recorder and Temporal recorded")
        await _check(
            report, recorder, temporal, durability, prefix, object_ids, plan, settled, timeouts
        )
        report.violations["updates_refused"] = pokes.refused + feeder.refused
        log("reading every history for failed workflow tasks")
        report.violations["failed_workflow_tasks"] = await _failed_workflow_tasks(
            temporal, report, timeouts
        )
        report.violations["harness_timeouts"] = timeouts
        report.kills = fleet.kills
        report.unexpected_worker_exits = fleet.unexpected_exits
        report.server_restarts = server.restarts
    finally:
        for task in (feeding, chaos):
            if task is not None and not task.done():
                task.cancel()
        if fleet is not None:
            await fleet.stop()
        await server.close()
        recorder.close()
    report.elapsed_s = time.monotonic() - began
    return report


async def _finish(
    call: Awaitable[Any], seconds: float, what: str, findings: list[str], log: Log
) -> None:
    """Wait for `call` at most `seconds`; a timeout or an error is added to `findings`."""
    try:
        await bounded(call, seconds, what)
    except Exception as error:
        findings.append(f"{what}: {error!r:.300}")
        log(f"FINDING {what}: {error!r:.300}")


async def _or_finding(call: Awaitable[T], findings: list[str]) -> T | None:
    """`await call`; when it gives up, its reason is added to `findings` (None returned)."""
    try:
        return await call
    except GaveUp as error:
        findings.append(str(error))
        return None


class Feeder:
    """Enqueue the planned operations in batches of 5, spread over `over_s` seconds. Each
    ledger is fed by its own task, in the plan's order (a batch may depend on an earlier one
    of its ledger), so that one slow ledger delays only its own batches."""

    def __init__(
        self,
        durability: DurabilityClient,
        plan: dict[str, list[Any]],
        options: dict[str, Any],
        over_s: float,
        log: Log,
    ) -> None:
        batches = [
            (ledger_id, ops[start : start + 5])
            for ledger_id, ops in plan.items()
            for start in range(0, len(ops), 5)
        ]
        batches.sort(key=lambda batch: int(batch[1][0]["id"].removeprefix("op-")))
        pause = over_s / max(1, len(batches))
        self._due: dict[str, list[tuple[float, list[Any]]]] = {ledger: [] for ledger in plan}
        for index, (ledger_id, ops) in enumerate(batches):
            self._due[ledger_id].append((index * pause, ops))
        self._durability = durability
        self._options = options
        self._log = log
        self.total = len(batches)
        self.fed = 0
        self.unfed: dict[str, list[str]] = {}
        self.refused: list[str] = []

    async def run(self) -> None:
        began = time.monotonic()
        await asyncio.gather(*(self._feed(ledger, began) for ledger in self._due))

    async def _feed(self, ledger_id: str, began: float) -> None:
        due = self._due[ledger_id]
        self.unfed[ledger_id] = [op["id"] for _, ops in due for op in ops]
        for at, ops in due:
            await asyncio.sleep(max(0.0, began + at - time.monotonic()))
            try:
                await retrying(
                    lambda ops=ops: self._durability.enqueue(  # type: ignore[misc]
                        ledger_id, ops, options=self._options
                    ),
                    f"enqueue {ops[0]['id']}.. into {ledger_id}",
                    timeout=240,
                    log=self._log,
                )
            except GaveUp as error:
                self.refused.append(str(error))
            else:
                self.fed += 1
                if self.fed % 20 == 0 or self.fed == self.total:
                    self._log(f"fed {self.fed}/{self.total} enqueue batches")
            del self.unfed[ledger_id][: len(ops)]

    def describe_unfed(self) -> str:
        left = {ledger: ids for ledger, ids in self.unfed.items() if ids}
        count = sum(len(ids) for ids in left.values())
        return f"{count} operation(s) not enqueued in time, " + ", ".join(
            f"{ledger} from {ids[0]}" for ledger, ids in sorted(left.items())
        )


async def _chaos(
    config: ChaosConfig,
    rng: random.Random,
    fleet: WorkerFleet,
    server: DevServer,
    stop: asyncio.Event,
    log: Log,
    after_revive: Callable[[], None] = lambda: None,
) -> None:
    """SIGKILL a random live worker every few seconds and start it again (then call
    `after_revive` at once); restart the dev server once, in the middle of the window."""
    began = time.monotonic()
    restart_at = began + config.window_s * config.server_restart_at
    restarted = False
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), rng.uniform(*config.kill_every_s))
        if stop.is_set():
            break
        alive = fleet.alive()
        if alive:
            victim = rng.choice(alive)
            fleet.kill(victim)
            log(f"t={time.monotonic() - began:5.1f}s SIGKILL worker {victim}")
            await asyncio.sleep(rng.uniform(*config.restart_after_s))
        fleet.revive()
        after_revive()
        if not restarted and time.monotonic() >= restart_at:
            restarted = True
            log(f"t={time.monotonic() - began:5.1f}s restarting the dev server")
            await server.restart()
            log(f"t={time.monotonic() - began:5.1f}s dev server back")


class Pokes:
    """Updates sent at once after each worker restart: `trigger` on a few schedules and
    `resume` on a few ledgers. An update that is refused, or never answered within a minute
    of retries (through the server restart), is a violation."""

    def __init__(
        self,
        temporal: Client,
        object_ids: list[str],
        ledger_ids: list[str],
        config: ChaosConfig,
        rng: random.Random,
        log: Log,
    ) -> None:
        self._temporal = temporal
        self._object_ids = object_ids
        self._ledger_ids = ledger_ids
        self._config = config
        self._rng = rng
        self._log = log
        self._tasks: list[asyncio.Task[None]] = []
        self.sent = 0
        self.refused: list[str] = []

    def start(self) -> None:
        targets = [
            (f"schedule:{o}", "trigger")
            for o in self._rng.sample(
                self._object_ids, min(self._config.poke_schedules, len(self._object_ids))
            )
        ] + [
            (f"ledger:{ledger}", "resume")
            for ledger in self._rng.sample(
                self._ledger_ids, min(self._config.poke_ledgers, len(self._ledger_ids))
            )
        ]
        for workflow_id, update in targets:
            self._tasks.append(asyncio.create_task(self._send(workflow_id, update)))

    async def _send(self, workflow_id: str, update: str) -> None:
        handle = self._temporal.get_workflow_handle(workflow_id)
        self.sent += 1
        try:
            await retrying(
                lambda: handle.execute_update(update, {}),
                f"{update} {workflow_id}",
                timeout=60,
                attempt_s=20,
                log=self._log,
            )
        except RuntimeError as error:
            self.refused.append(f"{update} {workflow_id}: {error}")

    def unanswered(self) -> int:
        return sum(1 for task in self._tasks if not task.done())

    async def finish(self) -> None:
        await asyncio.gather(*self._tasks)


async def _failed_workflow_tasks(
    temporal: Client, report: ChaosReport, timeouts: list[str]
) -> list[str]:
    """Every WORKFLOW_TASK_FAILED event, of any cause, in every execution on the server (a
    history that cannot be read is added to `timeouts`)."""
    executions = await retrying(lambda: _listed(temporal, ""), "list every execution")
    report.workflow_executions = len(executions)
    limit = asyncio.Semaphore(16)
    failed: list[str] = []

    async def scan(workflow_id: str, run_id: str) -> None:
        handle = temporal.get_workflow_handle(workflow_id, run_id=run_id)

        async def history() -> list[Any]:
            return [event async for event in handle.fetch_history_events()]

        async with limit:
            events = (
                await _or_finding(
                    retrying(history, f"history of {workflow_id}", timeout=90, attempt_s=30),
                    timeouts,
                )
                or []
            )
        for index, event in enumerate(events):
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                kind = event.workflow_task_timed_out_event_attributes.timeout_type
                report.task_timeouts[f"workflow task {_timeout_name(kind)}"] += 1
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
                failure = event.activity_task_timed_out_event_attributes.failure
                kind = failure.timeout_failure_info.timeout_type
                report.task_timeouts[f"activity {_timeout_name(kind)}"] += 1
            if event.event_type != EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                continue
            attributes = event.workflow_task_failed_event_attributes
            # What raced the task: the events recorded right after the failure.
            after = ", ".join(_event_name(e) for e in events[index + 1 : index + 3])
            failed.append(
                f"{workflow_id} event {event.event_id}: cause {attributes.cause}: "
                f"{attributes.failure.message[:200]} (then: {after})"
            )

    await asyncio.gather(*(scan(e.id, e.run_id) for e in executions))
    return sorted(failed)


def _timeout_name(kind: TimeoutType.ValueType) -> str:
    return TimeoutType.Name(kind).removeprefix("TIMEOUT_TYPE_").lower().replace("_", "-")


def _event_name(event: Any) -> str:
    name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
    if event.HasField("workflow_execution_signaled_event_attributes"):
        name += f" {event.workflow_execution_signaled_event_attributes.signal_name}"
    return name


@dataclass
class Settled:
    schedules_with_runs: dict[str, int]
    ledgers: dict[str, dict[str, Any]]
    running_children: int


async def _settle(
    durability: DurabilityClient,
    object_ids: list[str],
    ledger_ids: list[str],
    config: ChaosConfig,
    fleet: WorkerFleet,
    log: Log,
    timeouts: list[str],
) -> Settled:
    """Wait until every run is acknowledged, every ScheduledRun closed and every operation
    resolved, while that progresses (see `ChaosConfig.settle_timeout_s`); whatever is left
    then is reported, and the timeout added to `timeouts`."""
    began = time.monotonic()
    cap = config.settle_cap_s if config.settle_cap_s is not None else 3 * config.settle_timeout_s
    deadline = began + config.settle_timeout_s
    state = Settled({}, {}, -1)
    fewest_left: int | None = None
    next_log = began + 15
    while True:
        fleet.revive()
        try:
            state = await bounded(
                _observe(durability, object_ids, ledger_ids), 30, "settle observation"
            )
        except Exception as error:
            log(f"settle: observation failed: {error!r:.300}")
        unresolved = sum(
            1
            for snap in state.ledgers.values()
            for op in snap.get("operations", [])
            if op.get("phase") != "resolved"
        )
        if (
            state.ledgers
            and not any(state.schedules_with_runs.values())
            and state.running_children == 0
            and unresolved == 0
        ):
            return state
        if state.ledgers:
            left = sum(state.schedules_with_runs.values()) + state.running_children + unresolved
            if fewest_left is None or left < fewest_left:
                fewest_left = left
                deadline = min(began + cap, time.monotonic() + config.settle_timeout_s)
        if time.monotonic() >= next_log:
            next_log = time.monotonic() + 15
            log(
                f"settling: runs left {sum(state.schedules_with_runs.values())}, "
                f"running children {state.running_children}, unresolved ops {unresolved}"
            )
        if time.monotonic() > deadline:
            left_over = (
                f"runs left {sum(state.schedules_with_runs.values())}, "
                f"running children {state.running_children}, unresolved ops {unresolved}"
            )
            timeouts.append(
                f"settle: {left_over} after {time.monotonic() - began:.0f}s "
                f"({config.settle_timeout_s:.0f}s without progress, or the cap of {cap:.0f}s)"
            )
            log(f"settle timed out: {left_over}")
            return state
        await asyncio.sleep(1.0)


async def _observe(
    durability: DurabilityClient, object_ids: list[str], ledger_ids: list[str]
) -> Settled:
    runs = await asyncio.gather(*(durability.list_runs(o) for o in object_ids))
    snaps = await asyncio.gather(*(durability.snapshot(ledger) for ledger in ledger_ids))
    running = 0
    async for _ in durability.temporal.list_workflows(
        "WorkflowType = 'ScheduledRun' AND ExecutionStatus = 'Running'"
    ):
        running += 1
    return Settled(
        {o: len(r) for o, r in zip(object_ids, runs, strict=True)},
        dict(zip(ledger_ids, snaps, strict=True)),
        running,
    )


async def _child_results(
    temporal: Client, prefix: str, timeouts: list[str]
) -> tuple[dict[str, tuple[WorkflowExecutionStatus | None, dict[str, Any] | None]], set[str]]:
    """Every ScheduledRun of this chaos run: key -> (status, result), and the keys whose result
    could not be read (added to `timeouts`, left out of the checks)."""
    found: dict[str, WorkflowExecutionStatus | None] = {}
    listed = await retrying(
        lambda: _listed(temporal, "WorkflowType = 'ScheduledRun'"), "list the ScheduledRuns"
    )
    for execution in listed:
        if execution.id.startswith(f"schedule-run:{prefix}-"):
            found[execution.id.removeprefix("schedule-run:")] = execution.status
    limit = asyncio.Semaphore(16)
    unreadable: set[str] = set()

    async def result(key: str) -> dict[str, Any] | None:
        if found[key] != WorkflowExecutionStatus.COMPLETED:
            return None
        async with limit:
            value: dict[str, Any] | None = await _or_finding(
                retrying(
                    lambda: temporal.get_workflow_handle(f"schedule-run:{key}").result(),
                    f"result of {key}",
                    timeout=60,
                    attempt_s=30,
                ),
                timeouts,
            )
            if value is None:
                unreadable.add(key)
            return value

    keys = sorted(found)
    values = await asyncio.gather(*(result(key) for key in keys))
    results = {key: (found[key], value) for key, value in zip(keys, values, strict=True)}
    return results, unreadable


async def _check(
    report: ChaosReport,
    recorder: Recorder,
    temporal: Client,
    durability: DurabilityClient,
    prefix: str,
    object_ids: list[str],
    plan: dict[str, list[Any]],
    settled: Settled,
    timeouts: list[str],
) -> None:
    """Compare what the HTTP server recorded with what Temporal says each run ended with (what
    could not be read is added to `timeouts`)."""
    violations: dict[str, list[str]] = {
        "runs_twice": [],
        "lost_outcomes": [],
        "outcomes_dead_lettered": [],
        "outcome_changed": [],
        "killed_not_interrupted": [],
        "runs_not_acknowledged": [],
        "canvas_two_in_flight": [],
        "canvas_sent_while_open": [],
        "request_two_bodies": [],
        "ops_unresolved": [],
        "bad_idempotency_keys": [],
    }
    children, unreadable = await _child_results(temporal, prefix, timeouts)
    # Runs whose schedule delivers the outcome (`outcome_pending`) are dead-lettered, if at
    # all, in their schedule's `dead_letters`.
    dead_letters: set[str] = set()
    for object_id in object_ids:

        def letters_of(of: str = object_id) -> Awaitable[list[dict[str, Any]]]:
            return durability.dead_letters(of)

        letters = await _or_finding(retrying(letters_of, f"dead letters of {object_id}"), timeouts)
        dead_letters.update(str(letter["idempotency_key"]) for letter in letters or [])
    with recorder.lock:
        runs = {key: list(posts) for key, posts in recorder.runs.items()}
        outcomes = {key: list(posts) for key, posts in recorder.outcomes.items()}
        violations["bad_idempotency_keys"] = list(recorder.bad_keys)
        violations["canvas_two_in_flight"] = list(recorder.canvas_overlaps)
        violations["canvas_sent_while_open"] = list(recorder.canvas_open_conflicts)
        two_bodies = [r for r, hashes in recorder.bodies.items() if len(hashes) > 1]
        violations["request_two_bodies"] = [f"{r}: {len(recorder.bodies[r])}" for r in two_bodies]
        report.submits = recorder.ledger_calls["submit"]
        report.queries = recorder.ledger_calls["query"]
        report.ledger_calls_cut = recorder.ledger_calls["cut"]
        report.same_request_overlaps = recorder.same_request_overlaps
    report.runs = len(children)
    report.run_posts = sum(len(posts) for posts in runs.values())
    report.outcome_posts = sum(len(posts) for posts in outcomes.values())

    for key, posts in runs.items():
        if len(posts) > 1:
            violations["runs_twice"].append(f"{key} ran {len(posts)} times")
    for key in sorted((set(children) | set(runs)) - unreadable):
        status, result = children.get(key, (None, None))
        delivered = [o for o in outcomes.get(key, []) if o.answered == 200]
        if status is None:
            violations["lost_outcomes"].append(f"{key}: run POSTed but no ScheduledRun found")
            continue
        if result is None:
            violations["lost_outcomes"].append(f"{key}: ScheduledRun ended {status.name}")
            continue
        outcome = result.get("outcome") or {}
        error_name = (outcome.get("error") or {}).get("name")
        if outcome.get("status") == "complete":
            report.completed += 1
        if error_name == INTERRUPTED:
            report.interrupted += 1
        undelivered = (
            key in dead_letters if result.get("outcome_pending") else not result.get("delivered")
        )
        if undelivered:
            report.dead_lettered += 1
            # With this error rate and these attempts a dead letter means a lost outcome.
            violations["outcomes_dead_lettered"].append(f"{key}: {result}")
        elif not delivered:
            violations["lost_outcomes"].append(f"{key}: delivered but no outcome POST answered")
        sent = {_canonical(o.body.get("outcome")) for o in outcomes.get(key, [])}
        if len(sent) > 1 or (sent and _canonical(outcome) not in sent):
            violations["outcome_changed"].append(f"{key}: {sorted(sent)} vs {outcome}")
        if any(post.client_gone for post in runs.get(key, [])):
            report.killed_mid_run += 1
            report.killed_mid_run_names[error_name or str(outcome.get("status"))] += 1
            if error_name != INTERRUPTED:
                violations["killed_not_interrupted"].append(f"{key}: {outcome}")
    for object_id, left in settled.schedules_with_runs.items():
        if left:
            violations["runs_not_acknowledged"].append(f"{object_id}: {left} run(s) left")
    if settled.running_children > 0:
        violations["runs_not_acknowledged"].append(
            f"{settled.running_children} ScheduledRun(s) still running"
        )
    planned = {op["id"]: ledger_id for ledger_id, ops in plan.items() for op in ops}
    report.ops = len(planned)
    seen: set[tuple[str, str]] = set()
    for ledger_id, snap in settled.ledgers.items():
        report.requests += len(snap.get("requests", []))
        for op in snap.get("operations", []):
            seen.add((ledger_id, op["id"]))
            if op.get("phase") != "resolved" or op.get("outcome") != "applied":
                violations["ops_unresolved"].append(
                    f"{ledger_id}/{op['id']}: {op.get('phase')} {op.get('outcome')} "
                    f"{op.get('blockers')} {op.get('error')}"
                )
    for op_id, ledger_id in planned.items():
        if (ledger_id, op_id) not in seen:
            violations["ops_unresolved"].append(f"{ledger_id}/{op_id}: not in the snapshot")
    report.violations = violations


def _canonical(outcome: Any) -> str:
    """An outcome as JSON without null fields (the wire form drops them)."""
    if isinstance(outcome, dict):
        outcome = {k: v for k, v in outcome.items() if v is not None}
    return json.dumps(outcome, sort_keys=True)
