"""`stop` forgets nothing, in the pure core: which requests it asks, within which bound, what
an answer does, and what the final result lists (and how large it can get)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.ledger_model import dispatch_all, finish, fresh, intent
from workflows.ledger import core
from workflows.ledger.models import (
    MAX_ID_LENGTH,
    MAX_PAYLOAD_BYTES,
    MAX_STOP_QUERIES,
    LedgerConfig,
    LedgerState,
    RequestReport,
    StopInput,
)

WIDE = LedgerConfig(concurrency=1000)


def report(state: LedgerState, request_id: str, phase: str, **status: Any) -> RequestReport:
    request = state.requests[request_id]
    return RequestReport(
        request_id=request_id,
        phase=phase,
        status=status,
        attempt=request.attempt + 1,
        next_action="query",
        launch=request.launch,
    )


def progressed(state: LedgerState, request_id: str, attempt: int, action: str) -> None:
    """The request's loop reported `attempt` attempts, next `action`, then `stop` cancelled it."""
    core.record_attempt(
        state,
        RequestReport(
            request_id=request_id,
            phase="in_flight",
            status={"outcome": "accepted"},
            attempt=attempt,
            next_action=action,
            retry_at=10**12,
            launch=state.requests[request_id].launch,
        ),
    )


def stopped(state: LedgerState) -> None:
    """`stop` as the shell does it: stopped, each request in flight cancelled (frozen)."""
    core.stop(state)
    for request in list(state.requests.values()):
        core.request_interrupted(state, request.id, "stopped", stopped=True)


def test_the_rule_asks_every_request_that_may_have_been_sent_and_none_that_was_not() -> None:
    state = fresh(
        intent("mid-submit", ["c1"]),  # in flight, no report yet: its submit may be out
        intent("waiting", ["c2"]),  # accepted, waiting for its query
        intent("blocked", ["c3"]),  # the far side said blocked
        intent("resolved", ["c4"]),
        intent("v2", ["c5"], protocol_version=2),  # blocked at freeze: never handed over
        intent("no-canvas", []),  # blocked at enqueue: no request at all
        intent("later", ["c1"]),  # pending behind mid-submit: no request at all
    )
    dispatch_all(state, WIDE)
    progressed(state, "r-waiting", 1, "query")
    finish(state, "r-blocked", "unresolved", blocked=True, error="http 401")
    finish(state, "r-resolved", "applied")
    stopped(state)
    assert core.unknown_candidates(state) == ["r-mid-submit", "r-waiting", "r-blocked"]
    assert state.requests["r-v2"].blocker == core.INTERPRETER_UNAVAILABLE
    assert not core.may_have_reached_far_side(state.requests["r-v2"])
    # Every candidate is listed unknown until asked, with its body, next action `query`.
    listed = core.final_result(state)["unknown"]
    assert [(e["request_id"], e["at_stop"], e["next_action"]) for e in listed] == [
        ("r-mid-submit", "not_asked", "query"),
        ("r-waiting", "not_asked", "query"),
        ("r-blocked", "not_asked", "query"),
    ]
    assert listed[0]["request"] == state.requests["r-mid-submit"].body


def test_the_bound_takes_the_oldest_first_and_a_zero_bound_asks_none() -> None:
    state = fresh(*(intent(f"op-{n}", [f"c{n}"]) for n in range(5)))
    dispatch_all(state, WIDE)
    stopped(state)
    assert core.plan_stop_queries(state, StopInput(query_limit=2)) == ["r-op-0", "r-op-1"]
    assert core.plan_stop_queries(state, StopInput()) == [f"r-op-{n}" for n in range(5)]
    assert core.plan_stop_queries(state, StopInput(query_limit=0)) == []
    assert core.plan_stop_queries(state, StopInput(query_deadline_ms=0)) == []
    assert StopInput().query_limit == MAX_STOP_QUERIES


