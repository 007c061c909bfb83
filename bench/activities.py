"""The benchmark's own activities. They record, in this process, when each run started
(wall clock) against the time it was due, so every side is measured by the same clock at
the same point: the moment the worker begins the activity."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity


def now_ms() -> float:
    return time.time() * 1000.0


@dataclass
class Mark:
    key: str
    due_ms: int
    start_ms: float

    @property
    def lateness_ms(self) -> float:
        return self.start_ms - self.due_ms


@dataclass
class Recorder:
    """Samples by tag (one tag per scenario/side/level)."""

    marks: dict[str, list[Mark]] = field(default_factory=lambda: defaultdict(list))
    outcomes: dict[str, list[tuple[str, int, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    noops: int = 0


RECORDER = Recorder()


@activity.defn(name="bench_run")
async def bench_run(run: dict[str, Any]) -> None:
    """The durability schedule's run activity: record start time against `due_at`."""
    start = now_ms()
    tag = str((run.get("params") or {}).get("bench_tag", "untagged"))
    RECORDER.marks[tag].append(Mark(str(run["object_id"]), int(run["due_at"]), start))


@activity.defn(name="bench_outcome")
async def bench_outcome(run: dict[str, Any], outcome: dict[str, Any]) -> None:
    """The durability schedule's outcome activity: count completed runs."""
    tag = str((run.get("params") or {}).get("bench_tag", "untagged"))
    RECORDER.outcomes[tag].append(
        (str(run["object_id"]), int(run["scheduled_time"]), str(outcome.get("status")))
    )


@activity.defn(name="bench_sleep_run")
async def bench_sleep_run(run: dict[str, Any]) -> None:
    """A slow run: heartbeats for `params.sleep_ms` (the bounds scenario's schedule)."""
    deadline = time.monotonic() + (run.get("params") or {}).get("sleep_ms", 0) / 1000
    while time.monotonic() < deadline:
        activity.heartbeat()
        await asyncio.sleep(0.5)


@activity.defn(name="bench_mark")
async def bench_mark(args: dict[str, Any]) -> None:
    """Floors and native Schedules: record start time against the given due time."""
    start = now_ms()
    RECORDER.marks[str(args["tag"])].append(Mark(str(args["key"]), int(args["due_ms"]), start))


@activity.defn(name="bench_noop")
async def bench_noop() -> None:
    RECORDER.noops += 1


BENCH_ACTIVITIES: list[Callable[..., Any]] = [
    bench_run,
    bench_sleep_run,
    bench_outcome,
    bench_mark,
    bench_noop,
]
