"""The launch gate and the messages around it, decided by the core: nothing is launched while
held or stopped (L12) or past a slot (L4), nothing of an unsupported protocol is ever sent
(L11), a hold can be taken again with its own token, `skip` waits for `stop` to finish, and
every message refuses a field it does not know."""

from __future__ import annotations

from typing import Any

import pytest

from workflows.ledger import core
from workflows.ledger.models import (
    LedgerConfig,
    LedgerState,
    RequestAction,
    RequestPhase,
    RequestReport,
    StopInput,
)


def build(config: LedgerConfig, *ops: str, kind: str = "shape.update") -> LedgerState:
    state = LedgerState(ledger_id="L")
    intents = [
        {"id": op, "operation_type": kind, "participants": [f"c-{op}"], "payload": {"op": op}}
        for op in ops
    ]
    core.enqueue(state, core.validate_enqueue(state, {"operations": intents}, config), config)
    return state


def compiled(op_id: str, protocol_version: int = 1) -> dict[str, Any]:
    return {
        "canvas_ids": [f"c-{op_id}"],
        "payload": {"op": op_id},
        "protocol_version": protocol_version,
    }


def dispatch(state: LedgerState, config: LedgerConfig) -> list[tuple[str, str]]:
    return core.pump(state, config, 0, iter(f"r{n}" for n in range(1, 99)).__next__).dispatches


def waiting_report(request_id: str, attempt: int = 1) -> RequestReport:
    return RequestReport(
        request_id=request_id,
        phase="in_flight",
        status={"outcome": "unresolved"},
        attempt=attempt,
        next_action="query",
        retry_at=10,
        awaiting_grant=True,
    )


# ---------------------------------------------------------------- L12: hold during a compile


def test_a_hold_taken_while_an_operation_compiles_stops_its_first_submit() -> None:
    config = LedgerConfig()
    state = build(config, "a")
    [(op_id, request_id)] = dispatch(state, config)
    core.hold(state, "t")  # while `compile` runs
    assert core.freeze(state, config, op_id, request_id, compiled("a")) == "deferred"
    request = state.requests[request_id]
    assert request.phase == "frozen" and request.launch == core.NEVER_LAUNCHED
    assert state.claims == {"c-a": request_id}  # its canvases stay its own (L5)
    assert not core.may_have_reached_far_side(request)  # never sent: stop asks nothing
    assert core.pump(state, config, 0, lambda: "x").launches == []
    core.release(state, "t")
    [relaunched] = core.pump(state, config, 0, lambda: "x").launches
    assert relaunched.id == request_id and relaunched.launch == 1
    assert relaunched.retry_action == RequestAction.SUBMIT and relaunched.attempt == 0


def test_a_compile_ending_after_stop_or_past_a_lowered_concurrency_launches_nothing() -> None:
    config = LedgerConfig(concurrency=2, lanes={})
    state = build(config, "a", "b")
    started = dispatch(state, config)
    assert len(started) == 2
    (a_op, a_req), (b_op, b_req) = started
    assert core.freeze(state, config, a_op, a_req, compiled("a")) == "launch"
    lowered = config.model_copy(update={"concurrency": 1})  # `configure` while b compiles
    assert core.freeze(state, lowered, b_op, b_req, compiled("b")) == "deferred"
    assert core.in_flight(state)[0] == 1
    stopped = build(config, "c")
    [(c_op, c_req)] = dispatch(stopped, config)
    core.stop(stopped)
    assert core.freeze(stopped, config, c_op, c_req, compiled("c")) == "deferred"
    assert core.unknown_candidates(stopped) == []


def test_a_history_from_before_the_gate_launches_as_it_did() -> None:
    config = LedgerConfig()
    state = build(config, "a")
    [(op_id, request_id)] = dispatch(state, config)
    core.hold(state, "t")
    asked: list[bool] = []

    def before_the_gate() -> bool:
        asked.append(True)
        return False

    verdict = core.freeze(state, config, op_id, request_id, compiled("a"), before_the_gate)
    assert verdict == "launch" and asked == [True]


# ---------------------------------------------------------------- L11 after `configure`


def test_configure_removing_a_protocol_blocks_its_requests_and_never_sends_them() -> None:
    config = LedgerConfig(supported_protocol_versions=[1, 2], concurrency=4, lanes={})
    state = build(config, "a", "b", "c")
    for op_id, request_id in dispatch(state, config):
        assert core.freeze(state, config, op_id, request_id, compiled(op_id, 2)) == "launch"
    # a waits for its retry's grant, b was frozen by a stop-less interruption, c is mid-attempt
    assert core.record_attempt(state, waiting_report("r1"))
    core.request_interrupted(state, "r2", "stopped", stopped=True)
    narrowed = config.model_copy(update={"supported_protocol_versions": [1]})
    plan = core.pump(state, narrowed, 100, lambda: "x")
    assert plan.cancel == ["r1"]  # its waiting loop ends
    assert plan.grants == [] and plan.launches == []
    for request_id in ("r1", "r2"):
        request = state.requests[request_id]
        assert (request.phase, request.blocker) == ("blocked", core.INTERPRETER_UNAVAILABLE)
    assert core.resume(state, narrowed) == []  # resume leaves them blocked
    # Mid-attempt: its attempt finishes; once it waits, it is blocked, never granted.
    assert core.record_attempt(state, waiting_report("r3"))
    assert core.pump(state, narrowed, 100, lambda: "x").cancel == ["r3"]
    core.stop(state)
    assert core.plan_stop_queries(state, StopInput(), narrowed) == []  # never queried either
    assert {e["request_id"] for e in core.unknown_requests(state)} == {"r1", "r2", "r3"}


