"""A recording HTTP server on 127.0.0.1: the schedule's webhooks and the ledger's far side,
with checks of what it received."""

from __future__ import annotations

import hashlib
import json
import random
import select
import socket
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from harness.http import QuietHandler


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
    - `POST /outcome`: an outcome delivery (sometimes answered 503 to exercise retries; held
      in flight for `outcome_sleep_s` when that is set).
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
    outcome_sleep_s: tuple[float, float] = (0.0, 0.0)  # how long each delivery stays in flight
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
    outcomes_in_flight: int = 0
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

    def runs_finished_since(self, moment: float) -> int:
        """Run webhooks received after `moment` (epoch s) whose handler has finished."""
        with self.lock:
            return sum(
                1
                for posts in self.runs.values()
                for post in posts
                if post.finished and post.received_at > moment
            )

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
    class Handler(QuietHandler):
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
                if recorder.outcome_sleep_s[1] > 0:
                    with recorder.lock:
                        recorder.outcomes_in_flight += 1
                    time.sleep(recorder.uniform(recorder.outcome_sleep_s))
                    with recorder.lock:
                        recorder.outcomes_in_flight -= 1
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

    return Handler
