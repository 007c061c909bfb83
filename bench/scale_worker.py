"""`python -m bench.scale_worker`: the worker's scale goal, measured the way production runs.

"10,000 idle hourly schedules on one worker start in < 60 s with worker RSS < 512 MiB."
Unlike the `scale` scenario of `python -m bench` (worker inside the bench process, cache
12,000), this starts a dev server and ONE real `python worker.py` process with its default
settings (`--max-cached` sets DURABILITY_MAX_CACHED_WORKFLOWS), then `--count` DurabilitySchedule
workflows by signal-with-start of `set` (an hourly cron half an hour away, 64 at once). It
times the starts and the wait until every first workflow task is done (the worker's own
/metrics count of completed workflow tasks, served on a free port as the worker does by
default; and visibility, since that task upserts DurabilityScheduleVersion), samples the
worker's VmRSS every second, and prints a markdown table, also written (or with --append,
added) to bench/results/scale-worker-<date>.md. The server is stopped at the end, and the
in-memory one takes the schedules with it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any, TypeVar

from temporalio.api.enums.v1 import EventType, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from bench.machine import describe
from durability.client import SCHEDULE_WORKFLOW, DurabilityClient, schedule_workflow_id
from durability.connect import connect
from harness.fleet import WorkerFleet
from harness.server import DevServer, free_port
from worker import worker_tuning

RESULTS_DIR = Path(__file__).resolve().parent / "results"
GOAL_START_S = 60.0
GOAL_RSS_MIB = 512.0
AT_ONCE = 64
SETTLE_TIMEOUT_S = 1200.0
QUIET_AFTER_SETTLE_S = 10.0
PROBE_SIZE = 50
HISTORY_SAMPLE = 20
T = TypeVar("T")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scale_worker", description=__doc__)
    parser.add_argument("--count", type=int, default=10_000, help="idle schedules to start")
    parser.add_argument(
        "--file-backed", action="store_true", help="dev server with a database file"
    )
    parser.add_argument(
        "--max-cached", type=int, help="DURABILITY_MAX_CACHED_WORKFLOWS (default: the worker's)"
    )
    parser.add_argument("--out", type=Path, help="results file (default bench/results/...)")
    parser.add_argument("--append", action="store_true", help="add to the results file")
    parser.add_argument("--keep", type=Path, help="keep the server and worker logs here")
    return parser.parse_args(argv)


# --------------------------------------------------------------------------- processes


class InMemoryDevServer(DevServer):
    """The chaos bench's DevServer without `--db-filename`: everything in memory."""

    def argv(self) -> list[str]:
        argv = super().argv()
        at = argv.index("--db-filename")
        del argv[at : at + 2]
        return argv