def blocked_one_by_one(config: LedgerConfig, kinds: list[str]) -> LedgerState:
    """One request per kind (`op-<n>`, its own canvas), each blocked by the far side before
    the next is dispatched, so a lane never refused one; then stopped."""
    state = fresh(*(intent(f"op-{n}", [f"c{n}"], operation_type=k) for n, k in enumerate(kinds)))
    while frozen := dispatch_all(state, config):
        for request_id in frozen:
            finish(state, request_id, "unresolved", blocked=True, error="http 401")
    stopped(state)
    return state


def test_final_queries_keep_to_the_lanes_and_one_held_back_lets_the_next_go() -> None:
    """L4: each final query is a query at the far side, so a type's lane bounds them as it
    bounds submits and queries; a type whose lane is full waits, another type goes first."""
    config = LedgerConfig(concurrency=2, lanes={"asset.upload": 1})
    kinds = ["asset.upload", "asset.upload", "shape.update", "asset.upload"]
    state = blocked_one_by_one(config, kinds)
    queue = core.plan_stop_queries(state, StopInput(), config)
    assert queue == ["r-op-0", "r-op-1", "r-op-2", "r-op-3"]
    assert core.stop_queries_to_start(state, queue, [], config, False) == ["r-op-0", "r-op-2"]
    assert queue == ["r-op-1", "r-op-3"]
    # The upload still asking holds its lane: nothing starts, whatever slot is free.
    assert core.stop_queries_to_start(state, queue, ["r-op-0"], config, False) == []
    assert core.stop_queries_to_start(state, queue, ["r-op-2"], config, False) == ["r-op-1"]
    assert core.stop_queries_to_start(state, queue, [], config, True) == []
    assert queue == ["r-op-3"]


def test_a_stop_recorded_before_lanes_bounded_final_queries_starts_them_as_it_did() -> None:
    """`lanes_apply` (the shell's patch) is asked only where a lane holds a query back; when
    it answers no, the queries start by `concurrency` alone, as such a stop recorded them."""
    config = LedgerConfig(concurrency=2, lanes={"asset.upload": 1})
    asked: list[str] = []

    def unpatched() -> bool:
        asked.append("asked")
        return False

    state = blocked_one_by_one(config, ["shape.update", "shape.update"])
    queue = core.plan_stop_queries(state, StopInput(), config)
    started = core.stop_queries_to_start(state, queue, [], config, False, unpatched)
    assert started == ["r-op-0", "r-op-1"] and asked == []
    state = blocked_one_by_one(config, ["asset.upload", "asset.upload", "asset.upload"])
    queue = core.plan_stop_queries(state, StopInput(), config)
    started = core.stop_queries_to_start(state, queue, [], config, False, unpatched)
    assert started == ["r-op-0", "r-op-1"] and asked == ["asked"]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.sampled_from(["asset.upload", "shape.update", "text.edit"]), max_size=10),
    st.integers(min_value=1, max_value=3),
    st.dictionaries(
        st.sampled_from(["asset.upload", "text.edit"]), st.integers(min_value=1, max_value=2)
    ),
    st.lists(st.integers(min_value=0, max_value=9), max_size=30),
)
def test_final_queries_never_exceed_concurrency_or_a_lane_and_each_is_asked_once(
    kinds: list[str], concurrency: int, lanes: dict[str, int], ends: list[int]
) -> None:
    """Whatever the requests, bounds and order in which the final queries end: at no moment
    are more than `concurrency` asking, nor more of a type than its lane, and every planned
    request is asked exactly once (a held-back one is never dropped)."""
    config = LedgerConfig(concurrency=concurrency, lanes=lanes)
    state = blocked_one_by_one(config, kinds)
    queue = core.plan_stop_queries(state, StopInput(), config)
    planned = list(queue)
    asked: list[str] = []
    asking: list[str] = []
    picks = iter(ends)
    while queue or asking:
        started = core.stop_queries_to_start(state, queue, asking, config, False)
        asking += started
        asked += started
        assert len(asking) <= concurrency
        for kind, lane in lanes.items():
            assert sum(state.requests[r].operation_type == kind for r in asking) <= lane
        assert asking, "a final query is left queued with nothing asking"
        asking.pop(next(picks, 0) % len(asking))
    assert sorted(asked) == sorted(planned)


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"query_limit": -1}, "query_limit"),
        ({"query_limit": MAX_STOP_QUERIES + 1}, "query_limit"),
        ({"query_limit": "3"}, "query_limit"),
        ({"query_limit": True}, "query_limit"),
        ({"query_deadline_ms": 60_001}, "query_deadline_ms"),
        ({"query_deadline_ms": None}, "query_deadline_ms"),
        ("stop", "stop input"),
    ],
)
def test_a_bad_stop_is_refused_naming_the_field_and_changes_nothing(raw: Any, named: str) -> None:
    state = fresh(intent("a", ["c1"]))
    before = state.model_copy(deep=True)
    with pytest.raises(core.InvalidRequest, match=named):
        core.validate_stop(state, raw)
    assert state == before
    with pytest.raises(core.InvalidRequest, match="bogus"):
        core.validate_stop(state, {"bogus": 1})  # strict: an unknown field is refused
    assert state == before
    # The handler takes what its validator took; a payload recorded before StopInput existed
    # that does not parse takes the defaults instead of failing the replay.
    assert core.begin_stop(state, raw) == StopInput() and state.stopped
    with pytest.raises(core.LedgerStopped):
        core.validate_stop(state, {})


