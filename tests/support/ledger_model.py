"""The ledger core's test model, shared by its rule tests and the tests built on them:
operation intents, a fresh state, dispatching and finishing by hand, hypothesis strategies
for operation graphs and far-side answers, and `Driver`, which plays the shell around the
pure core and checks the claims against its own record."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from workflows.ledger import core
from workflows.ledger.models import LedgerConfig, LedgerState, RequestAction, RequestReport


def intent(op_id: str, participants: list[Any], deps: list[str] | None = None, **extra: Any) -> Any:
    """An operation intent as a caller enqueues it."""
    return {
        "id": op_id,
        "operation_type": extra.pop("operation_type", "shape.update"),
        "participants": participants,
        "dependencies": deps or [],
        "payload": {"op": op_id},
        **extra,
    }


def passthrough(state: LedgerState, op_id: str) -> dict[str, Any]:
    """The compile result that sends the operation's payload as it is."""
    record = state.operations[op_id].intent
    return {
        "kind": record.operation_type,
        "payload": record.payload,
        "canvas_ids": sorted(set(record.participants)),
        "expected_versions": {},
        "protocol_version": record.protocol_version,
    }


def fresh(*intents: Any) -> LedgerState:
    """A ledger state with `intents` enqueued."""
    state = LedgerState(ledger_id="L")
    core.enqueue(state, core.validate_enqueue(state, {"operations": list(intents)}))
    return state


def dispatch_all(state: LedgerState, config: LedgerConfig) -> list[str]:
    """Plan, reserve and freeze everything plannable now; returns the frozen request IDs."""
    frozen = []
    for op_id in core.plan_dispatches(state, config):
        request_id = f"r-{op_id}"
        core.begin_dispatch(state, op_id, request_id)
        if core.freeze(state, config, op_id, request_id, passthrough(state, op_id)) == "launch":
            frozen.append(request_id)
    return frozen


def finish(state: LedgerState, request_id: str, outcome: str, **status: Any) -> None:
    phase = "blocked" if status.get("blocked") else "resolved"
    core.record_finished(
        state,
        RequestReport(
            request_id=request_id,
            phase=phase,
            status={"outcome": outcome, **status},
            attempt=1,
            next_action="submit",
        ),
    )


CANVASES = ["c0", "c1", "c2", "c3"]
TYPES = ["shape.update", "text.edit", "asset.upload", "run.cancel"]


@st.composite
def graphs(draw: st.DrawFn) -> list[dict[str, Any]]:
    count = draw(st.integers(1, 12))
    ops = []
    for n in range(count):
        deps = draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=2)) if n else []
        ops.append(
            {
                "id": f"op{n}",
                "operation_type": draw(st.sampled_from(TYPES)),
                "participants": draw(st.lists(st.sampled_from(CANVASES), max_size=3)),
                "dependencies": sorted({f"op{d}" for d in deps}),
                "payload": {"n": n},
                "protocol_version": draw(st.sampled_from([1, 1, 1, 1, 2])),
            }
        )
    return ops


STATUSES = st.one_of(
    st.just({"outcome": "applied"}),
    st.just({"outcome": "rejected", "error": "conflict"}),
    st.just({"outcome": "accepted"}),
    st.just({"outcome": "unresolved"}),
    st.builds(lambda ms: {"outcome": "unresolved", "retry_after_ms": ms}, st.integers(0, 5000)),
    st.just({"outcome": "unresolved", "blocked": True, "error": "http 401"}),
    st.just({"outcome": "accepted", "blocked": True, "error": "http 403"}),
    st.just("garbage"),
)