def memory_kib(pid: int) -> tuple[int, int]:
    """VmRSS and VmHWM of a process, KiB (0, 0 once it is gone)."""
    values = {"VmRSS:": 0, "VmHWM:": 0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, rest = line.partition("\t")
            if name in values:
                values[name] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return values["VmRSS:"], values["VmHWM:"]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


# The worker's own Prometheus counters (Temporal's Rust core), summed over their labels.
METRICS = {
    "completed": ("temporal_request{", 'operation="RespondWorkflowTaskCompleted"'),
    "polled": ("temporal_workflow_task_queue_poll_succeed{", ""),
    "wait_sum": ("temporal_workflow_task_schedule_to_start_latency_sum{", ""),
    "wait_count": ("temporal_workflow_task_schedule_to_start_latency_count{", ""),
    "run_sum": ("temporal_workflow_task_execution_latency_sum{", ""),
    "run_count": ("temporal_workflow_task_execution_latency_count{", ""),
    "poll_sum": ("temporal_long_request_latency_sum{", 'operation="PollWorkflowTaskQueue"'),
    "poll_count": ("temporal_long_request_latency_count{", 'operation="PollWorkflowTaskQueue"'),
    "cached": ("temporal_sticky_cache_size{", ""),
    "evicted": ("temporal_sticky_cache_total_forced_eviction{", ""),
    "pollers_normal": ("temporal_num_pollers{", 'poller_type="workflow_task"'),
    "pollers_sticky": ("temporal_num_pollers{", 'poller_type="sticky_workflow_task"'),
}


def scrape(url: str) -> dict[str, float]:
    """The METRICS from the worker's /metrics page (empty when it does not answer)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return {}
    found: dict[str, float] = {}
    for line in text.splitlines():
        for name, (prefix, label) in METRICS.items():
            if line.startswith(prefix) and label in line:
                found[name] = found.get(name, 0.0) + float(line.rpartition(" ")[2])
    return found


@dataclass
class Sampler:
    """VmRSS of the worker and the server, every second, from worker start to the end."""

    worker_pid: int
    server_pid: int
    metrics_url: str
    began: float = field(default_factory=time.monotonic)
    # (seconds since began, worker VmRSS KiB, server VmRSS KiB)
    samples: list[tuple[float, int, int]] = field(default_factory=list)
    # (seconds since began, METRICS)
    metrics: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    def take(self) -> tuple[int, int]:
        worker_rss, hwm = memory_kib(self.worker_pid)
        server_rss, _ = memory_kib(self.server_pid)
        self.samples.append((time.monotonic() - self.began, worker_rss, server_rss))
        return worker_rss, hwm

    async def run(self) -> None:
        while True:
            self.take()
            found = await asyncio.to_thread(scrape, self.metrics_url)
            if found:
                self.metrics.append((time.monotonic() - self.began, found))
            await asyncio.sleep(1.0)

    def when_completed(self, count: int) -> float | None:
        """Seconds since began when the worker had completed `count` workflow tasks."""
        for at, found in self.metrics:
            if found.get("completed", 0) >= count:
                return at
        return None

    def peak_worker_mib(self) -> tuple[float, float]:
        """The highest sampled worker VmRSS (MiB) and when (s after the worker started)."""
        at, rss, _ = max(self.samples, key=lambda sample: sample[1])
        return rss / 1024, at

    def peak_server_mib(self) -> float:
        return max(sample[2] for sample in self.samples) / 1024


async def wait_for_poller(client: Client, queue: str, timeout: float = 120) -> None:
    """Until a worker polls the workflow task queue."""
    deadline = time.monotonic() + timeout
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    while time.monotonic() < deadline:
        response = await client.workflow_service.describe_task_queue(request)
        if response.pollers:
            return
        await asyncio.sleep(0.25)
    raise RuntimeError(f"no worker polls {queue!r} after {timeout:.0f} s")


# --------------------------------------------------------------------------- measuring


@dataclass
class Run:
    """What one run measured; times in seconds after the first signal-with-start."""

    count: int
    expression: str = ""
    max_cached: int = 0
    server: str = ""
    worker_ready_s: float = 0.0
    start_s: float = 0.0
    start_retries: int = 0
    worker_done_s: float | None = None  # the worker had completed `count` workflow tasks
    visible_s: float | None = None  # visibility counted `count` schedules with version 1
    history_done_s: float | None = None  # latest WorkflowTaskCompleted in the sampled histories
    rss_idle_mib: float = 0.0
    rss_end_mib: float = 0.0
    hwm_end_mib: float = 0.0
    rss_peak_mib: float = 0.0
    rss_peak_at_s: float = 0.0
    server_rss_peak_mib: float = 0.0
    cpu_worker_s: float = 0.0
    cpu_server_s: float = 0.0
    cpu_bench_s: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    probe_ok: int = 0
    probe_s: float = 0.0
    events: list[int] = field(default_factory=list)
    failed_tasks: int = 0
    worker_log_problems: list[str] = field(default_factory=list)
    load_start: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_end: tuple[float, float, float] = (0.0, 0.0, 0.0)
    elapsed_s: float = 0.0
    # (s after the first start, visible in visibility, completed by the worker)
    progress: list[tuple[float, int, int]] = field(default_factory=list)
    # (s after the first start, worker VmRSS MiB)
    rss_curve: list[tuple[float, float]] = field(default_factory=list)
    # (s after the first start, the worker's METRICS)
    metric_curve: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    @property
    def done_s(self) -> float | None:
        """When every first workflow task was done: the worker's count, else visibility's."""
        return self.worker_done_s if self.worker_done_s is not None else self.visible_s


async def bounded(calls: list[Awaitable[T]], limit: int) -> list[T]:
    """Await them all, at most `limit` at a time."""
    semaphore = asyncio.Semaphore(limit)

    async def one(call: Awaitable[T]) -> T:
        async with semaphore:
            return await call

    return await asyncio.gather(*(one(call) for call in calls))


async def start_schedules(
    durability: DurabilityClient, object_ids: list[str], expression: str, run: Run
) -> None:
    """Signal-with-start of `set` for each, AT_ONCE at a time; a refused call is retried."""

    async def start(object_id: str) -> None:
        for attempt in range(10):
            try:
                await durability.signal_set_schedule(object_id, expression, 1)
                return
            except Exception:
                if attempt == 9:
                    raise
                run.start_retries += 1
                await asyncio.sleep(0.5 * (attempt + 1))

    await bounded([start(object_id) for object_id in object_ids], AT_ONCE)


async def wait_settled(
    client: Client, sampler: Sampler, run: Run, t0: float, log: Callable[[str], None]
) -> None:
    """Until visibility counts `count` schedules that stored version 1 (the first workflow
    task applies the `set` signal and upserts DurabilityScheduleVersion); meanwhile record
    how many workflow tasks the worker says it completed."""
    query = f"WorkflowType = '{SCHEDULE_WORKFLOW}' AND DurabilityScheduleVersion = 1"
    last_logged = 0.0
    while time.monotonic() - t0 < SETTLE_TIMEOUT_S:
        visible = (await client.count_workflows(query)).count
        elapsed = time.monotonic() - t0
        completed = int(sampler.metrics[-1][1].get("completed", 0)) if sampler.metrics else 0
        run.progress.append((elapsed, visible, completed))
        if visible >= run.count:
            run.visible_s = elapsed
            return
        if elapsed - last_logged >= 10:
            log(f"  {elapsed:5.0f} s: worker completed {completed}, visible {visible}")
            last_logged = elapsed
        await asyncio.sleep(1.0)


async def probe(client: Client, workflow_ids: list[str], expression: str) -> int:
    """How many of these answer `get` with the expression (the oldest ones: out of the cache
    when there are more schedules than it holds, so each query replays the history)."""

    async def stored(workflow_id: str) -> bool:
        try:
            answer = await client.get_workflow_handle(workflow_id).query(
                "get", rpc_timeout=timedelta(seconds=30)
            )
        except Exception:
            return False
        return getattr(answer, "expression", None) == expression or (
            isinstance(answer, dict) and answer.get("expression") == expression
        )

    answers = await bounded([stored(w) for w in workflow_ids], 16)
    return sum(answers)


@dataclass
class Sample:
    """Events per history, WORKFLOW_TASK_FAILED events, latest WorkflowTaskCompleted (epoch s)."""

    events: list[int]
    failed: int
    last_completed: float | None


async def sample_histories(client: Client, workflow_ids: list[str]) -> Sample:
    """Read these histories (the server's own record of when each task completed)."""

    async def one(workflow_id: str) -> tuple[int, int, float | None]:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        kinds = [event.event_type for event in history.events]
        completed = [
            event.event_time.ToDatetime(tzinfo=UTC).timestamp()
            for event in history.events
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        ]
        failed = kinds.count(EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)
        return len(kinds), failed, max(completed, default=None)

    found = await bounded([one(w) for w in workflow_ids], 8)
    times = [at for _, _, at in found if at is not None]
    return Sample(
        events=[events for events, _, _ in found],
        failed=sum(failed for _, failed, _ in found),
        last_completed=max(times) if len(times) == len(found) else None,
    )


def log_problems(path: Path) -> list[str]:
    """WARNING/ERROR lines and tracebacks the worker logged, shortened."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    marks = (" WARNING ", " ERROR ", " CRITICAL ", "Traceback")
    return [line[:200] for line in lines if any(mark in line for mark in marks)]


async def measure(args: argparse.Namespace, directory: Path, log: Callable[[str], None]) -> Run:
    """The whole run: server, worker, schedules, settle, quiet period, samples; then stop."""
    began = time.monotonic()
    run = Run(count=args.count, load_start=os.getloadavg())
    server: DevServer = (
        DevServer(directory, "scale") if args.file_backed else InMemoryDevServer(directory, "scale")
    )
    run.server = f"file ({server.db})" if args.file_backed else "in-memory"
    queue = f"scale-{uuid.uuid4().hex[:6]}"
    # The worker's default serves /metrics (9464); the fleet turns it off, we want a free port.
    metrics_port = free_port()
    extra = {"DURABILITY_METRICS_PORT": str(metrics_port)}
    if args.max_cached is not None:
        extra["DURABILITY_MAX_CACHED_WORKFLOWS"] = str(args.max_cached)
    fleet: WorkerFleet | None = None
    sampler_task: asyncio.Task[None] | None = None
    try:
        await server.start()
        assert server.process is not None
        log(f"dev server ({run.server}) on {server.address}")
        fleet = WorkerFleet(server.address, queue, 1, directory, extra)
        run.max_cached = worker_tuning(fleet.environment()).max_cached_workflows
        worker_started = time.monotonic()
        fleet.start()
        worker_process = fleet.slots[0].process
        assert worker_process is not None
        sampler = Sampler(
            worker_process.pid, server.process.pid, f"http://127.0.0.1:{metrics_port}/metrics"
        )
        sampler_task = asyncio.create_task(sampler.run())
        client = await connect({"TEMPORAL_ADDRESS": server.address})
        await wait_for_poller(client, queue)
        run.worker_ready_s = time.monotonic() - worker_started
        await asyncio.sleep(2)
        run.rss_idle_mib = sampler.take()[0] / 1024
        log(
            f"worker pid {worker_process.pid} polling {queue!r} after {run.worker_ready_s:.1f} s "
            f"(max_cached_workflows={run.max_cached}), VmRSS {run.rss_idle_mib:.0f} MiB"
        )

        minute = (time.gmtime().tm_min + 30) % 60  # hourly, half an hour away from now
        run.expression = f"{minute} * * * *"
        prefix = f"idle-{uuid.uuid4().hex[:6]}"
        object_ids = [f"{prefix}-{i}" for i in range(args.count)]
        durability = DurabilityClient(client, queue)
        cpu_before = (
            cpu_seconds(worker_process.pid),
            cpu_seconds(server.process.pid),
            time.process_time(),
        )
        t0, t0_wall = time.monotonic(), time.time()
        await start_schedules(durability, object_ids, run.expression, run)
        run.start_s = time.monotonic() - t0
        log(
            f"{args.count} schedules started in {run.start_s:.1f} s "
            f"({args.count / run.start_s:.0f}/s, {run.start_retries} retries)"
        )
        await wait_settled(client, sampler, run, t0, log)
        sampler.take()
        run.cpu_worker_s = cpu_seconds(worker_process.pid) - cpu_before[0]
        run.cpu_server_s = cpu_seconds(server.process.pid) - cpu_before[1]
        run.cpu_bench_s = time.process_time() - cpu_before[2]
        await asyncio.sleep(QUIET_AFTER_SETTLE_S)
        rss_end, hwm_end = sampler.take()
        run.rss_end_mib, run.hwm_end_mib = rss_end / 1024, hwm_end / 1024
        done_at = sampler.when_completed(args.count)
        if done_at is not None:
            run.worker_done_s = done_at - (t0 - sampler.began)
        run.metrics = sampler.metrics[-1][1] if sampler.metrics else {}
        log(f"worker done after {run.worker_done_s} s, visible after {run.visible_s} s")
        ids = [schedule_workflow_id(object_id) for object_id in object_ids]
        step = max(1, len(ids) // HISTORY_SAMPLE)
        # The last ID is in the sample: started last, so likely among the last tasks done.
        sample = await sample_histories(client, [*ids[::step][: HISTORY_SAMPLE - 1], ids[-1]])
        run.events, run.failed_tasks = sample.events, sample.failed
        if sample.last_completed is not None:
            run.history_done_s = sample.last_completed - t0_wall
        t1 = time.monotonic()
        run.probe_ok = await probe(client, ids[:PROBE_SIZE], run.expression)
        run.probe_s = time.monotonic() - t1
        sampler.take()
        run.rss_peak_mib, run.rss_peak_at_s = sampler.peak_worker_mib()
        run.server_rss_peak_mib = sampler.peak_server_mib()
        offset = t0 - sampler.began
        run.rss_curve = [(at - offset, rss / 1024) for at, rss, _ in sampler.samples]
        run.metric_curve = [(at - offset, found) for at, found in sampler.metrics]
        run.hwm_end_mib = max(run.hwm_end_mib, memory_kib(worker_process.pid)[1] / 1024)
        if worker_process.poll() is not None:
            run.worker_log_problems.append(f"worker exited with {worker_process.returncode}")
    finally:
        if sampler_task is not None:
            sampler_task.cancel()
        if fleet is not None:
            await fleet.stop()
            run.worker_log_problems += log_problems(fleet.log_path(0))
        await server.close()  # in memory: the schedules go with it
    run.load_end = os.getloadavg()
    run.elapsed_s = time.monotonic() - began
    return run


# --------------------------------------------------------------------------- report


def _load(load: tuple[float, float, float]) -> str:
    return " / ".join(f"{value:.2f}" for value in load)


def _verdict(met: bool) -> str:
    return "**met**" if met else "**missed**"


def _seconds(value: float | None) -> str:
    return "not reached" if value is None else f"{value:.1f} s"


def _mean(metrics: dict[str, float], name: str) -> str:
    count = metrics.get(f"{name}_count", 0)
    return f"{metrics.get(f'{name}_sum', 0) / count:.0f} ms" if count else "-"


def _spread(points: list[Any], parts: int) -> list[Any]:
    """About `parts` evenly spaced points and the last one."""
    if not points:
        return []
    picked = [points[int(len(points) * k / parts)] for k in range(parts)] + [points[-1]]
    return list(dict.fromkeys(picked))


def markdown(run: Run, command: str) -> str:
    """One section: heading, command, machine, the table and notes."""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    machine = ", ".join(f"{name} {value}" for name, value in describe().items())
    done = run.done_s
    start_met = done is not None and done < GOAL_START_S
    rss_worst = max(run.rss_peak_mib, run.hwm_end_mib)
    rss_met = rss_worst < GOAL_RSS_MIB
    cached = max(1, min(run.count, run.max_cached))
    events = f"{min(run.events)}-{max(run.events)}" if run.events else "-"
    if run.events and min(run.events) == max(run.events):
        events = str(run.events[0])
    m = run.metrics
    rows: list[tuple[str, str, str]] = [
        ("idle schedules", f"{run.count:,}", f"`{run.expression}` (hourly, ~30 min away)"),
        ("worker cache (max_cached_workflows)", f"{run.max_cached:,}", ""),
        ("dev server", run.server, "started by the bench"),
        ("worker ready (process start to first poll)", f"{run.worker_ready_s:.1f} s", ""),
        (
            "time to start (signal-with-start, 64 at once)",
            f"{run.start_s:.1f} s ({run.count / run.start_s:.0f}/s)",
            f"{run.start_retries} retried calls",
        ),
        (
            "all first workflow tasks done: worker's count",
            _seconds(run.worker_done_s),
            f"goal < {GOAL_START_S:.0f} s: {_verdict(start_met)} (RespondWorkflowTaskCompleted "
            "= count, from the worker's /metrics, 1 s resolution)",
        ),
        (
            "... the server's record",
            _seconds(run.history_done_s),
            f"latest WorkflowTaskCompleted event in {len(run.events)} sampled histories "
            "(the last started one included)",
        ),
        (
            "... visibility's count",
            _seconds(run.visible_s),
            "schedules with DurabilityScheduleVersion = 1 (counted every 1 s)",
        ),
        (
            "workflow task: mean wait in queue / mean run / mean poll",
            f"{_mean(m, 'wait')} / {_mean(m, 'run')} / {_mean(m, 'poll')}",
            "schedule-to-start, execution, PollWorkflowTaskQueue latency (worker's /metrics)",
        ),
        (
            "workflow task pollers: normal / sticky queue",
            f"{m.get('pollers_normal', 0):.0f} / {m.get('pollers_sticky', 0):.0f}",
            "every first task comes through the normal queue",
        ),
        ("worker VmRSS idle, before the schedules", f"{run.rss_idle_mib:.0f} MiB", ""),
        (
            "worker VmRSS peak (sampled every 1 s)",
            f"{run.rss_peak_mib:.0f} MiB",
            f"at {run.rss_peak_at_s:.0f} s after the worker started",
        ),
        ("worker VmHWM (kernel's peak RSS)", f"{run.hwm_end_mib:.0f} MiB", ""),
        (
            f"worker VmRSS at the end (settled + {QUIET_AFTER_SETTLE_S:.0f} s)",
            f"{run.rss_end_mib:.0f} MiB",
            f"goal < {GOAL_RSS_MIB:.0f} MiB (peak and VmHWM too): {_verdict(rss_met)}",
        ),
        (
            "KiB per cached schedule: (end - idle) / min(count, cache)",
            f"{(run.rss_end_mib - run.rss_idle_mib) * 1024 / cached:.1f}",
            f"{m.get('cached', 0):,.0f} workflows in the worker's cache at the end, "
            f"{m.get('evicted', 0):,.0f} forced evictions",
        ),
        ("dev server VmRSS peak", f"{run.server_rss_peak_mib:.0f} MiB", "same machine"),
        (
            "CPU s from first start to visible: worker / server / bench",
            f"{run.cpu_worker_s:.1f} / {run.cpu_server_s:.1f} / {run.cpu_bench_s:.1f}",
            "2 cores shared by all three (and other runs)",
        ),
        ("history events per idle schedule", events, f"sample of {len(run.events)}"),
        ("workflow task failures in that sample", str(run.failed_tasks), ""),
        (
            f"`get` answers the expression (the {PROBE_SIZE} oldest)",
            f"{run.probe_ok}/{PROBE_SIZE}",
            f"{run.probe_s:.1f} s, 16 at once (beyond the cache a query replays the history)",
        ),
        ("load average 1/5/15 at start", _load(run.load_start), ""),
        ("load average 1/5/15 at end", _load(run.load_end), ""),
        ("whole run", f"{run.elapsed_s:.0f} s", ""),
    ]
    lines = [
        f"## scale-worker: {run.count:,} idle schedules, cache {run.max_cached:,}, {stamp}",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {machine}.",
        "",
        "| figure | value | goal / comment |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {name} | {value} | {comment} |" for name, value, comment in rows]
    lines += [
        "",
        f"Goal 5 (all {run.count:,} started, first workflow tasks done, in < {GOAL_START_S:.0f} s; "
        f"worker RSS < {GOAL_RSS_MIB:.0f} MiB): start {_verdict(start_met)} "
        f"({_seconds(done)}), RSS {_verdict(rss_met)} (worst of peak and VmHWM: "
        f"{rss_worst:.0f} MiB).",
    ]
    curve = _spread(run.progress, 8)
    if curve:
        lines += [
            "",
            "First workflow tasks done over time (s after the first start: worker completed / "
            "visible): " + ", ".join(f"{t:.0f}: {w:,} / {v:,}" for t, v, w in curve),
        ]
    rss = _spread([(t, r) for t, r in run.rss_curve if t >= 0], 8)
    if rss:
        lines += [
            "",
            "Worker VmRSS over time (s after the first start: MiB): "
            + ", ".join(f"{t:.0f}: {r:.0f}" for t, r in rss),
        ]
    problems = run.worker_log_problems
    lines += [
        "",
        f"Worker log: {len(problems)} WARNING/ERROR/traceback lines"
        + (": " + "; ".join(f"`{line}`" for line in problems[:3]) if problems else "."),
    ]
    return "\n".join(lines) + "\n"


async def main(args: argparse.Namespace) -> int:
    command = "python -m bench.scale_worker " + shlex.join(sys.argv[1:])

    def log(message: str) -> None:
        print(message, flush=True)

    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        run = await measure(args, args.keep, log)
        (args.keep / "run.json").write_text(json.dumps(asdict(run), indent=1))
    else:
        with tempfile.TemporaryDirectory(prefix="durability-scale-") as tmp:
            run = await measure(args, Path(tmp), log)
    section = markdown(run, command.strip())
    print()
    print(section)
    out: Path = (
        args.out or RESULTS_DIR / f"scale-worker-{time.strftime('%Y-%m-%d', time.gmtime())}.md"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.append and out.exists():
        out.write_text(out.read_text() + "\n" + section)
    else:
        out.write_text("# durability bench: idle schedules on one `python worker.py`\n\n" + section)
    print(f"wrote {out}", flush=True)
    return 0 if run.visible_s is not None else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