def test_answers_resolve_block_or_leave_the_request_unknown() -> None:
    state = fresh(*(intent(op, [f"c-{op}"]) for op in ("a", "b", "c", "d", "e")))
    dispatch_all(state, WIDE)
    finish(state, "r-d", "unresolved", blocked=True, error="http 403")
    stopped(state)
    for request_id in core.plan_stop_queries(state, StopInput()):
        core.begin_stop_query(state, request_id)
    assert state.requests["r-a"].phase == "in_flight"  # `skip` refuses it meanwhile
    with pytest.raises(core.LedgerStopped):  # as it refuses any skip while stopping
        core.check_skip(state, "a")
    assert core.record_stop_query(state, report(state, "r-a", "resolved", outcome="applied"))
    assert core.record_stop_query(state, report(state, "r-b", "frozen", outcome="accepted"))
    assert core.record_stop_query(
        state, report(state, "r-c", "blocked", outcome="unresolved", blocked=True, error="401")
    )
    core.stop_query_unanswered(state, "r-d")  # cancelled at the deadline
    core.stop_query_unanswered(state, "r-e")
    assert state.requests["r-a"].phase == "resolved" and "c-a" not in state.claims
    assert state.operations["a"].outcome == "applied"
    assert (state.requests["r-b"].phase, state.requests["r-b"].retry_action) == ("frozen", "query")
    assert state.requests["r-c"].phase == "blocked" and state.operations["c"].phase == "blocked"
    assert state.requests["r-d"].phase == "blocked"  # as it was before the stop asked
    assert state.requests["r-d"].blocker == "http 403"
    assert state.requests["r-e"].phase == "frozen"
    final = core.final_result(state)
    assert final["resolved_at_stop"] == [
        {"request_id": "r-a", "operation_ids": ["a"], "outcome": "applied"}
    ]
    assert {e["request_id"]: e["at_stop"] for e in final["unknown"]} == {
        "r-b": "accepted",
        "r-c": "blocked",
        "r-d": "no_answer",
        "r-e": "no_answer",
    }
    assert {e["request_id"]: e["attempt"] for e in final["unknown"]}["r-b"] == 1
    assert set(final["claims"]) == {"c-b", "c-c", "c-d", "c-e"}


