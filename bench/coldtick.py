"""`python -m bench.coldtick`: what a tick costs on a worker that has the schedule cached and
on one that has evicted it, on ONE real `python worker.py` process.

It starts an in-memory dev server, a local HTTP far side (the schedule's run/outcome webhooks
and the ledger's `/requests`, each answered at once and timed), and `python -m worker` with
`DURABILITY_MAX_CACHED_WORKFLOWS` larger than everything it serves, then:

1. memory: `--idle` idle hourly schedules (after a warm-up batch): worker VmRSS delta / the
   worker's own count of cached workflows;
2. ledger, cached: `--ledgers` ledgers fed in batches so each always has work, through
   `http_submit`; requests the far side received per second and worker CPU per request;
3. schedules, cached: `--schedules` objects at `--expression` through `run_webhook`: sustained
   ticks per second (runs whose webhook arrived in the window), worker CPU ms per tick (from
   /proc), run-start lateness p50/p99 (webhook arrival minus the run's `due_at`), and the
   schedules' history length while it ticked (DescribeWorkflowExecution);
4. the worker is restarted with `--cold-cache` (much smaller than what it serves, so every
   tick replays the schedule's history so far) and 3. is measured again on the same schedules,
   whose histories are now longer; then 2. on fresh ledgers;
5. replay: the longest schedule history, cut at two or three lengths (each cut right after a
   WorkflowTaskStarted: what a cold worker is handed), and a raw awaited chain (timer -> child
   -> no-op activity, each child awaited before the next timer: the schedule's 3 workflow tasks
   a tick) recorded here, cut at the same lengths, replayed side by side in this process with
   the production Replayer configuration (harness.replay.production_replayer), best of
   `--best-of`: CPU ms per event and the ratio.

Everything is measured from outside the workflows (process CPU, webhook arrivals, event
histories, the worker's /metrics), so the scenario does not depend on how the schedule or the
ledger are built inside. It prints one markdown report (machine, load averages) and writes it
to bench/results/coldtick-<date>.md; `python -m bench.sizing <that file>` turns its "Sizing
inputs" table into the fleet sizing table of docs/sizing.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shlex
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer, Worker

from bench.activities import bench_noop
from bench.machine import describe
from bench.scale_worker import (
    InMemoryDevServer,
    bounded,
    cpu_seconds,
    log_problems,
    memory_kib,
    scrape,
    wait_for_poller,
)
from bench.stats import percentile
from bench.workflows import BenchAwaitedChain, BenchAwaitedChild
from durability.client import DurabilityClient, ledger_workflow_id, schedule_workflow_id
from durability.connect import connect, data_converter
from harness.fleet import WorkerFleet
from harness.http import JSON, QuietHandler
from harness.replay import production_replayer
from harness.server import DevServer, free_port
from workflows.schedule.models import DEFAULT_CONTINUE_AS_NEW_AFTER_EVENTS
from workflows.schedule.run import ScheduledRunWorkflow
from workflows.schedule.workflow import DurabilityScheduleWorkflow

RESULTS_DIR = Path(__file__).resolve().parent / "results"
WARMUP_S = 5.0
SAMPLE_EVERY_S = 5.0
LEDGER_OUTSTANDING = 16  # enqueued but not yet sent, per ledger: it never runs dry
LEDGER_BATCH = 8
RAW_EVENTS_PER_TICK = 14
WFT_STARTED = EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
WFT_FAILED = EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
CHILD_CLOSED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
CHILD_INITIATED = EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.coldtick", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the < 5-minute version")
    parser.add_argument("--schedules", type=int, help="ticking schedules (30; quick 20)")
    parser.add_argument("--expression", help="their cadence (@every 3s; quick @every 2s)")
    parser.add_argument(
        "--age-events", type=int, help="history to reach before the cold window (1000; quick 800)"
    )
    parser.add_argument(
        "--age-expression",
        default="@every 1s",
        help="the cadence that ages them (@every 1s: a new `set` faster than that is refused)",
    )
    parser.add_argument("--idle", type=int, help="idle schedules for memory (5,000; quick 1,000)")
    parser.add_argument("--ledgers", type=int, default=4, help="ledgers fed at once")
    parser.add_argument("--ledger-concurrency", type=int, default=4, help="each ledger's")
    parser.add_argument("--cold-cache", type=int, help="cold worker's cache (schedules / 5)")
    parser.add_argument("--warm-cache", type=int, help="cache of the warm one (default: ample)")
    parser.add_argument("--cached-s", type=float, help="cached tick window (120; quick 30)")
    parser.add_argument("--cold-s", type=float, help="cold tick window (90; quick 35)")
    parser.add_argument("--ledger-s", type=float, help="each ledger window (60; quick 20)")
    parser.add_argument("--lengths", help="replay cuts, events, comma separated")
    parser.add_argument("--best-of", type=int, help="replays per figure (7; quick 5)")
    parser.add_argument("--out", type=Path, help="results file (default bench/results/...)")
    parser.add_argument("--keep", type=Path, help="keep the server and worker logs here")
    args = parser.parse_args(argv)
    quick = args.quick
    args.schedules = args.schedules or (20 if quick else 30)
    args.expression = args.expression or ("@every 2s" if quick else "@every 3s")
    args.age_events = args.age_events or (800 if quick else 1000)
    args.cold_cache = args.cold_cache or max(4, args.schedules // 5)
    args.idle = args.idle if args.idle is not None else (1000 if quick else 5000)
    args.cached_s = args.cached_s or (30.0 if quick else 120.0)
    args.cold_s = args.cold_s or (35.0 if quick else 90.0)
    args.ledger_s = args.ledger_s or (20.0 if quick else 60.0)
    args.best_of = args.best_of or (5 if quick else 7)
    lengths = args.lengths or ("250,500,1000" if quick else "500,1000,1900")
    args.lengths = sorted({int(part) for part in lengths.split(",") if part.strip()})
    if args.warm_cache is None:
        args.warm_cache = max(1000, 2 * (args.idle + args.schedules + 50 * args.ledgers))
    return args


# --------------------------------------------------------------------------- far side


@dataclass
class Arrival:
    at: float  # wall clock, s
    body: dict[str, Any]


@dataclass
class FarSide:
    """127.0.0.1 HTTP: `POST /run` and `POST /outcome` (the schedule's webhooks), `POST
    /requests` and `GET /requests/<id>` (the ledger's far side, always `applied`). Every
    answer is immediate; runs and first submits are timed."""

    runs: list[Arrival] = field(default_factory=list)
    submits: dict[str, Arrival] = field(default_factory=dict)
    outcomes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    base_url: str = ""
    _httpd: ThreadingHTTPServer | None = None

    def start(self) -> None:
        far = self

        class Handler(QuietHandler):
            def _answer(self, body: dict[str, Any]) -> None:
                self.answer(200, body, JSON)

            def do_POST(self) -> None:
                at = time.time()
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with far.lock:
                    if self.path == "/run":
                        far.runs.append(Arrival(at, body))
                    elif self.path == "/outcome":
                        far.outcomes += 1
                    elif self.path == "/requests":
                        key = f"{body.get('ledger_id')}/{body.get('id')}"
                        far.submits.setdefault(key, Arrival(at, body))
                self._answer({"outcome": "applied"} if self.path == "/requests" else {})

            def do_GET(self) -> None:
                self._answer({"outcome": "applied"})

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def runs_between(self, start: float, end: float) -> list[Arrival]:
        with self.lock:
            return [a for a in self.runs if start <= a.at < end]

    def submits_between(self, start: float, end: float) -> list[Arrival]:
        with self.lock:
            return [a for a in self.submits.values() if start <= a.at < end]

    def sent_for(self, ledger_id: str) -> int:
        with self.lock:
            return sum(1 for a in self.submits.values() if a.body.get("ledger_id") == ledger_id)


# --------------------------------------------------------------------------- figures


@dataclass
class TickFigures:
    regime: str
    cache: int
    window_s: float = 0.0
    due_per_s: float = 0.0
    ticks: int = 0
    cpu_s: float = 0.0
    lateness_ms: list[float] = field(default_factory=list)
    history_events: list[int] = field(default_factory=list)  # sampled during the window
    events_per_tick: float = float("nan")  # schedule events stamped in the window / ticks
    rss_mib: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    tasks: dict[str, float] = field(default_factory=dict)  # worker counters over the window
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @property
    def ticks_per_s(self) -> float:
        return self.ticks / self.window_s if self.window_s else 0.0

    @property
    def cpu_ms_per_tick(self) -> float:
        return 1000 * self.cpu_s / self.ticks if self.ticks else float("nan")

    @property
    def mean_history(self) -> float:
        events = self.history_events
        return sum(events) / len(events) if events else float("nan")


@dataclass
class LedgerFigures:
    regime: str
    cache: int
    window_s: float = 0.0
    requests: int = 0
    cpu_s: float = 0.0
    history_events: list[int] = field(default_factory=list)
    failed_tasks: int = 0
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @property
    def per_s(self) -> float:
        return self.requests / self.window_s if self.window_s else 0.0

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.cpu_s / self.requests if self.requests else float("nan")


@dataclass
class ReplayRow:
    target: int
    schedule_events: int
    schedule_tasks: int
    schedule_ms: float
    raw_events: int
    raw_tasks: int
    raw_ms: float

    @property
    def schedule_per_event(self) -> float:
        return self.schedule_ms / self.schedule_events

    @property
    def raw_per_event(self) -> float:
        return self.raw_ms / self.raw_events

    @property
    def ratio(self) -> float:
        return self.schedule_per_event / self.raw_per_event


@dataclass
class Report:
    args: argparse.Namespace
    load_start: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_end: tuple[float, float, float] = (0.0, 0.0, 0.0)
    idle_count: int = 0
    idle_cached: float = 0.0
    rss_before_mib: float = 0.0
    rss_after_mib: float = 0.0
    idle_settle_s: float = 0.0
    ticks: list[TickFigures] = field(default_factory=list)
    ledgers: list[LedgerFigures] = field(default_factory=list)
    replay: list[ReplayRow] = field(default_factory=list)
    replay_note: str = ""
    aged_to: int = 0
    child_events: list[int] = field(default_factory=list)
    schedule_failed_tasks: int = 0
    worker_log: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def kib_per_cached(self) -> float:
        if not self.idle_cached:
            return float("nan")
        return (self.rss_after_mib - self.rss_before_mib) * 1024 / self.idle_cached


# --------------------------------------------------------------------------- worker


class Process:
    """One `python -m worker` (harness.fleet), its /metrics and its /proc figures."""

    def __init__(self, address: str, queue: str, directory: Path, env: dict[str, str]) -> None:
        self.metrics_port = free_port()
        env = {**env, "DURABILITY_METRICS_PORT": str(self.metrics_port)}
        self.fleet = WorkerFleet(address, queue, 1, directory, env)
        self.pid = 0

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    async def start(self, client: Client) -> None:
        self.fleet.start()
        process = self.fleet.slots[0].process
        assert process is not None
        self.pid = process.pid
        await wait_for_poller(client, self.fleet.task_queue)
        await asyncio.sleep(2)

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def rss_mib(self) -> float:
        return memory_kib(self.pid)[0] / 1024

    async def metrics(self) -> dict[str, float]:
        found = await asyncio.to_thread(scrape, self.metrics_url)
        found.update(await asyncio.to_thread(scrape_cache_hits, self.metrics_url))
        return found

    async def stop(self) -> list[str]:
        await self.fleet.stop()
        return log_problems(self.fleet.log_path(0))


def scrape_cache_hits(url: str) -> dict[str, float]:
    """The worker's sticky cache hits and misses (workflow tasks that found their workflow
    cached / that had to replay from the history after a sticky task)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return {}
    found: dict[str, float] = {"cache_hit": 0.0, "cache_miss": 0.0}
    for line in text.splitlines():
        for name, prefix in (("cache_hit", "temporal_sticky_cache_hit"),
                             ("cache_miss", "temporal_sticky_cache_miss")):  # fmt: skip
            if line.startswith(prefix) and not line.startswith("#"):
                found[name] += float(line.rpartition(" ")[2])
    return found


# --------------------------------------------------------------------------- phases


async def history_lengths(client: Client, workflow_ids: list[str]) -> list[int]:
    async def one(workflow_id: str) -> int:
        described = await client.get_workflow_handle(workflow_id).describe()
        return int(described.raw_description.workflow_execution_info.history_length)

    return await bounded([one(w) for w in workflow_ids], 16)


async def memory_phase(
    durability: DurabilityClient, worker: Process, report: Report, log: Any
) -> None:
    """Idle hourly schedules: VmRSS delta per cached workflow (after a warm-up batch, so the
    code paths a first schedule warms are not charged to the rest)."""
    minute = (time.gmtime().tm_min + 30) % 60
    expression = f"{minute} * * * *"
    prefix = f"idle-{uuid.uuid4().hex[:6]}"

    async def start(ids: list[str]) -> None:
        await bounded([durability.signal_set_schedule(i, expression, 1) for i in ids], 64)

    async def settle(target: float, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        cached = 0.0
        while time.monotonic() < deadline:
            cached = (await worker.metrics()).get("cached", 0.0)
            if cached >= target:
                break
            await asyncio.sleep(1)
        return cached

    warm = [f"{prefix}-w{i}" for i in range(20)]
    await start(warm)
    base = await settle(len(warm), 60)
    await asyncio.sleep(2)
    report.rss_before_mib = worker.rss_mib()
    count = report.args.idle
    ids = [f"{prefix}-{i}" for i in range(count)]
    t0 = time.monotonic()
    await start(ids)
    cached = await settle(base + count, 600)
    report.idle_settle_s = time.monotonic() - t0
    await asyncio.sleep(5)
    report.rss_after_mib = worker.rss_mib()
    report.idle_count = count
    report.idle_cached = cached - base
    log(
        f"memory: {count} idle schedules, {report.idle_cached:.0f} cached, VmRSS "
        f"{report.rss_before_mib:.0f} -> {report.rss_after_mib:.0f} MiB "
        f"({report.kib_per_cached:.1f} KiB each)"
    )


async def age(
    client: Client,
    durability: DurabilityClient,
    object_ids: list[str],
    params: dict[str, Any],
    args: argparse.Namespace,
    log: Any,
) -> int:
    """Tick fast (`set` version 2 at --age-expression) until every history has --age-events
    events (a cold tick replays ~half the continue-as-new threshold on average), then `set`
    version 3 back at the cadence. Returns the shortest history reached."""
    workflow_ids = [schedule_workflow_id(o) for o in object_ids]
    shortest = min(await history_lengths(client, workflow_ids))
    if shortest < args.age_events:
        await bounded(
            [durability.set_schedule(o, args.age_expression, 2, params=params) for o in object_ids],
            16,
        )
        deadline = time.monotonic() + 300
        while shortest < args.age_events and time.monotonic() < deadline:
            await asyncio.sleep(1)
            shortest = min(await history_lengths(client, workflow_ids))
    await bounded(
        [durability.set_schedule(o, args.expression, 3, params=params) for o in object_ids], 16
    )
    log(f"aged: every schedule history has >= {shortest} events")
    return shortest


def schedule_options() -> dict[str, Any]:
    return {"run_activity": "run_webhook", "outcome_activity": "on_outcome_webhook"}


async def tick_phase(
    client: Client,
    far: FarSide,
    worker: Process,
    figures: TickFigures,
    workflow_ids: list[str],
    period_s: float,
    log: Any,
) -> None:
    """Sleep out the warm-up, then measure a window of ticks."""
    await asyncio.sleep(WARMUP_S)
    figures.history_events += await history_lengths(client, workflow_ids)
    load0 = os.getloadavg()
    before = await worker.metrics()
    start, cpu0 = time.time(), worker.cpu()
    end = start + figures.window_s
    while time.time() < end - SAMPLE_EVERY_S:
        await asyncio.sleep(SAMPLE_EVERY_S)
        figures.history_events += await history_lengths(client, workflow_ids)
    await asyncio.sleep(max(0.0, end - time.time()))
    cpu1 = worker.cpu()
    figures.window_s = time.time() - start
    figures.history_events += await history_lengths(client, workflow_ids)
    figures.cpu_s = cpu1 - cpu0
    arrivals = far.runs_between(start, start + figures.window_s)
    figures.ticks = len(arrivals)
    figures.lateness_ms = [1000 * a.at - int(a.body["due_at"]) for a in arrivals]
    figures.due_per_s = len(workflow_ids) / period_s
    figures.rss_mib = worker.rss_mib()
    figures.metrics = await worker.metrics()
    figures.tasks = {
        name: figures.metrics.get(name, 0.0) - before.get(name, 0.0)
        for name in ("completed", "cache_hit", "cache_miss")
    }
    figures.events_per_tick = await events_per_tick(client, workflow_ids, start, end)
    load1 = os.getloadavg()
    figures.load = load1
    log(
        f"{figures.regime} ticks (cache {figures.cache}): {figures.ticks} in "
        f"{figures.window_s:.0f} s, {figures.cpu_ms_per_tick:.1f} CPU ms each, lateness p50 "
        f"{percentile(figures.lateness_ms, 50):.0f} ms p99 "
        f"{percentile(figures.lateness_ms, 99):.0f} ms, history ~{figures.mean_history:.0f} "
        f"events; load {load0[0]:.2f} -> {load1[0]:.2f}"
    )


async def events_per_tick(
    client: Client, workflow_ids: list[str], start: float, end: float
) -> float:
    """Schedule history events stamped in [start, end) per child started in it."""
    events = ticks = 0
    for workflow_id in workflow_ids:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        for event in history.events:
            if start <= event.event_time.ToDatetime(tzinfo=UTC).timestamp() < end:
                events += 1
                ticks += event.event_type == CHILD_INITIATED
    return events / ticks if ticks else float("nan")


def ledger_ops(ledger_id: str, first: int, count: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"op-{n}",
            "operation_type": "canvas.edit",
            "participants": [f"{ledger_id}-c{n % 8}"],
            "dependencies": [],
            "payload": {"n": n},
        }
        for n in range(first, first + count)
    ]


async def ledger_phase(
    client: Client,
    durability: DurabilityClient,
    far: FarSide,
    worker: Process,
    figures: LedgerFigures,
    concurrency: int,
    count: int,
    log: Any,
) -> None:
    """Feed `count` fresh ledgers (each kept LEDGER_OUTSTANDING ahead of what the far side has
    received), measure a window of requests, then terminate them (no worker work)."""
    prefix = f"{figures.regime}-{uuid.uuid4().hex[:6]}"
    ledger_ids = [f"{prefix}-l{j}" for j in range(count)]
    options = {
        "concurrency": concurrency,
        "submit_activity": "http_submit",
        "query_activity": "http_query",
    }
    stop = asyncio.Event()

    async def feed(ledger_id: str) -> None:
        enqueued = 0
        while not stop.is_set():
            if enqueued - far.sent_for(ledger_id) < LEDGER_OUTSTANDING:
                try:
                    await durability.enqueue(
                        ledger_id, ledger_ops(ledger_id, enqueued, LEDGER_BATCH), options=options
                    )
                    enqueued += LEDGER_BATCH
                except Exception as error:  # keep feeding; a refusal shows in the figures
                    log(f"  enqueue into {ledger_id}: {type(error).__name__}: {error}")
                    await asyncio.sleep(1)
            await asyncio.sleep(0.2)

    feeders = [asyncio.create_task(feed(ledger_id)) for ledger_id in ledger_ids]
    try:
        await asyncio.sleep(WARMUP_S)
        load0 = os.getloadavg()
        start, cpu0 = time.time(), worker.cpu()
        await asyncio.sleep(figures.window_s)
        cpu1 = worker.cpu()
        figures.window_s = time.time() - start
    finally:
        stop.set()
        await asyncio.gather(*feeders, return_exceptions=True)
    figures.cpu_s = cpu1 - cpu0
    figures.requests = len(far.submits_between(start, start + figures.window_s))
    workflow_ids = [ledger_workflow_id(ledger_id) for ledger_id in ledger_ids]
    figures.history_events = await history_lengths(client, workflow_ids)
    for workflow_id in workflow_ids:
        handle = client.get_workflow_handle(workflow_id)
        history = await handle.fetch_history()
        figures.failed_tasks += sum(1 for e in history.events if e.event_type == WFT_FAILED)
        await handle.terminate("bench.coldtick: window over")
    figures.load = os.getloadavg()
    await asyncio.sleep(3)
    log(
        f"{figures.regime} ledger (cache {figures.cache}): {figures.requests} requests in "
        f"{figures.window_s:.0f} s, {figures.cpu_ms_per_request:.1f} CPU ms each; load "
        f"{load0[0]:.2f} -> {figures.load[0]:.2f}"
    )


# --------------------------------------------------------------------------- replay


def cut(history: WorkflowHistory, events: int) -> WorkflowHistory | None:
    """The prefix ending at the last WorkflowTaskStarted at or before `events`: the history a
    worker without the workflow cached is handed for that task."""
    for index in range(min(events, len(history.events)) - 1, 0, -1):
        if history.events[index].event_type == WFT_STARTED:
            return WorkflowHistory(history.workflow_id, history.events[: index + 1])
    return None


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def best_of(replayers: list[tuple[Replayer, WorkflowHistory]], k: int) -> list[float]:
    """CPU seconds of this process for each replay, best of k, taken in turn."""
    for replayer, history in replayers:
        await replayer.replay_workflow(history)  # warm-up
    best = [float("inf")] * len(replayers)
    for _ in range(k):
        for at, (replayer, history) in enumerate(replayers):
            before = _cpu()
            await replayer.replay_workflow(history)
            best[at] = min(best[at], _cpu() - before)
    return best


async def record_raw_chain(address: str, ticks: int) -> WorkflowHistory:
    """Run BenchAwaitedChain on an in-process worker of this process; its history."""
    client = await Client.connect(address, data_converter=data_converter())
    queue = f"raw-{uuid.uuid4().hex[:6]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[BenchAwaitedChain, BenchAwaitedChild],
        activities=[bench_noop],
    ):
        handle = await client.start_workflow(
            "BenchAwaitedChain",
            {"ticks": ticks, "period_ms": 50},
            id=f"raw-awaited-{uuid.uuid4().hex[:6]}",
            task_queue=queue,
        )
        await handle.result()
        return await handle.fetch_history()


def tasks_in(history: WorkflowHistory) -> int:
    return sum(1 for e in history.events if e.event_type == WFT_STARTED)


async def replay_phase(
    address: str, schedule_history: WorkflowHistory, report: Report, log: Any
) -> None:
    available = len(schedule_history.events)
    targets = [t for t in report.args.lengths if t <= available]
    if any(t > available for t in report.args.lengths) and available > max(targets, default=0):
        targets.append(available)  # the whole history stands in for a longer cut
    if len(targets) < 2:
        targets = sorted({max(50, available // 2), available})
        report.replay_note = (
            f"the longest schedule history had {available} events: cut at {targets} "
            f"instead of {report.args.lengths}"
        )
    raw = await record_raw_chain(address, max(targets) // RAW_EVENTS_PER_TICK + 3)
    log(f"raw awaited chain recorded: {len(raw.events)} events")
    schedule_replayer = production_replayer([DurabilityScheduleWorkflow, ScheduledRunWorkflow])
    raw_replayer = production_replayer([BenchAwaitedChain, BenchAwaitedChild])
    for target in targets:
        mine, theirs = cut(schedule_history, target), cut(raw, target)
        if mine is None or theirs is None:
            continue
        ms, raw_ms = await best_of(
            [(schedule_replayer, mine), (raw_replayer, theirs)], report.args.best_of
        )
        row = ReplayRow(
            target, len(mine.events), tasks_in(mine), 1000 * ms,
            len(theirs.events), tasks_in(theirs), 1000 * raw_ms,
        )  # fmt: skip
        report.replay.append(row)
        log(
            f"replay at ~{target} events: schedule {row.schedule_per_event:.3f} ms/event, raw "
            f"{row.raw_per_event:.3f} ms/event, ratio {row.ratio:.2f}"
        )


# --------------------------------------------------------------------------- the run


def period_seconds(expression: str) -> float:
    """The cadence of an `@every` expression in seconds (other expressions: 60 s)."""
    text = expression.removeprefix("@every").strip()
    if not expression.startswith("@every"):
        return 60.0
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    total, number = 0.0, ""
    index = 0
    while index < len(text):
        char = text[index]
        if char.isdigit() or char == ".":
            number += char
            index += 1
            continue
        unit = "ms" if text.startswith("ms", index) else char
        total += float(number) * units[unit]
        number = ""
        index += len(unit)
    return total or 1.0


async def measure(args: argparse.Namespace, directory: Path, log: Any) -> Report:
    began = time.monotonic()
    report = Report(args=args, load_start=os.getloadavg())
    far = FarSide()
    far.start()
    server: DevServer = InMemoryDevServer(directory, "coldtick")
    queue = f"coldtick-{uuid.uuid4().hex[:6]}"
    base_env = {"DURABILITY_LEDGER_URL": far.base_url}
    worker: Process | None = None
    period = period_seconds(args.expression)
    try:
        await server.start()
        client = await connect({"TEMPORAL_ADDRESS": server.address})
        durability = DurabilityClient(client, queue)
        log(f"dev server on {server.address}, far side {far.base_url}")

        worker = Process(
            server.address,
            queue,
            directory,
            {**base_env, "DURABILITY_MAX_CACHED_WORKFLOWS": str(args.warm_cache)},
        )
        await worker.start(client)
        await memory_phase(durability, worker, report, log)

        warm_ledger = LedgerFigures("cached", args.warm_cache, window_s=args.ledger_s)
        await ledger_phase(
            client, durability, far, worker, warm_ledger, args.ledger_concurrency,
            args.ledgers, log,
        )  # fmt: skip
        report.ledgers.append(warm_ledger)

        object_ids = [f"tick-{uuid.uuid4().hex[:6]}-{i}" for i in range(args.schedules)]
        workflow_ids = [schedule_workflow_id(o) for o in object_ids]
        params = {"url": f"{far.base_url}/run", "outcome_url": f"{far.base_url}/outcome"}
        await bounded(
            [
                durability.set_schedule(
                    o, args.expression, 1, params=params, options=schedule_options()
                )
                for o in object_ids
            ],
            16,
        )
        warm = TickFigures("cached", args.warm_cache, window_s=args.cached_s)
        await tick_phase(client, far, worker, warm, workflow_ids, period, log)
        report.ticks.append(warm)
        report.aged_to = await age(client, durability, object_ids, params, args, log)
        report.worker_log += await worker.stop()

        worker = Process(
            server.address,
            queue,
            directory,
            {**base_env, "DURABILITY_MAX_CACHED_WORKFLOWS": str(args.cold_cache)},
        )
        await worker.start(client)
        cold = TickFigures("cold", args.cold_cache, window_s=args.cold_s)
        await tick_phase(client, far, worker, cold, workflow_ids, period, log)
        report.ticks.append(cold)

        histories = [await client.get_workflow_handle(w).fetch_history() for w in workflow_ids]
        report.schedule_failed_tasks = sum(
            1 for h in histories for e in h.events if e.event_type == WFT_FAILED
        )
        # The last 10 runs whose child has closed: the cold worker is behind, so the newest
        # runs' children are still open and would count a run short of its last task.
        for arrival in reversed(far.runs_between(0, time.time())):
            run_id = f"schedule-run:{arrival.body['object_id']}:{arrival.body['scheduled_time']}"
            child = await client.get_workflow_handle(run_id).fetch_history()
            if child.events and child.events[-1].event_type == CHILD_CLOSED:
                report.child_events.append(len(child.events))
            if len(report.child_events) == 10:
                break
        for workflow_id in workflow_ids:
            await client.get_workflow_handle(workflow_id).terminate("bench.coldtick: done")
        await asyncio.sleep(3)

        cold_ledger = LedgerFigures("cold", args.cold_cache, window_s=args.ledger_s)
        await ledger_phase(
            client, durability, far, worker, cold_ledger, args.ledger_concurrency,
            args.ledgers, log,
        )  # fmt: skip
        report.ledgers.append(cold_ledger)
        report.worker_log += await worker.stop()
        worker = None

        longest = max(histories, key=lambda h: len(h.events))
        await replay_phase(server.address, longest, report, log)
    finally:
        if worker is not None:
            report.worker_log += await worker.stop()
        await server.close()
        far.close()
    report.load_end = os.getloadavg()
    report.elapsed_s = time.monotonic() - began
    return report


# --------------------------------------------------------------------------- report


def _load(load: tuple[float, float, float]) -> str:
    return " / ".join(f"{value:.2f}" for value in load)


def _f(value: float, digits: int = 1) -> str:
    return "-" if value != value else f"{value:,.{digits}f}"  # NaN


def markdown(report: Report, command: str) -> str:
    args = report.args
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    machine = ", ".join(f"{name} {value}" for name, value in describe().items())
    lines = [
        f"# durability bench: coldtick{' (quick)' if args.quick else ''}, {stamp}",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {machine}. Dev server in memory, `history.timerProcessorMaxTimeShift=50ms`; "
        "ONE `python -m worker` process (its CPU and VmRSS from /proc); the far side (HTTP, "
        "answers at once) and the replays in the bench process.",
        "",
        f"Load average 1/5/15: {_load(report.load_start)} at the start, "
        f"{_load(report.load_end)} at the end; whole run {report.elapsed_s:.0f} s.",
        "",
        "## Schedule ticks",
        "",
        f"{args.schedules} schedules `{args.expression}` (`run_webhook`/`on_outcome_webhook` "
        "to the far side). Cached: the worker's cache holds everything it serves. Then the "
        f"schedules ticked at `{args.age_expression}` until every history had >= "
        f"{report.aged_to} events (target {args.age_events}: a cold tick replays about half "
        "the continue-as-new threshold on average), went back to the cadence, and the worker "
        f"was restarted with a cache of {args.cold_cache}, far fewer than the schedules and "
        "their runs, so each tick finds its schedule evicted and replays its history so far "
        "(cold). Lateness = webhook arrival - the run's `due_at`; when the worker cannot keep "
        "up, missed ticks collapse into one run (S6) and lateness grows with the backlog. A "
        "worker holds at most its cache size of workflows in flight, so the cold worker's "
        "sustained ticks per second is bounded by its small cache as well as by its CPU: "
        "the CPU per tick is the figure that carries over to a fleet.",
        "",
        "| figure | " + " | ".join(t.regime for t in report.ticks) + " |",
        "| --- |" + " --- |" * len(report.ticks),
    ]

    def row(name: str, values: list[str]) -> None:
        lines.append(f"| {name} | " + " | ".join(values) + " |")

    t = report.ticks
    row("worker cache (max_cached_workflows)", [f"{x.cache:,}" for x in t])
    row("window", [f"{x.window_s:.0f} s (after {WARMUP_S:.0f} s warm-up)" for x in t])
    row("ticks due per s", [_f(x.due_per_s) for x in t])
    row("sustained ticks per s (runs started in the window)", [_f(x.ticks_per_s, 2) for x in t])
    row("worker CPU ms per tick", [_f(x.cpu_ms_per_tick) for x in t])
    row("worker CPU used (cores)", [_f(x.cpu_s / x.window_s, 2) for x in t])
    row("run-start lateness p50 / p99 (ms)", [
        f"{_f(percentile(x.lateness_ms, 50), 0)} / {_f(percentile(x.lateness_ms, 99), 0)}"
        for x in t
    ])  # fmt: skip
    row("schedule history length while ticking (mean, min-max events)", [
        f"{_f(x.mean_history, 0)} ({min(x.history_events, default=0)}-"
        f"{max(x.history_events, default=0)})"
        for x in t
    ])  # fmt: skip
    row("schedule history events per tick (stamped in the window)", [
        _f(x.events_per_tick) for x in t
    ])  # fmt: skip
    row("workflow tasks completed per tick (all workflows)", [
        _f(x.tasks.get("completed", 0) / x.ticks if x.ticks else float("nan")) for x in t
    ])  # fmt: skip
    row("of them found cached per tick (sticky cache hits)", [
        _f(x.tasks.get("cache_hit", 0) / x.ticks if x.ticks else float("nan")) for x in t
    ])  # fmt: skip
    row("worker VmRSS at the end", [f"{x.rss_mib:.0f} MiB" for x in t])
    row("cached / forced evictions (worker /metrics)", [
        f"{x.metrics.get('cached', 0):,.0f} / {x.metrics.get('evicted', 0):,.0f}" for x in t
    ])  # fmt: skip
    row("load average 1 min at the window's end", [f"{x.load[0]:.2f}" for x in t])
    child = report.child_events
    lines += [
        "",
        "ScheduledRun child history events per run: "
        f"{_f(sum(child) / len(child)) if child else '-'} "
        f"(the last {len(child)} runs whose child had closed). "
        "Workflow task failures in the schedules' histories: "
        f"{report.schedule_failed_tasks}.",
        "",
        "## Ledger requests",
        "",
        f"{args.ledgers} fresh ledgers per regime, concurrency {args.ledger_concurrency}, each fed "
        f"batches of {LEDGER_BATCH} independent operations so {LEDGER_OUTSTANDING} wait beyond "
        "what the far side received (`http_submit`, answered `applied`). Requests = first submits "
        "the far side received in the window (each completion then runs on the ledger: on the "
        "cold worker after replaying its history).",
        "",
        "| figure | " + " | ".join(x.regime for x in report.ledgers) + " |",
        "| --- |" + " --- |" * len(report.ledgers),
    ]
    g = report.ledgers
    row("worker cache", [f"{x.cache:,}" for x in g])
    row("window", [f"{x.window_s:.0f} s" for x in g])
    row("requests per s", [_f(x.per_s, 2) for x in g])
    row("worker CPU ms per request", [_f(x.cpu_ms_per_request) for x in g])
    row("worker CPU used (cores)", [_f(x.cpu_s / x.window_s, 2) for x in g])
    row(
        "ledger history events at the end (max)", [str(max(x.history_events, default=0)) for x in g]
    )
    row("workflow task failures (ledger histories)", [str(x.failed_tasks) for x in g])
    row("load average 1 min at the window's end", [f"{x.load[0]:.2f}" for x in g])
    lines += [
        "",
        "## Replay cost per history event",
        "",
        "The longest schedule history above and a raw awaited chain (`BenchAwaitedChain`: timer "
        "-> child -> no-op activity, each child awaited before the next timer, 3 workflow tasks a "
        "tick like the schedule; not `BenchChain`, which does not await), each cut right after a "
        "WorkflowTaskStarted near the length, replayed in turn in this process by the production "
        f"Replayer configuration; process CPU, best of {args.best_of}. The ratio per event "
        "depends on how many events each task carries: a history recorded by a worker that "
        "fell behind (or by the fast ageing ticks) merges a tick's tasks, so compare the task "
        "counts too.",
        "",
        "| ~events | schedule: events / tasks / CPU ms | ms per event | raw chain: events / tasks "
        "/ CPU ms | ms per event | ratio per event |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in report.replay:
        lines.append(
            f"| {r.target} | {r.schedule_events} / {r.schedule_tasks} / {r.schedule_ms:.0f} | "
            f"{r.schedule_per_event:.3f} | {r.raw_events} / {r.raw_tasks} / {r.raw_ms:.0f} | "
            f"{r.raw_per_event:.3f} | {r.ratio:.2f} |"
        )
    if report.replay_note:
        lines += ["", f"Note: {report.replay_note}."]
    lines += [
        "",
        "## Memory per cached schedule",
        "",
        "| figure | value |",
        "| --- | --- |",
        f"| idle hourly schedules (after 20 warm-up ones) | {report.idle_count:,} |",
        f"| cached by the worker (its /metrics) | {report.idle_cached:,.0f} |",
        f"| worker VmRSS before / after | {report.rss_before_mib:.0f} / "
        f"{report.rss_after_mib:.0f} MiB |",
        f"| KiB per cached schedule | {_f(report.kib_per_cached)} |",
        f"| time until all were cached | {report.idle_settle_s:.0f} s |",
        "",
    ]
    lines += sizing_inputs(report)
    orphaned = [p for p in report.worker_log if "cannot report request_finished" in p]
    problems = [p for p in report.worker_log if p not in orphaned]
    lines += [
        "",
        f"Worker logs: {len(problems)} WARNING/ERROR/traceback lines"
        + (": " + "; ".join(f"`{p}`" for p in problems[:3]) if problems else ".")
        + f" Not counted: {len(orphaned)} `cannot report request_finished to the ledger` "
        "warnings from requests in flight when the bench terminated their ledger.",
    ]
    return "\n".join(lines) + "\n"


def sizing_inputs(report: Report) -> list[str]:
    """The figures `python -m bench.sizing` reads (key | value | what)."""
    warm = next((t for t in report.ticks if t.regime == "cached"), None)
    cold = next((t for t in report.ticks if t.regime == "cold"), None)
    replay = report.replay[-1] if report.replay else None
    values: list[tuple[str, float, str]] = []
    if warm is not None:
        values.append(("warm_cpu_ms_per_tick", warm.cpu_ms_per_tick, "cached worker, per tick"))
        values.append(("parent_events_per_tick", warm.events_per_tick, "schedule history"))
    if cold is not None:
        values += [
            ("cold_cpu_ms_per_tick", cold.cpu_ms_per_tick, "cold worker, per tick"),
            ("cold_history_events", cold.mean_history, "mean schedule history at those ticks"),
            ("cold_max_cores_per_worker", cold.cpu_s / cold.window_s, "CPU one worker used"),
            ("cold_rss_mib", cold.rss_mib, "the cold worker's VmRSS"),
        ]
    if report.child_events:
        child = report.child_events
        values.append(("child_events_per_run", sum(child) / len(child), "ScheduledRun history"))
    if replay is not None:
        values += [
            (
                "replay_ms_per_event",
                replay.schedule_per_event,
                f"schedule, ~{replay.target} events",
            ),
            ("raw_replay_ms_per_event", replay.raw_per_event, "raw awaited chain, same cut"),
        ]
    values += [
        ("kib_per_cached_schedule", report.kib_per_cached, "VmRSS delta / cached"),
        ("worker_base_rss_mib", report.rss_before_mib, "worker VmRSS with 20 cached"),
        (
            "continue_as_new_after_events",
            float(DEFAULT_CONTINUE_AS_NEW_AFTER_EVENTS),
            "the schedule's default",
        ),
    ]
    for ledger in report.ledgers:
        values.append((f"ledger_{ledger.regime}_cpu_ms_per_request", ledger.cpu_ms_per_request, ""))
    lines = ["## Sizing inputs", "", "| key | value | what |", "| --- | --- | --- |"]
    lines += [f"| {key} | {value:.4g} | {what} |" for key, value, what in values]
    return lines


async def main(args: argparse.Namespace) -> int:
    command = "python -m bench.coldtick " + shlex.join(sys.argv[1:])

    def log(message: str) -> None:
        print(message, flush=True)

    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        report = await measure(args, args.keep, log)
    else:
        with tempfile.TemporaryDirectory(prefix="durability-coldtick-") as tmp:
            report = await measure(args, Path(tmp), log)
    text = markdown(report, command.strip())
    print()
    print(text)
    suffix = "-quick" if args.quick else ""
    out: Path = (
        args.out or RESULTS_DIR / f"coldtick{suffix}-{time.strftime('%Y-%m-%d', time.gmtime())}.md"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