@dataclass
class Driver:
    """Plays the shell: compiles, child loops (including a loop's late report after it was
    relaunched), resumes, holds, continue-as-new. Claims are checked against the driver's
    own record of who took which canvas when, not rebuilt from the state's requests."""

    config: LedgerConfig
    state: LedgerState
    now: int = 0
    next_id: int = 0
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    # request -> (action, attempt, launch) of its running loop
    loops: dict[str, tuple[RequestAction, int, int]] = field(default_factory=dict)
    # The model: canvas -> request holding it, operation -> its request, loops per request.
    claims: dict[str, str] = field(default_factory=dict)
    request_of: dict[str, str] = field(default_factory=dict)
    launches: dict[str, int] = field(default_factory=dict)
    stale_reports: int = 0

    def take(self, request_id: str, canvases: list[str]) -> None:
        for canvas in set(canvases):
            assert canvas not in self.claims, (
                f"{canvas} planned while {self.claims[canvas]} holds it"
            )
            self.claims[canvas] = request_id

    def free(self, request_id: str) -> None:
        self.claims = {c: r for c, r in self.claims.items() if r != request_id}

    def pump(self) -> None:
        for request_id in core.plan_launches(self.state, self.config):
            request = core.mark_launched(self.state, request_id)
            self.launches[request_id] += 1
            assert request.launch == self.launches[request_id]
            self.loops[request_id] = (request.retry_action, request.attempt, request.launch)
        for op_id in core.plan_dispatches(self.state, self.config):
            intent = self.state.operations[op_id].intent
            for dependency in intent.dependencies:
                assert self.state.operations[dependency].phase == "resolved", (op_id, dependency)
            self.next_id += 1
            core.begin_dispatch(self.state, op_id, f"r{self.next_id}")
            self.take(f"r{self.next_id}", intent.participants)

    def compile(self, op_id: str, kind: str) -> None:
        request_id = self.state.compiling[op_id]
        if kind == "error":
            core.block_compile(self.state, op_id, "compile exploded")
            self.free(request_id)  # nothing frozen: the canvases go back
            return
        compiled = passthrough(self.state, op_id)
        if kind == "mismatch":
            compiled["canvas_ids"] = ["elsewhere"]
        protocol = self.state.operations[op_id].intent.protocol_version
        verdict = core.freeze(self.state, self.config, op_id, request_id, compiled)
        if kind == "mismatch":  # the operation is blocked, nothing frozen
            assert verdict == "blocked"
            self.free(request_id)
            return
        self.request_of[op_id] = request_id
        self.launches[request_id] = 1
        self.bodies[request_id] = copy.deepcopy(self.state.requests[request_id].body)
        if protocol in self.config.supported_protocol_versions and self.state.holds:
            # Held while it compiled: recorded, never sent until released (L12).
            assert verdict == "deferred"
            assert not core.may_have_reached_far_side(self.state.requests[request_id])
            self.launches[request_id] = 0
        elif protocol in self.config.supported_protocol_versions:
            assert verdict == "launch"
            self.loops[request_id] = (RequestAction.SUBMIT, 0, 1)
        else:  # frozen but never sent: blocked, its canvases kept until skip
            assert verdict == "blocked"

    def send(self, request_id: str, status: Any) -> None:
        action, attempt, launch = self.loops.pop(request_id)
        # Every send carries the recorded body, unchanged since it was frozen.
        assert self.state.requests[request_id].body == self.bodies[request_id]
        attempt += 1
        step = core.next_step(action, status, attempt, self.config.retry, self.now)
        dumped = step.status.model_dump(mode="json", exclude_none=True)
        if step.result == "retry":
            assert step.delay_ms >= 1
            assert core.record_attempt(
                self.state,
                RequestReport(
                    request_id=request_id,
                    phase="in_flight",
                    status=dumped,
                    attempt=attempt,
                    next_action=step.next_action,
                    retry_at=step.retry_at,
                    launch=launch,
                ),
            )
            self.loops[request_id] = (step.next_action, attempt, launch)
            self.now += step.delay_ms
            return
        assert core.record_finished(
            self.state,
            RequestReport(
                request_id=request_id,
                phase="resolved" if step.result == "resolved" else "blocked",
                status=dumped,
                attempt=attempt,
                next_action=step.next_action,
                launch=launch,
            ),
        )
        if step.result == "resolved":
            self.free(request_id)

    def late_report(self, request_id: str, status: Any, final: bool) -> None:
        """A report from an earlier loop of a relaunched request (its workflow closed late):
        ignored, whatever it says."""
        launch = self.launches[request_id]
        assert launch > 1
        before = self.state.model_dump()
        step = core.next_step(RequestAction.SUBMIT, status, 1, self.config.retry, self.now)
        report = RequestReport(
            request_id=request_id,
            phase=("resolved" if step.result == "resolved" else "blocked")
            if final
            else "in_flight",
            status=step.status.model_dump(mode="json", exclude_none=True),
            attempt=1,
            next_action=step.next_action,
            retry_at=step.retry_at,
            launch=launch - 1,
        )
        recorded = (core.record_finished if final else core.record_attempt)(self.state, report)
        assert not recorded
        assert self.state.model_dump() == before
        self.stale_reports += 1

    def skip(self, op_id: str) -> None:
        core.skip(self.state, op_id, "given up")
        if op_id in self.request_of:
            self.free(self.request_of[op_id])

    def continue_as_new(self) -> None:
        carried = LedgerState.model_validate_json(self.state.model_dump_json())
        core.recover(carried)  # must never find a conflict
        self.state = carried

    def check(self) -> None:
        state, config = self.state, self.config
        assert state.claims == self.claims
        total, by_type = core.in_flight(state)
        assert total <= config.concurrency
        for kind, lane in config.lanes.items():
            assert by_type[kind] <= lane
        running = {r.id for r in state.requests.values() if r.phase == "in_flight"}
        assert running == set(self.loops)
        for request_id, body in self.bodies.items():
            assert state.requests[request_id].body == body
            assert body["idempotency_key"] == request_id == body["id"]
        resolved = {i for i, r in state.operations.items() if r.phase == "resolved"}
        resolved |= set(state.forgotten)
        for record in state.operations.values():
            if record.phase == "blocked":
                assert record.blockers and all(record.blockers)
            waiting = core.waiting_for(state, record)
            if record.phase in ("pending", "blocked"):
                assert waiting == sorted(set(record.intent.dependencies) - resolved), record
            else:
                assert waiting == [], record
            if record.phase == "pending" and not record.blockers:
                unready = record.intent.id in state.compiling or waiting
                assert core.is_ready(state, record) == (not unready), record