def test_a_late_report_of_the_cancelled_loop_is_not_the_stops_answer() -> None:
    state = fresh(intent("a", ["c1"]))
    dispatch_all(state, WIDE)
    stale = report(state, "r-a", "resolved", outcome="applied")  # the loop's own launch
    stopped(state)
    core.begin_stop_query(state, "r-a")
    assert core.record_stop_query(state, stale) is None
    assert state.requests["r-a"].phase == "in_flight" and state.stop_answers == {}


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.sampled_from(["in_flight", "waiting", "blocked", "resolved", "v2", "no_canvas"]),
        min_size=1,
        max_size=12,
    ),
    st.integers(min_value=0, max_value=12),
    st.lists(st.sampled_from(["applied", "accepted", "unresolved", "none"]), max_size=12),
)
def test_no_request_that_may_have_been_sent_is_dropped(
    kinds: list[str], limit: int, answers: list[str]
) -> None:
    """Whatever the requests, the limit and the answers: every request that may have been sent
    is, in the final result, resolved at stop or listed unknown (exactly one of the two), and
    only those asked have an answer other than `not_asked`."""
    state = fresh(
        *(
            intent(
                f"op-{n}",
                [] if kind == "no_canvas" else [f"c{n}"],
                None,
                protocol_version=2 if kind == "v2" else 1,
            )
            for n, kind in enumerate(kinds)
        )
    )
    dispatch_all(state, WIDE)
    for n, kind in enumerate(kinds):
        if kind == "waiting":
            progressed(state, f"r-op-{n}", 1, "query")
        elif kind == "blocked":
            finish(state, f"r-op-{n}", "unresolved", blocked=True, error="401")
        elif kind == "resolved":
            finish(state, f"r-op-{n}", "applied")
    stopped(state)
    candidates = core.unknown_candidates(state)
    asked = core.plan_stop_queries(state, StopInput(query_limit=limit))
    assert asked == candidates[:limit]
    for request_id, answer in zip(asked, answers + ["none"] * len(asked), strict=False):
        core.begin_stop_query(state, request_id)
        if answer == "none":
            core.stop_query_unanswered(state, request_id)
        else:
            phase = "resolved" if answer == "applied" else "frozen"
            core.record_stop_query(state, report(state, request_id, phase, outcome=answer))
    final = core.final_result(state)
    resolved = [r["request_id"] for r in final["resolved_at_stop"]]
    unknown = [e["request_id"] for e in final["unknown"]]
    assert sorted(resolved + unknown) == sorted(candidates)
    assert not set(resolved) & set(unknown)
    for entry in final["unknown"]:
        assert (entry["at_stop"] == "not_asked") is (entry["request_id"] not in asked)
        assert entry["request"] == state.requests[entry["request_id"]].body
    never_sent = {f"r-op-{n}" for n, kind in enumerate(kinds) if kind == "v2"}
    assert not never_sent & set(asked)


def full_of_unresolved_requests(payload_bytes: int, id_length: int, reason: int) -> LedgerState:
    """A ledger filled to its budget, every operation with an unresolved request, blocked
    after one attempt with a reason `reason` characters long."""
    state = LedgerState(ledger_id="L" * MAX_ID_LENGTH)
    payload = {"blob": "z" * payload_bytes}
    number = 0
    try:
        while True:
            op_id = f"{number:0{id_length}d}"
            one = {"operations": [intent(op_id, [op_id], payload=payload)]}
            core.enqueue(state, core.validate_enqueue(state, one))
            number += 1
    except core.InvalidRequest:
        pass
    while frozen := dispatch_all(state, LedgerConfig(concurrency=1000)):
        for request_id in frozen:
            finish(state, request_id, "unresolved", blocked=True, error="e" * reason)
    stopped(state)
    return state


