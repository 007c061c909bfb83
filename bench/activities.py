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

import httpx
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
    http_base_url: str = ""
    _http: httpx.AsyncClient | None = None

    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=10.0)
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


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


@activity.defn(name="bench_compile")
async def bench_compile(intent: dict[str, Any], request_id: str) -> dict[str, Any]:
    """Pass-through compile for the ledger, when the product has none built in."""
    canvases = sorted(set(intent.get("participants") or []))
    return {
        "kind": intent["operation_type"],
        "payload": intent.get("payload"),
        "canvas_ids": canvases,
        "expected_versions": dict.fromkeys(canvases, 0),
        "protocol_version": intent.get("protocol_version", 1),
    }


@activity.defn(name="bench_submit")
async def bench_submit(request: dict[str, Any]) -> dict[str, Any]:
    """HTTP submit to the local server, when the product has none built in."""
    response = await RECORDER.http().post(
        f"{RECORDER.http_base_url}/requests",
        json=request,
        headers={"Idempotency-Key": str(request.get("idempotency_key", request["id"]))},
    )
    return dict(response.json())


@activity.defn(name="bench_query")
async def bench_query(request: dict[str, Any]) -> dict[str, Any]:
    response = await RECORDER.http().get(f"{RECORDER.http_base_url}/requests/{request['id']}")
    return dict(response.json())


BENCH_ACTIVITIES: list[Callable[..., Any]] = [
    bench_run,
    bench_sleep_run,
    bench_outcome,
    bench_mark,
    bench_noop,
    bench_compile,
    bench_submit,
    bench_query,
]
