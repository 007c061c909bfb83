"""`python -m bench.start_breakdown`: where a run's start goes, step by step, and what a run
costs on each hosting path.

On one dev server (in memory, or on a database file with `--db-filename`/`--file-backed`) and
one in-process worker (`bench.env`), N objects `@every 1s` run for a phase each of:

- the raw chain (`BenchChain`: an aligned timer loop that starts a child per tick, the child
  runs one activity): the floor;
- durability, plugin-hosted (`DurabilitySchedule` + `ScheduledRun`, the run activity on the
  schedule's own queue);
- durability, externally hosted (`activity_task_queue` set, so `run_host` is external: the run
  activity on another queue, served by a second in-process worker);
- native Temporal Schedules (interval 1 s, ALLOW_ALL), unless `--no-native`.

Then it reads every parent and child history and splits each run's start, from the server's
own event timestamps, into: due -> timer fired -> parent workflow task started -> child start
initiated -> child started -> child's first workflow task scheduled -> started -> run activity
scheduled -> started. It prints each step's p50/p99 per system side by side with the ratios
to the raw chain, the mean of each step over each system's slowest 10% of runs (which step
the tail is made of), the commands of the task that starts the child, the CPU per run of the
worker process and of the dev server, and the Cloud actions and history events per run
(parent + child) by kind for every system, in steady state (the parent's events stamped
inside the measured window, the children of the runs due in it) and with set-up and teardown
amortised. The machine and its load averages before and after each
phase are stated (each round starts with a different system, as the load drifts): the machine
is shared, the figures are indicative.

Writes the report to `bench/results/start-breakdown-<date>-<server>.md` (or `--out`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import decode_typed_search_attributes
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from bench import cost
from bench.activities import BENCH_ACTIVITIES
from bench.cpu import child_pids, cpu_ms
from bench.env import dev_server, worker
from bench.load import LoadResult, _gather_bounded, run_load
from bench.machine import describe, loadavg
from bench.stats import fmt_ratio, percentile
from bench.workflows import SCHEDULED_START_TIME

RESULTS_DIR = Path(__file__).parent / "results"

# The points of a run's start, in order; each step is one point to the next.
POINTS: tuple[str, ...] = (
    "due",
    "timer_expiry",
    "timer_fired",
    "parent_task_started",
    "child_initiated",
    "child_started",
    "child_task_scheduled",
    "child_task_started",
    "activity_scheduled",
    "activity_started",
)
STEP_LABELS: dict[str, str] = {
    "timer_expiry": "due -> timer expiry (the task that set the timer: its worker time)",
    "timer_fired": "timer expiry -> timer fired (server)",
    "parent_task_started": "timer fired -> parent task started",
    "child_initiated": "parent task started -> child start initiated",
    "child_started": "child start initiated -> child started",
    "child_task_scheduled": "child started -> child's first task scheduled",
    "child_task_started": "child's first task scheduled -> started",
    "activity_scheduled": "child's first task started -> run activity scheduled",
    "activity_started": "run activity scheduled -> started",
}
# Spans over several steps, for systems that skip some (a native Schedule has no parent).
SPANS: dict[str, tuple[str, str]] = {
    "due -> timer fired": ("due", "timer_fired"),
    "due -> child started": ("due", "child_started"),
    "due -> activity started (total)": ("due", "activity_started"),
}
TAIL_SHARE = 0.10


@dataclass
class RunStart:
    """One run's start as the server stamped it: epoch ms per point (absent where the system
    has no such point), plus what the parent did in the task that started the child."""

    child_id: str
    points: dict[str, float] = field(default_factory=dict)
    # Workflow tasks the parent started after the timer fired before the one that started
    # the child (0: the timer's own task started it).
    extra_parent_tasks: int = 0
    # Commands (event types) recorded by the parent task that started the child, and by the
    # child's task that scheduled the run activity.
    start_task_commands: tuple[str, ...] = ()
    child_task_commands: tuple[str, ...] = ()
    # Wall time the worker held the parent's task that started the child (task started ->
    # completed), ms.
    start_task_ms: float | None = None
    # Worker time of the parent's next task, the one the child's start woke (ms), and its
    # commands: it runs while the child's first task waits for the same worker.
    started_task_ms: float | None = None
    started_task_commands: tuple[str, ...] = ()

    def step(self, point: str) -> float | None:
        """The step that ends at `point`: its time minus the previous point's, if both exist."""
        index = POINTS.index(point)
        end = self.points.get(point)
        start = self.points.get(POINTS[index - 1])
        return None if end is None or start is None else end - start

    def span(self, first: str, last: str) -> float | None:
        a, b = self.points.get(first), self.points.get(last)
        return None if a is None or b is None else b - a