# ---------------------------------------------------------------- lanes, participants


@pytest.mark.parametrize("lane", [0, -1])
def test_a_lane_below_one_is_refused_at_start_and_by_configure(lane: int) -> None:
    with pytest.raises(core.InvalidRequest, match=rf"lanes.*{lane}"):
        core.parse_configure({"lanes": {"shape.update": lane}}, LedgerConfig())
    start = core.read_start(lambda: {"lanes": {"shape.update": lane}}, "ledger:x")
    assert start.error is not None and "lanes" in start.error and str(lane) in start.error


def test_an_operation_that_could_never_dispatch_is_refused_at_enqueue() -> None:
    config = LedgerConfig()
    state = LedgerState(ledger_id="L")
    lonely = {"operations": [{"id": "a", "operation_type": "shape.update"}]}
    with pytest.raises(core.InvalidRequest, match=r"operations\.0\.participants.*shape\.update"):
        core.validate_enqueue(state, lonely, config)
    free = {"operations": [{"id": "a", "operation_type": "run.cancel"}]}
    assert core.validate_enqueue(state, free, config).operations[0].id == "a"
    assert state.operations == {}


# ---------------------------------------------------------------- hold tokens


def test_a_hold_with_its_own_token_is_idempotent_and_listed() -> None:
    state = LedgerState(ledger_id="L")
    assert core.hold(state, core.hold_token({"token": "mine"}, "gen-1")) == "mine"
    assert core.hold(state, core.hold_token({"token": "mine"}, "gen-2")) == "mine"
    assert core.hold(state, core.hold_token({}, "gen-3")) == "gen-3"
    assert core.hold(state, core.hold_token(None, "gen-4")) == "gen-4"
    assert state.holds == ["mine", "gen-3", "gen-4"]
    assert core.snapshot(state)["hold_tokens"] == ["mine", "gen-3", "gen-4"]
    assert core.release(state, "mine") and core.snapshot(state)["holds"] == 2


def test_hold_tokens_are_bounded_and_a_bad_hold_names_the_field() -> None:
    state = LedgerState(ledger_id="L")
    for n in range(core.MAX_HOLDS):
        core.hold(state, core.validate_hold(state, {"token": f"t{n}"}).token or "")
    with pytest.raises(core.InvalidRequest, match="64 hold tokens"):
        core.validate_hold(state, {"token": "one-more"})
    assert core.validate_hold(state, {"token": "t3"}).token == "t3"  # held already: fine
    for bad, named in (({"bogus": 1}, "bogus"), ({"token": ""}, "token"), ({"token": 7}, "token")):
        with pytest.raises(core.InvalidRequest, match=named):
            core.validate_hold(state, bad)
    core.stop(state)
    with pytest.raises(core.LedgerStopped):
        core.validate_hold(state, {"token": "t3"})


@pytest.mark.parametrize("message", ["settle", "resume"])
def test_settle_and_resume_refuse_an_unknown_field(message: str) -> None:
    with pytest.raises(core.InvalidRequest, match="bogus"):
        core.validate_empty(LedgerState(ledger_id="L"), message, {"bogus": 1})


# ---------------------------------------------------------------- stop


def test_skip_is_refused_while_stop_asks_and_a_resolved_request_is_never_asked_again() -> None:
    config = LedgerConfig()
    state = build(config, "a")
    [(op_id, request_id)] = dispatch(state, config)
    core.freeze(state, config, op_id, request_id, compiled("a"))
    core.request_interrupted(state, request_id, "request_workflow_failed: x", stopped=False)
    core.begin_stop(state, {})
    queue = core.plan_stop_queries(state, StopInput(), config)
    assert queue == [request_id]
    with pytest.raises(core.LedgerStopped):
        core.validate_skip(state, {"operation_id": "a"})
    # Were it resolved meanwhile (a history from before), its final query is not started.
    state.requests[request_id].phase = RequestPhase.RESOLVED
    assert not core.begin_stop_query(state, request_id)
    assert state.requests[request_id].phase == "resolved"


def test_a_request_stop_interrupts_mid_attempt_is_next_asked_not_submitted() -> None:
    config = LedgerConfig()
    state = build(config, "a")
    [(op_id, request_id)] = dispatch(state, config)
    core.freeze(state, config, op_id, request_id, compiled("a"))
    assert state.requests[request_id].retry_action == RequestAction.SUBMIT
    core.request_interrupted(state, request_id, "stopped", stopped=True)
    assert state.requests[request_id].retry_action == RequestAction.QUERY


def test_stop_queries_start_within_concurrency_and_none_past_the_deadline() -> None:
    config = LedgerConfig(concurrency=2)
    state = LedgerState(ledger_id="L")
    queue = ["a", "b", "c"]
    assert core.stop_queries_to_start(state, queue, ["x"], config, False) == ["a"]
    assert core.stop_queries_to_start(state, queue, [], config, True) == []
    assert queue == ["b", "c"]
