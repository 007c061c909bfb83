"""Support for the ledger tests: a recording HTTP server on 127.0.0.1, a ledger worker, and the
set-up several ledger tests share (start, enqueue, wait until every operation is resolved or
blocked, record a history)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from activities.ledger import compile_passthrough, ledger_activities
from durability.registry import workflow_runner
from harness.http import JSON, QuietHandler
from tests.support.helpers import cache_options, eventually, recording_histories, save_history
from workflows.ledger import request_workflow_id
from workflows.ledger.models import LedgerInput, RetryConfig
from workflows.ledger.request import FrozenRequestWorkflow
from workflows.ledger.workflow import OperationLedgerWorkflow

Answer = tuple[int, dict[str, str], Any]
# (method, request_id, how many times this method was called for this request) -> answer
Responder = Callable[[str, str, int], Answer]
# An answer's header that is not sent: the handler waits this many seconds before answering
# (outside the server's lock, so other requests are answered meanwhile).
DELAY_HEADER = "X-Test-Delay-S"
# The `method` of a POST to `/complete` (the `http_complete` webhook), body
# `{"request", "status"}`; a 200 with any answer but `{"blocked": true}` accepts.
COMPLETE = "COMPLETE"


def applied(_method: str, _request_id: str, _count: int) -> Answer:
    """Accept on POST, `applied` on GET: exercises submit then query."""
    if _method == "POST":
        return 202, {}, {"outcome": "accepted"}
    return 200, {}, {"outcome": "applied"}


@dataclass
class Received:
    method: str
    request_id: str
    key: str | None
    body: str | None
    sequence: int


@dataclass
class LedgerServer:
    """Records every request and checks, as the far side sees it, that no canvas ever has two
    requests open (first POST until answered applied/rejected) and no request ID two bodies.
    `max_open` counts requests open at once (a request waiting for its retry is open but holds
    no slot, L4); `max_calls` counts calls being answered at once (attempts in progress)."""

    responder: Responder = applied
    received: list[Received] = field(default_factory=list)
    bodies: dict[str, str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    open_canvases: dict[str, str] = field(default_factory=dict)
    open_requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    first_post: dict[str, int] = field(default_factory=dict)
    resolved_at: dict[str, int] = field(default_factory=dict)
    max_open: int = 0
    max_open_by_kind: Counter[str] = field(default_factory=Counter)
    calls: Counter[str] = field(default_factory=Counter)  # by kind, being answered now
    max_calls: int = 0
    max_calls_by_kind: Counter[str] = field(default_factory=Counter)
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    base_url: str = ""

    def handle(self, method: str, request_id: str, key: str | None, raw: bytes | None) -> Answer:
        with self.lock:
            sequence = len(self.received)
            text = raw.decode() if raw is not None else None
            self.received.append(Received(method, request_id, key, text, sequence))
            if key != request_id:
                self.violations.append(f"{method} {request_id} carried key {key!r}")
            if method == "POST" and text is not None:
                canonical = json.dumps(json.loads(text), sort_keys=True)
                if self.bodies.setdefault(request_id, canonical) != canonical:
                    self.violations.append(f"{request_id} was sent two different bodies")
                body = json.loads(text)
                if request_id not in self.resolved_at and request_id not in self.open_requests:
                    for canvas in body.get("canvas_ids", []):
                        holder = self.open_canvases.get(canvas)
                        if holder is not None and holder != request_id:
                            self.violations.append(
                                f"canvas {canvas} open for {holder} and {request_id}"
                            )
                        self.open_canvases[canvas] = request_id
                    self.open_requests[request_id] = body
                    self.first_post.setdefault(request_id, sequence)
                    self.max_open = max(self.max_open, len(self.open_requests))
                    kinds = Counter(b["kind"] for b in self.open_requests.values())
                    for kind, count in kinds.items():
                        self.max_open_by_kind[kind] = max(self.max_open_by_kind[kind], count)
            self.counts[(method, request_id)] += 1
            answer = self.responder(method, request_id, self.counts[(method, request_id)])
            if method == COMPLETE:
                return answer  # the client's completion hook: not the far side's state
            outcome = answer[2].get("outcome") if isinstance(answer[2], dict) else None
            if 200 <= answer[0] < 300 and outcome in ("applied", "rejected"):
                self.resolved_at.setdefault(request_id, sequence)
                self.open_requests.pop(request_id, None)
                for canvas in [c for c, r in self.open_canvases.items() if r == request_id]:
                    del self.open_canvases[canvas]
            return answer

    def call_begins(self, request_id: str, raw: bytes | None) -> str:
        """A call arrives (before it is answered): count it in progress; returns its kind."""
        with self.lock:
            body = json.loads(raw) if raw else json.loads(self.bodies.get(request_id, "{}"))
            kind = str(body.get("kind", "?"))
            self.calls[kind] += 1
            self.max_calls = max(self.max_calls, sum(self.calls.values()))
            self.max_calls_by_kind[kind] = max(self.max_calls_by_kind[kind], self.calls[kind])
            return kind

    def call_ends(self, kind: str) -> None:
        with self.lock:
            self.calls[kind] -= 1

    def sent(self, request_id: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.request_id == request_id]


def _handler(server: LedgerServer) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        def _answer(self, answer: Answer) -> None:
            code, headers, body = answer
            headers = dict(headers)
            delay = float(headers.pop(DELAY_HEADER, 0))
            if delay:
                time.sleep(delay)
            self.answer(code, body, {**JSON, **headers})

        def do_POST(self) -> None:
            raw = self.request_body()
            key = self.headers.get("Idempotency-Key")
            if self.path.endswith("/complete"):
                request_id = (json.loads(raw).get("request") or {}).get("id", "")
                self._answer(server.handle(COMPLETE, request_id, key, raw))
                return
            request_id = json.loads(raw).get("id", "")
            kind = server.call_begins(request_id, raw)
            try:
                self._answer(server.handle("POST", request_id, key, raw))
            finally:
                server.call_ends(kind)

        def do_GET(self) -> None:
            request_id = self.path.rsplit("/", 1)[-1]
            key = self.headers.get("Idempotency-Key")
            kind = server.call_begins(request_id, None)
            try:
                self._answer(server.handle("GET", request_id, key, None))
            finally:
                server.call_ends(kind)

    return Handler


@contextmanager
def recording_server(responder: Responder = applied) -> Iterator[LedgerServer]:
    """A real ThreadingHTTPServer on 127.0.0.1 (free port) answering with `responder`."""
    state = LedgerServer(responder=responder)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.base_url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


@asynccontextmanager
async def ledger_worker(
    client: Client,
    task_queue: str,
    activities: list[Callable[..., Any]] | None = None,
    base_url: str = "http://127.0.0.1:9",
) -> AsyncIterator[Worker]:
    """A worker with only the ledger workflows (independent of the schedule package)."""
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[OperationLedgerWorkflow, FrozenRequestWorkflow],
        workflow_runner=workflow_runner(),
        activities=activities if activities is not None else ledger_activities(base_url),
        **cache_options(),
    )
    async with worker:
        yield worker


async def snapshot(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    """The ledger's `snapshot` query."""
    result: dict[str, Any] = await handle.query("snapshot")
    return result