def _attributes(event: HistoryEvent) -> Any:
    which = event.WhichOneof("attributes")
    return getattr(event, which) if which else None


def _completing_task(event: HistoryEvent) -> int | None:
    """The WorkflowTaskCompleted event ID of the task whose command recorded `event`."""
    task = getattr(_attributes(event), "workflow_task_completed_event_id", None)
    return int(task) if task else None


def _commands_of_task(events: Sequence[HistoryEvent], completed_id: int) -> tuple[str, ...]:
    return tuple(cost.event_name(e) for e in events if _completing_task(e) == completed_id)


def parent_starts(events: Sequence[HistoryEvent]) -> dict[str, RunStart]:
    """The child starts of one parent history (a raw chain or a schedule run), by child
    workflow ID: the timer fire that led to each, the first parent task started after it, the
    initiation. Only the first child started after each timer fire is kept: a later one (a
    queued run started as a slot freed) has no timer-driven start to break down."""
    by_id = {e.event_id: e for e in events}
    out: dict[str, RunStart] = {}
    timer_fired: float | None = None
    timer_expiry: float | None = None
    timer_used = False
    awaiting_started: dict[str, RunStart] = {}
    first_task: float | None = None
    tasks_since_timer = 0
    for event in events:
        name = cost.event_name(event)
        if name == "TimerFired":
            timer_fired = cost.event_ms(event)
            set_event = by_id.get(event.timer_fired_event_attributes.started_event_id)
            timer_expiry = None
            if set_event is not None:
                fire_in = set_event.timer_started_event_attributes.start_to_fire_timeout
                timer_expiry = cost.event_ms(set_event) + fire_in.ToNanoseconds() / 1e6
            timer_used = False
            first_task = None
            tasks_since_timer = 0
        elif name == "WorkflowTaskStarted" and timer_fired is not None:
            tasks_since_timer += 1
            if first_task is None:
                first_task = cost.event_ms(event)
        elif name == "StartChildWorkflowExecutionInitiated":
            attrs = event.start_child_workflow_execution_initiated_event_attributes
            completed_id = int(attrs.workflow_task_completed_event_id)
            if timer_fired is None or first_task is None or timer_used:
                continue
            timer_used = True
            start = RunStart(child_id=attrs.workflow_id)
            if timer_expiry is not None:
                start.points["timer_expiry"] = timer_expiry
            start.points["timer_fired"] = timer_fired
            start.points["parent_task_started"] = first_task
            start.points["child_initiated"] = cost.event_ms(event)
            start.extra_parent_tasks = max(0, tasks_since_timer - 1)
            start.start_task_commands = _commands_of_task(events, completed_id)
            completed = by_id.get(completed_id)
            if completed is not None:
                task_started = by_id.get(
                    completed.workflow_task_completed_event_attributes.started_event_id
                )
                if task_started is not None:
                    start.start_task_ms = cost.event_ms(completed) - cost.event_ms(task_started)
            out[attrs.workflow_id] = start
        elif name == "ChildWorkflowExecutionStarted":
            child = event.child_workflow_execution_started_event_attributes
            if child.workflow_execution.workflow_id in out:
                awaiting_started[child.workflow_execution.workflow_id] = out[
                    child.workflow_execution.workflow_id
                ]
        elif name == "WorkflowTaskCompleted" and awaiting_started:
            task = event.workflow_task_completed_event_attributes
            task_started = by_id.get(task.started_event_id)
            for woken in awaiting_started.values():
                if task_started is not None:
                    woken.started_task_ms = cost.event_ms(event) - cost.event_ms(task_started)
                woken.started_task_commands = _commands_of_task(events, event.event_id)
            awaiting_started.clear()
    return out


