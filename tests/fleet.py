"""Machinery for the fleet tests and the chaos run: a dev server subprocess that can be
restarted on the same database, a fleet of `python worker.py` subprocesses, and a recording
HTTP server that plays both the schedule's webhooks and the ledger's far side.

Used by `tests/test_chaos.py` (fast variant), `tests/test_fleet.py` (topology) and
`python -m bench.chaos` (long variant). Everything is checked from what the HTTP server
recorded and from Temporal's own records (child workflow results), never from timings.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, TypeVar

from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client, WorkflowExecutionStatus

from durability.client import DurabilityClient
from durability.connect import connect
from durability.devserver import dev_server_extra_args, temporal_cli

PROJECT_ROOT = Path(__file__).resolve().parent.parent
INTERRUPTED = "ScheduledRunInterruptedError"
TIMED_OUT = "ScheduledRunTimeoutError"

T = TypeVar("T")
Log = Callable[[str], None]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _quiet(_message: str) -> None:
    pass


# --------------------------------------------------------------------------- dev server


class DevServer:
    """`temporal server start-dev` as a subprocess on a database file, so it can be stopped
    and started again on the same port with everything it had."""

    def __init__(self, directory: Path, name: str = "chaos") -> None:
        self.directory = directory
        self.db = directory / f"{name}.db"
        self.port = free_port()
        self.ui_port = free_port()
        self.log_path = directory / f"{name}-dev-server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._log: IO[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        return [
            temporal_cli(),
            "server",
            "start-dev",
            "--db-filename",
            str(self.db),
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--ui-port",
            str(self.ui_port),
            "--headless",
            "--log-level",
            "error",
            *dev_server_extra_args(),
        ]

    async def start(self, timeout: float = 60) -> None:
        if self._log is None:
            self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.argv(), stdout=self._log, stderr=subprocess.STDOUT, cwd=self.directory
        )
        await self.wait_ready(timeout)

    async def wait_ready(self, timeout: float) -> None:
        """Until the frontend answers and the default namespace exists."""
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"dev server exited with {self.process.returncode}; see {self.log_path}"
                )
            try:
                client = await connect({"TEMPORAL_ADDRESS": self.address})
                await client.workflow_service.describe_namespace(
                    DescribeNamespaceRequest(namespace="default")
                )
                return
            except Exception as error:  # not up yet
                last = error
                await asyncio.sleep(0.25)
        raise RuntimeError(f"dev server not ready after {timeout}s: {last!r}")

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        deadline = time.monotonic() + timeout
        while process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        if process.poll() is None:
            process.kill()
            await asyncio.to_thread(process.wait)

    async def restart(self, sig: int = signal.SIGTERM) -> None:
        """Stop it (SIGTERM, or SIGKILL) and start it again on the same port and database."""
        await self.stop(sig)
        await self.start()
        self.restarts += 1

    async def close(self) -> None:
        await self.stop()
        if self._log is not None:
            self._log.close()
            self._log = None


# --------------------------------------------------------------------------- worker fleet


@dataclass
class WorkerSlot:
    index: int
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0


class WorkerFleet:
    """N `python worker.py` subprocesses polling one task queue."""

    def __init__(
        self,
        address: str,
        task_queue: str,
        size: int,
        directory: Path,
        env: dict[str, str] | None = None,
    ) -> None:
        self.address = address
        self.task_queue = task_queue
        self.directory = directory
        self.extra_env = dict(env or {})
        self.slots = [WorkerSlot(index) for index in range(size)]
        self.kills = 0
        self.unexpected_exits = 0
        self._logs: dict[int, IO[bytes]] = {}

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            TEMPORAL_ADDRESS=self.address,
            TEMPORAL_NAMESPACE="default",
            DURABILITY_TASK_QUEUE=self.task_queue,
            DURABILITY_METRICS_PORT="0",
            DURABILITY_DRAIN_SECONDS="2",
            DURABILITY_LOG_LEVEL="WARNING",
            # The webhooks call the Recorder (127.0.0.1, a free port); `env` may override.
            DURABILITY_WEBHOOK_ALLOWED_URLS="http://127.0.0.1:*/",
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    def log_path(self, index: int) -> Path:
        return self.directory / f"worker-{index}.log"

    def start_one(self, index: int) -> None:
        slot = self.slots[index]
        log = self._logs.get(index)
        if log is None:
            log = self._logs[index] = self.log_path(index).open("ab")
        slot.process = subprocess.Popen(
            [sys.executable, str(PROJECT_ROOT / "worker.py")],
            env=self.environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=PROJECT_ROOT,
        )
        slot.starts += 1

    def start(self) -> None:
        for slot in self.slots:
            self.start_one(slot.index)

    def alive(self) -> list[int]:
        return [
            slot.index
            for slot in self.slots
            if slot.process is not None and slot.process.poll() is None
        ]

    def kill(self, index: int) -> None:
        """SIGKILL: no drain, no goodbye; whatever it was running is lost mid-flight."""
        process = self.slots[index].process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.kills += 1

    def revive(self) -> list[int]:
        """Start every worker that is not running; count those that exited on their own."""
        started: list[int] = []
        for slot in self.slots:
            process = slot.process
            if process is not None and process.poll() is None:
                continue
            if process is not None and process.returncode != -signal.SIGKILL:
                self.unexpected_exits += 1
            self.start_one(slot.index)
            started.append(slot.index)
        return started

    async def stop(self, timeout: float = 20) -> None:
        for slot in self.slots:
            if slot.process is not None and slot.process.poll() is None:
                slot.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        for index in self.alive():
            self.kill(index)
        for log in self._logs.values():
            log.close()
        self._logs.clear()


# --------------------------------------------------------------------------- recorder


@dataclass
class RunPost:
    """One POST of the run webhook, as the far side saw it."""

    key: str
    header_key: str | None
    body: dict[str, Any]
    received_at: float
    slow: bool
    finished: bool = False
    client_gone: bool = False


@dataclass
class OutcomePost:
    key: str
    header_key: str | None
    body: dict[str, Any]
    answered: int


@dataclass
class Recorder:
    """A ThreadingHTTPServer on 127.0.0.1 that records every call and checks, as it goes,
    what only the far side can see.

    - `POST /run`: a run (sometimes slow, so kills land mid-run). When the caller is gone by
      the time the handler finishes (its worker was killed), the run is marked `client_gone`.
    - `POST /outcome`: an outcome delivery (sometimes answered 503 to exercise retries).
    - `POST /requests`, `GET /requests/<id>`: the ledger's far side. A submit is `applied`
      or sometimes `accepted` (then `applied` on a later query); an unknown ID on query is
      `unresolved`. Each call is in flight while its handler runs (with a short sleep): a
      canvas with two different requests in flight at once is a violation, as is a canvas
      sent a new request while another request on it is open (sent, not yet applied).
    """

    seed: int = 0
    slow_run_rate: float = 0.3
    slow_run_s: tuple[float, float] = (0.3, 1.5)
    fast_run_s: tuple[float, float] = (0.01, 0.05)
    outcome_fail_rate: float = 0.05
    accepted_rate: float = 0.25
    ledger_sleep_s: tuple[float, float] = (0.01, 0.05)
    base_url: str = ""
    runs: dict[str, list[RunPost]] = field(default_factory=lambda: defaultdict(list))
    outcomes: dict[str, list[OutcomePost]] = field(default_factory=lambda: defaultdict(list))
    bad_keys: list[str] = field(default_factory=list)
    bodies: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    request_canvases: dict[str, list[str]] = field(default_factory=dict)
    request_state: dict[str, str] = field(default_factory=dict)
    ledger_calls: Counter[str] = field(default_factory=Counter)
    in_flight: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    open_canvases: dict[str, str] = field(default_factory=dict)
    canvas_overlaps: list[str] = field(default_factory=list)
    canvas_open_conflicts: list[str] = field(default_factory=list)
    same_request_overlaps: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def uniform(self, bounds: tuple[float, float]) -> float:
        with self.lock:
            return self._random.uniform(*bounds)

    def chance(self, rate: float) -> bool:
        with self.lock:
            return self._random.random() < rate

    def start(self) -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _recorder_handler(self))
        self._httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    # -- schedule webhooks

    def run_started(self, header_key: str | None, body: dict[str, Any]) -> RunPost:
        key = f"{body.get('object_id')}:{body.get('scheduled_time')}"
        post = RunPost(key, header_key, body, time.time(), slow=self.chance(self.slow_run_rate))
        with self.lock:
            self.runs[key].append(post)
            if header_key != key or body.get("idempotency_key") != key:
                self.bad_keys.append(f"run {key}: header {header_key!r}")
        return post

    def outcome_received(self, header_key: str | None, body: dict[str, Any]) -> int:
        run = body.get("run") or {}
        key = f"{run.get('object_id')}:{run.get('scheduled_time')}"
        answer = 503 if self.chance(self.outcome_fail_rate) else 200
        with self.lock:
            self.outcomes[key].append(OutcomePost(key, header_key, body, answer))
            if header_key != key:
                self.bad_keys.append(f"outcome {key}: header {header_key!r}")
        return answer

    # -- ledger far side

    def ledger_enter(self, request_id: str, header_key: str | None, raw: bytes | None) -> None:
        with self.lock:
            if header_key != request_id:
                self.bad_keys.append(f"request {request_id}: header {header_key!r}")
            if raw is not None:
                body = json.loads(raw)
                canonical = json.dumps(body, sort_keys=True)
                self.bodies[request_id].add(hashlib.sha256(canonical.encode()).hexdigest())
                self.request_canvases.setdefault(request_id, list(body.get("canvas_ids") or []))
                self.ledger_calls["submit"] += 1
                if self.request_state.get(request_id) != "applied":
                    for canvas in self.request_canvases[request_id]:
                        holder = self.open_canvases.get(canvas)
                        if holder is not None and holder != request_id:
                            self.canvas_open_conflicts.append(
                                f"canvas {canvas}: {request_id} sent while {holder} is open"
                            )
                        self.open_canvases[canvas] = request_id
            else:
                self.ledger_calls["query"] += 1
            for canvas in self.request_canvases.get(request_id, []):
                flying = self.in_flight[canvas]
                others = [r for r, n in flying.items() if n and r != request_id]
                if others:
                    self.canvas_overlaps.append(
                        f"canvas {canvas}: {request_id} in flight with {others}"
                    )
                if flying[request_id]:
                    self.same_request_overlaps += 1
                flying[request_id] += 1

    def ledger_cut(self, gone: bool) -> None:
        """Count a submit/query whose caller died while it was in flight."""
        if gone:
            with self.lock:
                self.ledger_calls["cut"] += 1

    def ledger_leave(self, request_id: str, submit: bool) -> dict[str, Any]:
        """Decide the answer and leave the in-flight set."""
        with self.lock:
            for canvas in self.request_canvases.get(request_id, []):
                self.in_flight[canvas][request_id] -= 1
            state = self.request_state.get(request_id)
            if submit:
                if state is None:
                    state = "accepted" if self._random.random() < self.accepted_rate else "applied"
            elif state == "accepted":
                state = "accepted" if self._random.random() < self.accepted_rate else "applied"
            if state is None:
                return {"outcome": "unresolved", "error": "unknown request"}
            self.request_state[request_id] = state
            if state == "applied":
                for canvas in self.request_canvases.get(request_id, []):
                    if self.open_canvases.get(canvas) == request_id:
                        del self.open_canvases[canvas]
            return {"outcome": state}


def _client_gone(connection: socket.socket) -> bool:
    """The caller closed its end (its process died): readable with nothing to read."""
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        if not readable:
            return False
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _recorder_handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the caller is gone

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length", "0")))

        def do_POST(self) -> None:
            raw = self._body()
            key = self.headers.get("Idempotency-Key")
            if self.path == "/run":
                post = recorder.run_started(key, json.loads(raw))
                bounds = recorder.slow_run_s if post.slow else recorder.fast_run_s
                time.sleep(recorder.uniform(bounds))
                post.client_gone = _client_gone(self.connection)
                post.finished = not post.client_gone
                self._send(200, {"ok": True})
            elif self.path == "/outcome":
                answer = recorder.outcome_received(key, json.loads(raw))
                self._send(answer, {"ok": answer == 200})
            elif self.path == "/requests":
                request_id = str(json.loads(raw).get("id", ""))
                recorder.ledger_enter(request_id, key, raw)
                time.sleep(recorder.uniform(recorder.ledger_sleep_s))
                recorder.ledger_cut(_client_gone(self.connection))
                self._send(200, recorder.ledger_leave(request_id, submit=True))
            else:
                self._send(404, {"error": self.path})

        def do_GET(self) -> None:
            if not self.path.startswith("/requests/"):
                self._send(404, {"error": self.path})
                return
            request_id = self.path.rsplit("/", 1)[-1]
            recorder.ledger_enter(request_id, self.headers.get("Idempotency-Key"), None)
            time.sleep(recorder.uniform(recorder.ledger_sleep_s))
            recorder.ledger_cut(_client_gone(self.connection))
            self._send(200, recorder.ledger_leave(request_id, submit=False))

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


# --------------------------------------------------------------------------- chaos run


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
    settle_timeout_s: float = 90.0
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
        ]
        figures += [f"{name}={count}" for name, count in self.counts().items()]
        return "chaos: " + " ".join(figures)

    def failures(self) -> str:
        lines = []
        for name, found in self.violations.items():
            if found:
                lines.append(f"{name} ({len(found)}): " + "; ".join(found[:5]))
        return "\n".join(lines)


async def retrying(
    call: Callable[[], Awaitable[T]],
    what: str,
    timeout: float = 180,
    attempt_s: float = 60,
    log: Log = _quiet,
) -> T:
    """Retry a client call through server restarts and dead workers."""
    deadline = time.monotonic() + timeout
    attempt = 0
    while True:
        attempt += 1
        try:
            return await asyncio.wait_for(call(), attempt_s)
        except Exception as error:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} kept failing: {error!r}") from error
            if attempt == 1 or attempt % 10 == 0:
                log(f"{what}: attempt {attempt} failed ({error!r:.160}); retrying")
            await asyncio.sleep(0.5)


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
        durability = DurabilityClient(temporal, queue)
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
        feeding = asyncio.create_task(
            _feed_ledgers(durability, plan, ledger_options, config.window_s * 0.85, log)
        )
        pokes = Pokes(temporal, object_ids, list(plan), config, rng, log)
        chaos = asyncio.create_task(
            _chaos(config, rng, fleet, server, stop_chaos, log, after_revive=pokes.start)
        )
        await asyncio.sleep(config.window_s)
        stop_chaos.set()
        await chaos
        await pokes.finish()
        report.updates_after_restarts = pokes.sent
        await feeding
        fleet.revive()
        log(f"window over: {fleet.kills} kills, {server.restarts} server restart(s); settling")
        await asyncio.gather(
            *(
                retrying(
                    lambda object_id=object_id: durability.cancel_schedule(  # type: ignore[misc]
                        object_id
                    ),
                    f"cancel {object_id}",
                    log=log,
                )
                for object_id in object_ids
            )
        )
        settled = await _settle(durability, object_ids, list(plan), config, fleet, log)
        await _check(report, recorder, temporal, durability, prefix, object_ids, plan, settled)
        report.violations["updates_refused"] = pokes.refused
        report.violations["failed_workflow_tasks"] = await _failed_workflow_tasks(temporal, report)
        report.kills = fleet.kills
        report.unexpected_worker_exits = fleet.unexpected_exits
        report.server_restarts = server.restarts
    finally:
        if fleet is not None:
            await fleet.stop()
        await server.close()
        recorder.close()
    report.elapsed_s = time.monotonic() - began
    return report


async def _feed_ledgers(
    durability: DurabilityClient,
    plan: dict[str, list[Any]],
    options: dict[str, Any],
    over_s: float,
    log: Log,
) -> None:
    """Enqueue the planned operations in batches of 5, spread over `over_s` seconds."""
    batches = [
        (ledger_id, ops[start : start + 5])
        for ledger_id, ops in plan.items()
        for start in range(0, len(ops), 5)
    ]
    batches.sort(key=lambda batch: int(batch[1][0]["id"].removeprefix("op-")))
    pause = over_s / max(1, len(batches))
    for ledger_id, ops in batches:
        await retrying(
            lambda ledger_id=ledger_id, ops=ops: durability.enqueue(  # type: ignore[misc]
                ledger_id, ops, options=options
            ),
            f"enqueue into {ledger_id}",
            timeout=240,
            log=log,
        )
        await asyncio.sleep(pause)


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

    async def finish(self) -> None:
        await asyncio.gather(*self._tasks)


async def _failed_workflow_tasks(temporal: Client, report: ChaosReport) -> list[str]:
    """Every WORKFLOW_TASK_FAILED event, of any cause, in every execution on the server."""
    executions = [
        (execution.id, execution.run_id) async for execution in temporal.list_workflows("")
    ]
    report.workflow_executions = len(executions)
    limit = asyncio.Semaphore(16)
    failed: list[str] = []

    async def scan(workflow_id: str, run_id: str) -> None:
        async with limit:
            handle = temporal.get_workflow_handle(workflow_id, run_id=run_id)
            async for event in handle.fetch_history_events():
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                    attributes = event.workflow_task_failed_event_attributes
                    failed.append(
                        f"{workflow_id} event {event.event_id}: cause {attributes.cause}: "
                        f"{attributes.failure.message[:200]}"
                    )

    await asyncio.gather(*(scan(workflow_id, run_id) for workflow_id, run_id in executions))
    return sorted(failed)


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
) -> Settled:
    """Wait until every run is acknowledged, every ScheduledRun closed and every operation
    resolved (or the timeout passes: whatever is left is reported)."""
    deadline = time.monotonic() + config.settle_timeout_s
    state = Settled({}, {}, -1)
    while True:
        fleet.revive()
        try:
            state = await _observe(durability, object_ids, ledger_ids)
        except Exception as error:
            log(f"settle: observation failed: {error!r}")
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
        if time.monotonic() > deadline:
            log(
                f"settle timed out: runs left {state.schedules_with_runs}, "
                f"running children {state.running_children}, unresolved ops {unresolved}"
            )
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
    temporal: Client, prefix: str
) -> dict[str, tuple[WorkflowExecutionStatus | None, dict[str, Any] | None]]:
    """Every ScheduledRun of this chaos run: key -> (status, result)."""
    found: dict[str, WorkflowExecutionStatus | None] = {}
    async for execution in temporal.list_workflows("WorkflowType = 'ScheduledRun'"):
        if execution.id.startswith(f"schedule-run:{prefix}-"):
            found[execution.id.removeprefix("schedule-run:")] = execution.status
    limit = asyncio.Semaphore(16)

    async def result(key: str) -> dict[str, Any] | None:
        if found[key] != WorkflowExecutionStatus.COMPLETED:
            return None
        async with limit:
            value: dict[str, Any] = await retrying(
                lambda: temporal.get_workflow_handle(f"schedule-run:{key}").result(),
                f"result of {key}",
                timeout=60,
            )
            return value

    keys = sorted(found)
    values = await asyncio.gather(*(result(key) for key in keys))
    return {key: (found[key], value) for key, value in zip(keys, values, strict=True)}


async def _check(
    report: ChaosReport,
    recorder: Recorder,
    temporal: Client,
    durability: DurabilityClient,
    prefix: str,
    object_ids: list[str],
    plan: dict[str, list[Any]],
    settled: Settled,
) -> None:
    """Compare what the HTTP server recorded with what Temporal says each run ended with."""
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
    children = await _child_results(temporal, prefix)
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
    for key in sorted(set(children) | set(runs)):
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
        if not result.get("delivered"):
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