def operations(snap: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Snapshot operations by ID."""
    return {o["id"]: o for o in snap["operations"]}


def requests(snap: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Snapshot requests by ID."""
    return {r["id"]: r for r in snap["requests"]}


def all_resolved_or_blocked(snap: dict[str, Any]) -> bool:
    """Every operation resolved or blocked and no request in flight."""
    return all(o["phase"] in ("resolved", "blocked") for o in snap["operations"]) and not any(
        r["phase"] == "in_flight" for r in snap["requests"]
    )


def intent(
    op_id: str,
    participants: list[str] | None = None,
    dependencies: list[str] | None = None,
    operation_type: str = "shape.update",
    **extra: Any,
) -> dict[str, Any]:
    """An operation intent as users send it."""
    return {
        "id": op_id,
        "operation_type": operation_type,
        "participants": participants if participants is not None else [],
        "dependencies": dependencies or [],
        "payload": {"op": op_id},
        **extra,
    }


# Retries fast enough for a test to see several attempts.
FAST_RETRY = RetryConfig(initial_interval_ms=50, backoff_coefficient=2.0, maximum_interval_ms=200)


def http_input(**overrides: Any) -> LedgerInput:
    """Ledger input using the HTTP activities and fast retries."""
    values: dict[str, Any] = {
        "submit_activity": "http_submit",
        "query_activity": "http_query",
        "retry": FAST_RETRY,
    }
    values.update(overrides)
    return LedgerInput(**values)


async def record_history(
    client: Client, workflow_id: str, name: str, run_id: str | None = None
) -> None:
    """When recording histories, save this run's as `ledger_<name>` for the replay test."""
    if recording_histories():
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        save_history(f"ledger_{name}", history)


async def start_ledger(
    client: Client, ledger_id: str, task_queue: str, config: LedgerInput
) -> WorkflowHandle[Any, Any]:
    """A ledger `ledger:<ledger_id>` started with `config`."""
    return await client.start_workflow(
        "OperationLedger", config, id=f"ledger:{ledger_id}", task_queue=task_queue
    )


@asynccontextmanager
async def live_ledger(
    client: Client, task_queue: str, ledger_id: str, answer: Responder = applied, **config: Any
) -> AsyncIterator[tuple[LedgerServer, WorkflowHandle[Any, Any]]]:
    """A recording HTTP server answering with `answer`, a worker whose HTTP activities call it,
    and a ledger started with `http_input(**config)`; the server's record outlives the block."""
    with recording_server(answer) as server:
        async with ledger_worker(client, task_queue, ledger_activities(server.base_url)):
            yield server, await start_ledger(client, ledger_id, task_queue, http_input(**config))


async def enqueue(handle: WorkflowHandle[Any, Any], *intents: dict[str, Any]) -> dict[str, Any]:
    """The `enqueue` update with these intents; its answer."""
    result: dict[str, Any] = await handle.execute_update(
        "enqueue", {"operations": list(intents)}, result_type=dict
    )
    return result


async def until_resolved_or_blocked(
    handle: WorkflowHandle[Any, Any], timeout: float = 30
) -> dict[str, Any]:
    """The snapshot once every operation is resolved or blocked."""

    async def check() -> dict[str, Any] | None:
        snap = await snapshot(handle)
        return snap if all_resolved_or_blocked(snap) else None

    result: dict[str, Any] = await eventually(check, timeout=timeout)
    return result


async def cancel_requested(
    client: Client, ledger_id: str, handle: WorkflowHandle[Any, Any]
) -> None:
    """Until the request workflow of the ledger's only request has asked to cancel its call."""

    async def asked() -> bool:
        [request] = (await snapshot(handle))["requests"]
        child = client.get_workflow_handle(request_workflow_id(ledger_id, request["id"]))
        events = [e.event_type async for e in child.fetch_history_events()]
        return EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED in events

    await eventually(asked, timeout=30)


async def in_flight_request(handle: WorkflowHandle[Any, Any], op_id: str) -> dict[str, Any]:
    """The operation's request once it is in flight and sent at least once."""

    async def sent() -> dict[str, Any] | None:
        snap = await snapshot(handle)
        request_id = operations(snap)[op_id]["request_id"]
        request = requests(snap).get(request_id) if request_id else None
        if request is not None and request["phase"] == "in_flight" and request["attempt"] >= 1:
            return request
        return None

    result: dict[str, Any] = await eventually(sent, timeout=30)
    return result


class BlockedCompletion:
    """Far-side activities whose `submit` and `query` answer `applied` and whose `complete`
    sets `started` and waits for `release`, without a heartbeat (a cancellation never reaches
    it): the window in which a ledger stops while a completion is still running."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

        @activity.defn(name="submit")
        async def submit(request: dict[str, Any]) -> dict[str, Any]:
            return {"outcome": "applied"}

        @activity.defn(name="query")
        async def query(request: dict[str, Any]) -> dict[str, Any]:
            return {"outcome": "applied"}

        @activity.defn(name="complete")
        async def complete(request: dict[str, Any], status: dict[str, Any]) -> None:
            self.started.set()
            await self.release.wait()

        self.activities: list[Callable[..., Any]] = [compile_passthrough, submit, query, complete]


@asynccontextmanager
async def ledger_with_blocked_completion(
    client: Client, task_queue: str, ledger_id: str
) -> AsyncIterator[tuple[BlockedCompletion, WorkflowHandle[Any, Any]]]:
    """A ledger that continues as new at 20 events and calls `complete`, on a worker whose
    far side's `complete` blocks (`BlockedCompletion`); yields the far side and the handle
    of the ledger's first run."""
    far_side = BlockedCompletion()
    async with ledger_worker(client, task_queue, far_side.activities):
        handle = await start_ledger(
            client,
            ledger_id,
            task_queue,
            LedgerInput(complete_activity="complete", continue_as_new_after_events=20),
        )
        yield far_side, handle