def child_points(start: RunStart, events: Sequence[HistoryEvent], activity: str) -> RunStart:
    """Fill in `start` from the child's own history: its start, its first workflow task, and
    the scheduling and start of its `activity`."""
    if not events:
        return start
    start.points["child_started"] = cost.event_ms(events[0])
    scheduled_id: int | None = None
    for event in events:
        name = cost.event_name(event)
        if name == "WorkflowTaskScheduled":
            start.points.setdefault("child_task_scheduled", cost.event_ms(event))
        elif name == "WorkflowTaskStarted":
            start.points.setdefault("child_task_started", cost.event_ms(event))
        elif (
            name == "ActivityTaskScheduled"
            and scheduled_id is None
            and event.activity_task_scheduled_event_attributes.activity_type.name == activity
        ):
            scheduled_id = event.event_id
            start.points["activity_scheduled"] = cost.event_ms(event)
            task = _completing_task(event)
            if task is not None:
                start.child_task_commands = _commands_of_task(events, task)
        elif (
            name == "ActivityTaskStarted"
            and scheduled_id is not None
            and event.activity_task_started_event_attributes.scheduled_event_id == scheduled_id
        ):
            start.points["activity_started"] = cost.event_ms(event)
    return start


def due_of_input(value: Any) -> float | None:
    """When a run was due, from its child's decoded input: a `ScheduledRun`'s `run.due_at`, or
    the raw chain child's `due_ms`."""
    if isinstance(value, dict):
        run = value.get("run")
        if isinstance(run, dict) and "due_at" in run:
            return float(run["due_at"])
        if "due_ms" in value:
            return float(value["due_ms"])
    return None


def native_due(event: HistoryEvent) -> float | None:
    """A natively scheduled workflow's due time: its `TemporalScheduledStartTime`."""
    attrs = event.workflow_execution_started_event_attributes
    when = decode_typed_search_attributes(attrs.search_attributes).get(SCHEDULED_START_TIME)
    return when.timestamp() * 1000 if when is not None else None


async def child_due(client: Client, history: WorkflowHistory) -> float | None:
    """The due time a child history carries in its input (or its native schedule stamp)."""
    started = history.events[0]
    due = native_due(started)
    if due is not None:
        return due
    payloads = started.workflow_execution_started_event_attributes.input.payloads
    values = await client.data_converter.decode(list(payloads)) if payloads else []
    return due_of_input(values[0]) if values else None


# --------------------------------------------------------------------------- the phases


@dataclass(frozen=True)
class System:
    name: str
    side: str  # bench.load side
    activity: str  # the run activity's type in the child
    parent_prefix: str | None  # parent workflow ID = prefix + object key (None: native)
    external: bool = False


SYSTEMS: tuple[System, ...] = (
    System("raw chain", "chain", "bench_mark", ""),
    System("durability (plugin)", "durability", "bench_run", "schedule:"),
    System("durability (external)", "durability", "bench_run", "schedule:", external=True),
    System("native Schedules", "native", "bench_mark", None),
)


@dataclass
class Cost:
    """Per-run cost of one phase: actions by kind and events, parent and child apart."""

    runs: int = 0
    parent: cost.Tally = field(default_factory=cost.Tally)
    child: cost.Tally = field(default_factory=cost.Tally)
    extra_actions: Counter[str] = field(default_factory=Counter)  # per run, not in histories

    def per_run_kinds(self) -> Counter[str]:
        kinds: Counter[str] = Counter()
        kinds.update(self.parent.by_kind())
        kinds.update(self.child.by_kind())
        out: Counter[str] = Counter({k: v / self.runs for k, v in kinds.items()})
        out.update(self.extra_actions)
        return out

    def actions_per_run(self) -> float:
        return sum(self.per_run_kinds().values()) if self.runs else float("nan")

    def events_per_run(self) -> tuple[float, float]:
        if not self.runs:
            return float("nan"), float("nan")
        return self.parent.events / self.runs, self.child.events / self.runs


@dataclass
class PhaseResult:
    system: System
    load: LoadResult
    starts: list[RunStart]
    steady: Cost
    amortised: Cost
    load_before: str
    load_after: str
    # CPU ms the phase took, this process (the worker, its activities, the bench's client)
    # and the dev server, over the phase's load (set-up, ticks, teardown).
    worker_cpu_ms: float = float("nan")
    server_cpu_ms: float = float("nan")


async def _histories(client: Client, ids: Iterable[str]) -> dict[str, WorkflowHistory]:
    """The histories of these workflows, leaving out those that do not exist: a child whose
    start a parent initiated just before the bench terminated it may never have started."""

    async def one(workflow_id: str) -> WorkflowHistory | None:
        try:
            return await client.get_workflow_handle(workflow_id).fetch_history()
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND:
                return None
            raise

    ids = list(ids)
    fetched = await _gather_bounded([one(i) for i in ids], limit=8)
    return {i: h for i, h in zip(ids, fetched, strict=True) if h is not None}