@pytest.mark.parametrize("reason", [20, 900], ids=["short-reasons", "long-reasons"])
@pytest.mark.parametrize(
    ("payload_bytes", "id_length"),
    [(MAX_PAYLOAD_BYTES - 100, 100), (2000, 100), (0, 100), (0, 8)],
    ids=["largest-bodies", "medium-bodies", "smallest-bodies-long-ids", "smallest-bodies"],
)
def test_the_final_result_stays_well_under_2_mb(
    payload_bytes: int, id_length: int, reason: int
) -> None:
    """The worst cases: a state filled to its budget, every request unresolved. Past
    MAX_UNKNOWN_BYTES entries leave their body out, and nothing is dropped. With long block
    reasons the state itself grows far past its budget (each reason is kept on the request,
    its operation and its last status): the final result still stays under 1.6 MB."""
    state = full_of_unresolved_requests(payload_bytes, id_length, reason)
    final = core.final_result(state)
    size = len(json.dumps(final, separators=(",", ":")))
    assert len(final["unknown"]) == len(state.requests) == len(state.operations) > 0
    assert size < (1_000_000 if reason == 20 else 1_600_000), (size, len(state.requests))
    whole = [e for e in final["unknown"] if not e.get("request_left_out")]
    assert len(json.dumps(whole, separators=(",", ":"))) <= core.MAX_UNKNOWN_BYTES
    for entry in final["unknown"]:
        if entry.get("request_left_out"):
            assert entry["request"] is None and entry["request_id"] in state.requests
    print(f"{len(state.requests)} requests, state {core.json_size(state)} B, final {size} B")


def test_stop_awaits_the_last_report_of_each_request_it_cancels_by_workflow_id() -> None:
    state = fresh(intent("here", ["c1"]), intent("earlier", ["c2"]), intent("closed", ["c3"]))
    for request_id in dispatch_all(state, WIDE):
        core.mark_launched(state, request_id)
    core.stop(state)
    # `r-here` was started by this run (awaited through its handle): not cancelled by ID.
    cancelled = core.cancel_at_stop(state, ["r-here"])
    assert cancelled == ["r-earlier", "r-closed"]
    assert core.stop_waits_for_reports(state)
    assert core.final_report_arrived(state, "r-closed")  # its workflow had closed already
    assert not core.final_report_arrived(state, "r-closed")
    assert not core.final_report_arrived(state, "r-here")  # never awaited
    assert core.stop_waits_for_reports(state)
    assert core.final_report_arrived(state, "r-earlier")
    assert not core.stop_waits_for_reports(state)


def test_a_request_that_never_reports_is_given_up_when_the_wait_times_out() -> None:
    state = fresh(intent("terminated", ["c1"]))
    for request_id in dispatch_all(state, WIDE):
        core.mark_launched(state, request_id)
    core.stop(state)
    assert core.cancel_at_stop(state, []) == ["r-terminated"]
    assert core.final_reports_given_up(state) == ["r-terminated"]
    assert not core.stop_waits_for_reports(state)
    # The wait survives a worker restart (the state round-trips as JSON).
    state.awaiting_final_reports = ["r-terminated"]
    again = LedgerState.model_validate_json(state.model_dump_json())
    assert again.awaiting_final_reports == ["r-terminated"]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(["r-a", "r-b", "r-c", "r-x"]), max_size=8))
def test_the_wait_ends_exactly_when_every_cancelled_request_was_heard_from(
    arrivals: list[str],
) -> None:
    state = fresh(intent("a", ["c1"]), intent("b", ["c2"]), intent("c", ["c3"]))
    for request_id in dispatch_all(state, WIDE):
        core.mark_launched(state, request_id)
    core.stop(state)
    cancelled = set(core.cancel_at_stop(state, []))
    for request_id in arrivals:
        core.final_report_arrived(state, request_id)
    assert core.stop_waits_for_reports(state) == bool(cancelled - set(arrivals))


def test_a_request_cancelled_by_id_before_stop_is_awaited_by_stop_too() -> None:
    state = fresh(intent("blocked-earlier", ["c1"]))
    for request_id in dispatch_all(state, WIDE):
        core.mark_launched(state, request_id)
    core.cancel_by_id(state, "r-blocked-earlier")  # the core blocked it; cancelled by ID
    core.cancel_by_id(state, "r-blocked-earlier")
    assert state.awaiting_final_reports == ["r-blocked-earlier"]
    carried = LedgerState.model_validate_json(state.model_dump_json())  # continue-as-new
    core.stop(carried)
    assert core.stop_waits_for_reports(carried)
    assert core.final_report_arrived(carried, "r-blocked-earlier")
    assert not core.stop_waits_for_reports(carried)