async def read_phase(
    client: Client, system: System, load: LoadResult
) -> tuple[list[RunStart], Cost, Cost]:
    """Break down every run due in the phase's window; count its cost."""
    w0, w1 = load.window_ms
    steady, amortised = Cost(), Cost()
    starts: dict[str, RunStart] = {}
    if system.parent_prefix is not None:
        for key in load.keys:
            for history in await cost.chain_histories(client, system.parent_prefix + key):
                starts.update(parent_starts(history.events))
                steady.parent.add(cost.tally(cost.between(history.events, w0, w1)))
                amortised.parent.add(cost.tally(history.events, skip_setup=True))
        child_ids: list[str] = []
        for key in load.keys:
            for history in await cost.chain_histories(client, system.parent_prefix + key):
                child_ids += [
                    e.start_child_workflow_execution_initiated_event_attributes.workflow_id
                    for e in history.events
                    if cost.event_name(e) == "StartChildWorkflowExecutionInitiated"
                ]
    else:
        prefixes = tuple(f"native-run-{key}-" for key in load.keys)
        child_ids = [
            w.id
            async for w in client.list_workflows("WorkflowType = 'BenchNativeRun'")
            if w.id.startswith(prefixes)
        ]
        steady.extra_actions["schedule starts"] = 2
        amortised.extra_actions["schedule starts"] = 2
    children = await _histories(client, child_ids)
    measured: list[RunStart] = []
    for child_id, history in children.items():
        if not history.events:
            continue
        due = await child_due(client, history)
        start = starts.get(child_id, RunStart(child_id=child_id))
        tally = cost.tally(history.events)
        amortised.child.add(tally)
        amortised.runs += 1
        if due is None or not w0 <= due < w1:
            continue
        steady.child.add(tally)
        steady.runs += 1
        start.points["due"] = due
        measured.append(child_points(start, history.events, system.activity))
    return measured, steady, amortised


async def run_phase(
    client: Client,
    task_queue: str,
    external_queue: str,
    system: System,
    objects: int,
    seconds: float,
) -> PhaseResult:
    settings = {"activity_task_queue": external_queue} if system.external else None
    me, servers = os.getpid(), child_pids(os.getpid())
    before = loadavg()
    worker0, server0 = cpu_ms(me), sum(cpu_ms(p) for p in servers)
    load = await run_load(
        client, task_queue, system.side, objects, seconds, grace_s=3, schedule_settings=settings
    )
    worker1, server1 = cpu_ms(me), sum(cpu_ms(p) for p in servers)
    after = loadavg()
    starts, steady, amortised = await read_phase(client, system, load)
    return PhaseResult(
        system, load, starts, steady, amortised, before, after, worker1 - worker0, server1 - server0
    )


# --------------------------------------------------------------------------- the report


def _values(starts: Sequence[RunStart], point: str) -> list[float]:
    return [v for s in starts if (v := s.step(point)) is not None]


def _span_values(starts: Sequence[RunStart], first: str, last: str) -> list[float]:
    return [v for s in starts if (v := s.span(first, last)) is not None]


def _fmt(value: float) -> str:
    return "-" if value != value else f"{value:.1f}"


def _ratio(a: float, b: float) -> str:
    if a != a or b != b or b <= 0:
        return "-"
    return fmt_ratio(a / b)


def step_rows(phases: Sequence[PhaseResult]) -> list[tuple[str, list[list[float]]]]:
    """Per step (and span), per phase, the samples."""
    rows: list[tuple[str, list[list[float]]]] = []
    for point in POINTS[1:]:
        rows.append((STEP_LABELS[point], [_values(p.starts, point) for p in phases]))
    for label, (first, last) in SPANS.items():
        rows.append((label, [_span_values(p.starts, first, last) for p in phases]))
    return rows


def breakdown_table(phases: Sequence[PhaseResult]) -> list[str]:
    names = [p.system.name for p in phases]
    chain = next((i for i, p in enumerate(phases) if p.system.side == "chain"), None)
    durability = [i for i, p in enumerate(phases) if p.system.side == "durability"]
    head = ["step (ms)"]
    for name in names:
        head += [f"{name} p50", f"{name} p99"]
    for i in durability:
        head += [f"{phases[i].system.name} / chain p50", "p99"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for label, samples in step_rows(phases):
        cells = [label]
        p50s = [percentile(s, 50) for s in samples]
        p99s = [percentile(s, 99) for s in samples]
        for a, b in zip(p50s, p99s, strict=True):
            cells += [_fmt(a), _fmt(b)]
        for i in durability:
            if chain is None:
                cells += ["-", "-"]
            else:
                cells += [_ratio(p50s[i], p50s[chain]), _ratio(p99s[i], p99s[chain])]
        lines.append("| " + " | ".join(cells) + " |")
    cells = ["runs measured"] + [c for p in phases for c in (str(len(p.starts)), "")]
    lines.append("| " + " | ".join(cells + [""] * (2 * len(durability))) + " |")
    return lines


def tail_table(phases: Sequence[PhaseResult]) -> list[str]:
    """Mean of each step over each system's slowest 10% of runs (by total), beside its mean
    over all runs: which steps the tail is made of."""
    head = ["step (ms, mean)"]
    for p in phases:
        head += [f"{p.system.name} all", f"{p.system.name} slowest 10%"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    tails: list[list[RunStart]] = []
    for p in phases:
        ranked = sorted(
            (s for s in p.starts if s.span("due", "activity_started") is not None),
            key=lambda s: s.span("due", "activity_started") or 0.0,
        )
        tails.append(ranked[int(len(ranked) * (1 - TAIL_SHARE)) :])
    for point in POINTS[1:]:
        cells = [STEP_LABELS[point]]
        for p, tail in zip(phases, tails, strict=True):
            every, slow = _values(p.starts, point), _values(tail, point)
            cells += [_fmt(statistics.fmean(every) if every else float("nan"))]
            cells += [_fmt(statistics.fmean(slow) if slow else float("nan"))]
        lines.append("| " + " | ".join(cells) + " |")
    for label, (first, last) in SPANS.items():
        cells = [label]
        for p, tail in zip(phases, tails, strict=True):
            every, slow = _span_values(p.starts, first, last), _span_values(tail, first, last)
            cells += [_fmt(statistics.fmean(every) if every else float("nan"))]
            cells += [_fmt(statistics.fmean(slow) if slow else float("nan"))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def task_table(phases: Sequence[PhaseResult]) -> list[str]:
    lines = [
        "| system | parent tasks between timer and child start (mean extra) | worker time in the "
        "task that starts the child p50 / p99 (ms) | commands of that task (most common) | "
        "commands of the child's task that schedules the run (most common) | worker time in "
        "the parent's task the child's start woke p50 / p99 (ms) | its commands (most common) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in phases:
        if not p.starts:
            continue
        extra = statistics.fmean(s.extra_parent_tasks for s in p.starts)
        held = [s.start_task_ms for s in p.starts if s.start_task_ms is not None]
        parent_cmds = Counter(s.start_task_commands for s in p.starts if s.start_task_commands)
        child_cmds = Counter(s.child_task_commands for s in p.starts if s.child_task_commands)
        woke = [s.started_task_ms for s in p.starts if s.started_task_ms is not None]
        woke_cmds = Counter(s.started_task_commands for s in p.starts if s.started_task_ms)
        lines.append(
            f"| {p.system.name} | "
            + (f"{extra:.2f}" if p.system.parent_prefix is not None else "-")
            + f" | {_fmt(percentile(held, 50))} / {_fmt(percentile(held, 99))} | "
            + (", ".join(parent_cmds.most_common(1)[0][0]) if parent_cmds else "-")
            + " | "
            + (", ".join(child_cmds.most_common(1)[0][0]) if child_cmds else "-")
            + f" | {_fmt(percentile(woke, 50))} / {_fmt(percentile(woke, 99))} | "
            + (", ".join(woke_cmds.most_common(1)[0][0]) or "none" if woke_cmds else "-")
            + " |"
        )
    return lines


KIND_ORDER = (
    "timers",
    "child starts",
    "activities",
    "signals",
    "upserts",
    "workflow starts",
    "schedule starts",
    "local activities",
    "updates",
    "options updates",
)


def cost_table(phases: Sequence[PhaseResult], attr: str) -> list[str]:
    head = ["per run"] + [p.system.name for p in phases]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    costs: list[Cost] = [getattr(p, attr) for p in phases]
    kinds = [c.per_run_kinds() for c in costs]
    seen = [k for k in KIND_ORDER if any(kind.get(k) for kind in kinds)]
    seen += sorted({k for kind in kinds for k in kind} - set(seen))
    for kind_name in seen:
        lines.append(
            f"| actions: {kind_name} | "
            + " | ".join(f"{kind.get(kind_name, 0):.2f}" for kind in kinds)
            + " |"
        )
    lines.append(
        "| **Cloud actions** | "
        + " | ".join(f"**{c.actions_per_run():.2f}**" for c in costs)
        + " |"
    )
    rows = [c.events_per_run() for c in costs]
    lines.append(
        "| events: parent | " + " | ".join(_fmt(r[0]) if r[0] else "-" for r in rows) + " |"
    )
    lines.append("| events: child | " + " | ".join(_fmt(r[1]) for r in rows) + " |")
    lines.append(
        "| **events: parent + child** | "
        + " | ".join(f"**{_fmt(r[0] + r[1])}**" for r in rows)
        + " |"
    )
    memos = [
        (
            c.parent.by_type.get("WorkflowPropertiesModified", 0)
            + c.child.by_type.get("WorkflowPropertiesModified", 0)
        )
        / c.runs
        if c.runs
        else float("nan")
        for c in costs
    ]
    lines.append(
        "| memo upserts (WorkflowPropertiesModified; no action listed) | "
        + " | ".join(f"{m:.2f}" for m in memos)
        + " |"
    )
    lines.append("| runs counted | " + " | ".join(str(c.runs) for c in costs) + " |")
    return lines


def event_types_table(phases: Sequence[PhaseResult]) -> list[str]:
    """Steady-state events per run by type, parent and child apart."""
    shown = [p for p in phases if p.steady.runs]
    head = ["event type (per run)"]
    for p in shown:
        head += [f"{p.system.name} parent", "child"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    names: Counter[str] = Counter()
    for p in shown:
        names.update(p.steady.parent.by_type)
        names.update(p.steady.child.by_type)
    for name, _ in names.most_common():
        cells = [name]
        for p in shown:
            n = p.steady.runs
            cells += [
                f"{p.steady.parent.by_type.get(name, 0) / n:.2f}",
                f"{p.steady.child.by_type.get(name, 0) / n:.2f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render_round(index: int, phases: Sequence[PhaseResult], objects: int, seconds: float) -> str:
    lines = [f"## Run {index}", ""]
    lines.append(
        "| phase | load before (1/5/15 min) | load after | runs due in window / measured "
        "| window (due, UTC) | CPU ms per run: worker process / dev server |"
    )
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for p in phases:
        w0, w1 = p.load.window_ms
        runs = max(1, p.amortised.runs)
        window = (
            datetime.fromtimestamp(w0 / 1000, UTC).strftime("%H:%M:%S")
            + "-"
            + datetime.fromtimestamp(w1 / 1000, UTC).strftime("%H:%M:%S")
        )
        lines.append(
            f"| {p.system.name} | {p.load_before} | {p.load_after} | "
            f"{p.load.expected} / {len(p.starts)} | {window} | "
            f"{_fmt(p.worker_cpu_ms / runs)} / {_fmt(p.server_cpu_ms / runs)} |"
        )
    lines += ["", f"### Start breakdown ({objects} objects @every 1s, {seconds:g} s a phase)", ""]
    lines += breakdown_table(phases)
    lines += ["", "### Which steps the tail is made of", ""]
    lines += tail_table(phases)
    lines += ["", "### The task that starts the child", ""]
    lines += task_table(phases)
    lines += ["", "### Cost per run, steady state (inside the measured window)", ""]
    lines += cost_table(phases, "steady")
    lines += ["", "### Cost per run, whole histories (set-up, teardown, continue-as-new)", ""]
    lines += cost_table(phases, "amortised")
    lines += ["", "### Events per run by type, steady state", ""]
    lines += event_types_table(phases)
    return "\n".join(lines) + "\n"


def summary_table(rounds: Sequence[Sequence[PhaseResult]]) -> list[str]:
    """Per run: each system's total p50/p99 and durability's ratios to the chain; the median."""
    names = [p.system.name for p in rounds[0]]
    head = ["run"] + [f"{n} p50 / p99" for n in names]
    head += [f"{n} / chain p50 / p99" for n in names if n.startswith("durability")]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    ratios: dict[str, list[tuple[float, float]]] = {}
    for index, phases in enumerate(rounds, 1):
        totals = {p.system.name: _span_values(p.starts, "due", "activity_started") for p in phases}
        pct = {n: (percentile(v, 50), percentile(v, 99)) for n, v in totals.items()}
        cells = [str(index)] + [f"{_fmt(a)} / {_fmt(b)}" for a, b in pct.values()]
        chain = pct.get("raw chain")
        for n in names:
            if not n.startswith("durability"):
                continue
            if chain is None:
                cells.append("-")
                continue
            r = (pct[n][0] / chain[0], pct[n][1] / chain[1])
            ratios.setdefault(n, []).append(r)
            cells.append(f"{fmt_ratio(r[0])} / {fmt_ratio(r[1])}")
        lines.append("| " + " | ".join(cells) + " |")
    if len(rounds) > 1:
        cells = ["median"] + ["" for _ in names]
        for n in names:
            if n in ratios:
                cells.append(
                    f"{fmt_ratio(statistics.median(r[0] for r in ratios[n]))} / "
                    f"{fmt_ratio(statistics.median(r[1] for r in ratios[n]))}"
                )
        lines.append("| " + " | ".join(cells) + " |")
    return lines


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.start_breakdown", description=__doc__)
    parser.add_argument("--objects", type=int, default=10, help="objects per phase (10)")
    parser.add_argument("--seconds", type=float, default=20, help="seconds a phase (20)")
    parser.add_argument("--runs", type=int, default=1, help="rounds of every phase (1)")
    parser.add_argument("--file-backed", action="store_true", help="dev server on a db file")
    parser.add_argument("--db-filename", help="the dev server's database file (file-backed)")
    parser.add_argument("--no-native", action="store_true", help="leave native Schedules out")
    parser.add_argument("--out", help="report path (bench/results/start-breakdown-<date>-...)")
    return parser.parse_args(argv)


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.objects < 1 or args.seconds < 5 or args.runs < 1:
        print("--objects >= 1, --seconds >= 5 and --runs >= 1, please", file=sys.stderr)
        return 2
    systems = [s for s in SYSTEMS if not (args.no_native and s.side == "native")]
    file_backed = bool(args.file_backed or args.db_filename)
    machine = describe()
    rounds: list[list[PhaseResult]] = []
    async with dev_server(file_backed, args.db_filename) as (env, where):
        client = env.client
        queue = f"breakdown-{uuid.uuid4().hex[:8]}"
        external = f"{queue}-external"
        async with (
            worker(client, "http://127.0.0.1:9/", task_queue=queue),
            Worker(client, task_queue=external, activities=BENCH_ACTIVITIES),
        ):
            for index in range(1, args.runs + 1):
                phases: list[PhaseResult] = []
                # Each round starts with a different system: the machine's load drifts.
                shift = (index - 1) % len(systems)
                for system in systems[shift:] + systems[:shift]:
                    print(f"run {index}: {system.name} ...", flush=True)
                    phases.append(
                        await run_phase(client, queue, external, system, args.objects, args.seconds)
                    )
                phases.sort(key=lambda p: systems.index(p.system))
                rounds.append(phases)
                print(render_round(index, phases, args.objects, args.seconds), flush=True)
    stamp = datetime.now(UTC)
    title = [
        f"# Start breakdown, {stamp:%Y-%m-%d %H:%M} UTC ({where})",
        "",
        "Machine: "
        + ", ".join(f"{k} {v}" for k, v in machine.items())
        + f". Dev server: {where}, timer shift 50 ms. Command: `python -m bench.start_breakdown "
        + " ".join(argv if argv is not None else sys.argv[1:])
        + "`. The machine is shared: the load averages are stated per phase and the figures "
        "are indicative.",
        "",
        "Every time below is the server's own event timestamps (one clock). Steps are "
        "percentiles of each step on its own (they do not add up to the total's percentile).",
        "",
        "## Total due -> run activity started, per run",
        "",
        *summary_table(rounds),
        "",
    ]
    body = (
        "\n".join(title)
        + "\n"
        + "\n".join(
            render_round(i, phases, args.objects, args.seconds)
            for i, phases in enumerate(rounds, 1)
        )
    )
    out = (
        Path(args.out)
        if args.out
        else RESULTS_DIR
        / (f"start-breakdown-{stamp:%Y-%m-%d-%H%M}-{'file' if file_backed else 'in-memory'}.md")
    )
    out.write_text(body)
    print("\n".join(summary_table(rounds)))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
