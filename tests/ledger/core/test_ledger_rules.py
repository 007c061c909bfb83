"""The pure ledger core: unit tests for each rule and a hypothesis model run."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.support.ledger_model import (
    STATUSES,
    Driver,
    dispatch_all,
    finish,
    fresh,
    graphs,
    intent,
    passthrough,
)
from workflows.ledger import core
from workflows.ledger.models import (
    LedgerConfig,
    LedgerState,
    RequestAction,
    RequestReport,
    RetryConfig,
)
from workflows.limits import MAX_ID_BYTES

# ---------------------------------------------------------------- L8 delay, L7 transitions


@pytest.mark.parametrize(
    ("attempt", "retry_after", "expected"),
    [
        (0, None, 500),
        (1, None, 1000),
        (2, None, 2000),
        (5, None, 16000),
        (6, None, 30000),  # 500 * 64 = 32000, capped at 30 s
        (40, None, 30000),  # exponent capped at 6, still capped
        (3, 1234, 1234),
        (3, 0, 1),  # at least 1 ms
    ],
)
def test_retry_delay_follows_l8(attempt: int, retry_after: int | None, expected: int) -> None:
    assert core.retry_delay_ms(attempt, RetryConfig(), retry_after) == expected


def test_retry_delay_uses_the_configured_policy() -> None:
    retry = RetryConfig(initial_interval_ms=10, backoff_coefficient=3.0, maximum_interval_ms=200)
    assert [core.retry_delay_ms(a, retry) for a in range(8)] == [
        10,
        30,
        90,
        200,
        200,
        200,
        200,
        200,
    ]


@pytest.mark.parametrize(
    ("action", "status", "result", "next_action"),
    [
        ("submit", {"outcome": "applied"}, "resolved", "submit"),
        ("query", {"outcome": "rejected", "error": "conflict"}, "resolved", "query"),
        ("submit", {"outcome": "accepted"}, "retry", "query"),
        ("submit", {"outcome": "unresolved"}, "retry", "query"),
        ("query", {"outcome": "accepted"}, "retry", "query"),
        ("query", {"outcome": "unresolved"}, "retry", "submit"),
        ("query", {"outcome": "unresolved", "blocked": True}, "blocked", "query"),
        # L13: a blocked submit was dispatched; resume asks before sending anything again.
        ("submit", {"outcome": "unresolved", "blocked": True}, "blocked", "query"),
        ("submit", {"outcome": "banana"}, "retry", "query"),  # unknown answer: unresolved
        ("query", "not a status", "retry", "submit"),
    ],
)
def test_next_step_follows_l7(action: Any, status: Any, result: str, next_action: str) -> None:
    step = core.next_step(action, status, 1, RetryConfig(), now_ms=1_000)
    assert (step.result, step.next_action) == (result, next_action)
    if result == "retry":
        assert step.retry_at == 1_000 + step.delay_ms == 1_000 + 1000


def test_retry_after_overrides_backoff_in_next_step() -> None:
    step = core.next_step(
        RequestAction.SUBMIT, {"outcome": "unresolved", "retry_after_ms": 7}, 5, RetryConfig(), 0
    )
    assert (step.delay_ms, step.retry_at) == (7, 7)


# ---------------------------------------------------------------- L2 enqueue validation


@pytest.mark.parametrize(
    ("operations", "message"),
    [
        ([{"operation_type": "x"}], "operations.0.id: Field required"),
        ([{"id": "", "operation_type": "x"}], "operations.0.id: String should have at least 1"),
        ([{"id": 3, "operation_type": "x"}], "operations.0.id: Input should be a valid string"),
        ([intent("a", ["c", 1])], "operations.0.participants.1: Input should be a valid string"),
        ([intent("a", ["c"], protocol_version="1")], "operations.0.protocol_version"),
        ([intent("a", ["c"], colour="red")], "operations.0.colour: Extra inputs are not permitted"),
        ([intent("a", ["c"]), intent("a", ["d"])], "operations.1.id 'a' repeats operations.0.id"),
        ([intent("a", ["c"], ["a"])], "dependency cycle 'a' -> 'a'"),
        (
            [intent("a", ["c"], ["b"]), intent("b", ["c"], ["c2"]), intent("c2", ["c"], ["a"])],
            "dependency cycle 'a' -> 'b' -> 'c2' -> 'a'",
        ),
    ],
)
def test_bad_enqueue_is_rejected_naming_field_and_records_nothing(
    operations: list[Any], message: str
) -> None:
    state = fresh(intent("known", ["c"]))
    before = state.model_dump()
    with pytest.raises(core.LedgerInputError) as error:
        core.validate_enqueue(state, {"operations": operations})
    assert message in str(error.value)
    assert state.model_dump() == before


def test_enqueue_payload_must_be_an_object_with_operations() -> None:
    state = LedgerState(ledger_id="L")
    with pytest.raises(core.LedgerInputError, match="expected"):
        core.validate_enqueue(state, ["a"])
    with pytest.raises(core.LedgerInputError, match="operations: Field required"):
        core.validate_enqueue(state, {})


def test_cycle_through_an_already_known_operation_is_rejected() -> None:
    state = fresh(intent("a", ["c"], ["b"]))  # b unknown yet: a waits for it
    with pytest.raises(core.LedgerInputError, match="dependency cycle"):
        core.validate_enqueue(state, {"operations": [intent("b", ["c"], ["a"])]})


def test_known_ids_change_nothing_and_sequence_follows_arrival() -> None:
    state = fresh(intent("a", ["c1"]), intent("d", ["c4"]))
    batch = [intent("b", ["c2"]), intent("a", ["zz"]), intent("d", ["c4"])]
    result = core.enqueue(state, core.validate_enqueue(state, {"operations": batch}))
    assert (result.accepted, result.duplicates, result.conflicts) == (["b"], ["d"], ["a"])
    assert state.operations["a"].intent.participants == ["c1"]
    assert [r.sequence for r in state.operations.values()] == [1, 2, 3]


def test_stopped_ledger_refuses_enqueue() -> None:
    state = fresh()
    state.stopped = True
    with pytest.raises(core.LedgerInputError, match="stopped"):
        core.validate_enqueue(state, {"operations": []})


# ---------------------------------------------------------------- L3-L6, L9-L13


def test_dispatch_order_claims_lanes_and_concurrency() -> None:
    state = fresh(
        intent("a", ["c1", "c2"]),
        intent("b", ["c2"]),  # waits for c2
        intent("u1", [], operation_type="asset.upload"),
        intent("u2", [], operation_type="asset.upload"),  # lane of 1
        intent("d", ["c3"], ["a"]),  # waits for a
        intent("e", ["c4"]),
        intent("f", ["c5"]),  # beyond concurrency
    )
    config = LedgerConfig(concurrency=3)
    assert core.plan_dispatches(state, config) == ["a", "u1", "e"]
    assert dispatch_all(state, config) == ["r-a", "r-u1", "r-e"]
    assert state.claims == {"c1": "r-a", "c2": "r-a", "c4": "r-e"}
    assert core.plan_dispatches(state, config) == []
    finish(state, "r-a", "applied")
    assert state.claims == {"c4": "r-e"}
    assert core.plan_dispatches(state, config) == ["b"]
    finish(state, "r-u1", "rejected")
    assert core.plan_dispatches(state, config) == ["b", "u2"]
    assert state.operations["u1"].outcome == "rejected"


def test_missing_participants_blocks_unless_participant_free() -> None:
    state = fresh(intent("x", []), intent("y", [], operation_type="run.cancel"))
    assert core.plan_dispatches(state, LedgerConfig()) == ["y"]
    assert state.operations["x"].blockers == ["missing_participants"]
    core.resume(state, LedgerConfig())
    assert state.operations["x"].phase == "blocked"  # permanent until skip


def test_freeze_records_the_exact_request_before_anything_is_sent() -> None:
    state = fresh(intent("a", ["c2", "c1", "c2"], payload={"expected_versions": {"c1": 3}}))
    config = LedgerConfig()
    core.begin_dispatch(state, "a", "req-1")
    compiled = {**passthrough(state, "a"), "expected_versions": {"c1": 3}, "extra": [1]}
    assert core.freeze(state, config, "a", "req-1", compiled) == "launch"
    body = state.requests["req-1"].body
    assert body == {
        "id": "req-1",
        "ledger_id": "L",
        "operation_ids": ["a"],
        "kind": "shape.update",
        "payload": {"expected_versions": {"c1": 3}},
        "canvas_ids": ["c1", "c2"],
        "expected_versions": {"c1": 3},
        "protocol_version": 1,
        "idempotency_key": "req-1",
        "extra": [1],
    }
    assert state.requests["req-1"].phase == "in_flight"


@pytest.mark.parametrize(
    ("compiled", "blocker"),
    [
        ({"canvas_ids": ["c9"]}, "participant_mismatch"),
        ({"canvas_ids": "c1"}, "invalid_compile_result: canvas_ids must be a list"),
        ({"canvas_ids": ["c1"], "expected_versions": {"c1": "3"}}, "invalid_compile_result"),
        ("nope", "invalid_compile_result: expected an object"),
        ({"canvas_ids": ["c1"], "operation_id": "b"}, "compile_result_mismatch"),
        ({"canvas_ids": ["c1"], "request_id": "r2"}, "compile_result_mismatch"),
    ],
)
def test_bad_compile_results_block_the_operation_and_free_its_canvases(
    compiled: Any, blocker: str
) -> None:
    state = fresh(intent("a", ["c1"]), intent("b", ["c1"]))
    config = LedgerConfig()
    core.begin_dispatch(state, "a", "r1")
    assert core.freeze(state, config, "a", "r1", compiled) == "blocked"
    assert state.operations["a"].blockers[0].startswith(blocker)
    assert state.requests == {}
    assert state.claims == {}
    assert core.plan_dispatches(state, config) == ["b"]
    # resume re-examines it: back to pending, compiled again under a new request ID.
    core.resume(state, config)
    assert state.operations["a"].phase == "pending"


def test_a_compile_result_naming_its_own_operation_and_request_freezes_without_them() -> None:
    state = fresh(intent("a", ["c1"]))
    core.begin_dispatch(state, "a", "r1")
    compiled = {**passthrough(state, "a"), "operation_id": "a", "request_id": "r1"}
    assert core.freeze(state, LedgerConfig(), "a", "r1", compiled) == "launch"
    body = state.requests["r1"].body
    assert "operation_id" not in body and "request_id" not in body
    assert (body["id"], body["operation_ids"]) == ("r1", ["a"])


def test_a_compile_result_for_another_operation_says_which() -> None:
    state = fresh(intent("a", ["c1"]), intent("b", ["c2"]))
    core.begin_dispatch(state, "a", "r1")
    compiled = {**passthrough(state, "a"), "operation_id": "b"}
    assert core.freeze(state, LedgerConfig(), "a", "r1", compiled) == "blocked"
    assert state.operations["a"].error == "compile result for operation_id 'b' delivered to 'a'"


def test_compile_error_blocks_with_its_message() -> None:
    state = fresh(intent("a", ["c1"]))
    core.begin_dispatch(state, "a", "r1")
    core.block_compile(state, "a", "layer 7 missing")
    assert (state.operations["a"].phase, state.operations["a"].blockers) == (
        "blocked",
        ["layer 7 missing"],
    )
    assert state.claims == {}


def test_a_compile_failing_transiently_past_its_window_blocks_as_unavailable() -> None:
    """A compile still failing transiently when its retry window ends blocks with a blocker
    naming the cause, distinct from a compile error; `resume` compiles it again (L13)."""
    state = fresh(intent("a", ["c1"]))
    core.begin_dispatch(state, "a", "r1")
    blocker = core.compile_blocker("activity StartToClose timeout", transient=True)
    core.block_compile(state, "a", blocker)
    assert state.operations["a"].blockers == [
        f"{core.COMPILE_UNAVAILABLE}: activity StartToClose timeout"
    ]
    assert core.compile_blocker("layer 7 missing") == "layer 7 missing"
    assert core.compile_blocker("") == "compile_failed"
    assert len(core.compile_blocker("x" * 2000, transient=True)) == core.MAX_ERROR_LENGTH
    assert "a" in core.resume(state, LedgerConfig())
    assert state.operations["a"].phase == "pending"


def test_a_completion_failing_transiently_past_its_window_is_named_apart() -> None:
    assert core.completion_failure("boom") == "completion_failed: boom"
    assert core.completion_failure("boom", transient=True) == "completion_unavailable: boom"


def test_unsupported_protocol_blocks_the_request_keeps_claims_and_resume_keeps_it() -> None:
    state = fresh(intent("a", ["c1"], protocol_version=2), intent("b", ["c1"]))
    config = LedgerConfig()
    assert dispatch_all(state, config) == []
    request = state.requests["r-a"]
    assert (request.phase, request.blocker) == ("blocked", "request_interpreter_unavailable")
    assert state.claims == {"c1": "r-a"}
    core.resume(state, config)
    assert request.phase == "blocked"
    assert core.plan_launches(state, config) == []
    core.skip(state, "a", "needs v2 client")
    assert state.claims == {}
    assert state.operations["a"].outcome == "skipped"
    assert core.plan_dispatches(state, config) == ["b"]


def test_a_huge_error_from_the_far_side_or_a_failed_request_is_cut_in_the_carried_state() -> None:
    """A far side answering `blocked` with a megabyte of error (or a request workflow failing
    with one) must not grow what the ledger carries across continue-as-new: every copy of
    the error (the request's blocker, the operation's) is cut to MAX_ERROR_LENGTH."""
    huge = "x" * 1_000_000
    state = fresh(intent("a", ["c1"]), intent("b", ["c2"]))
    config = LedgerConfig()
    dispatch_all(state, config)
    finish(state, "r-a", "unresolved", blocked=True, error=huge)
    for request_id in ("r-b",):
        core.mark_launched(state, request_id)
        core.request_interrupted(state, request_id, f"request_workflow_failed: {huge}", False)
    for request_id, op_id in (("r-a", "a"), ("r-b", "b")):
        assert state.requests[request_id].phase == "blocked"
        assert len(state.requests[request_id].blocker or "") == core.MAX_ERROR_LENGTH
        assert len(state.operations[op_id].error or "") == core.MAX_ERROR_LENGTH
    assert core.json_size(state) < 20_000


def test_blocked_status_keeps_claims_until_resume_relaunches_with_recorded_action() -> None:
    state = fresh(intent("a", ["c1"]), intent("b", ["c1"], ["a"]))
    config = LedgerConfig()
    dispatch_all(state, config)
    core.record_finished(
        state,
        RequestReport(
            request_id="r-a",
            phase="blocked",
            status={"outcome": "unresolved", "blocked": True, "error": "http 403"},
            attempt=3,
            next_action="query",
        ),
    )
    assert state.operations["a"].blockers == ["http 403"]
    assert state.claims == {"c1": "r-a"}
    assert core.plan_launches(state, config) == []
    assert core.resume(state, config) == ["r-a"]
    assert core.plan_launches(state, config) == ["r-a"]
    request = core.mark_launched(state, "r-a")
    assert (request.retry_action, request.attempt, request.phase) == ("query", 3, "in_flight")
    assert state.operations["a"].phase == "dispatched"


def test_reports_from_an_earlier_loop_of_a_relaunched_request_are_ignored() -> None:
    state = fresh(intent("a", ["c1"]))
    config = LedgerConfig()
    dispatch_all(state, config)

    def report(phase: Any, outcome: str, launch: int, **status: Any) -> RequestReport:
        return RequestReport(
            request_id="r-a",
            phase=phase,
            status={"outcome": outcome, **status},
            attempt=1,
            next_action="submit",
            launch=launch,
        )

    assert core.record_finished(state, report("blocked", "unresolved", 1, blocked=True))
    core.resume(state, config)
    core.mark_launched(state, "r-a")
    # The first loop's result arrives late (its workflow closed after the relaunch).
    assert not core.record_finished(state, report("blocked", "unresolved", 1, blocked=True))
    assert not core.record_attempt(state, report("in_flight", "accepted", 1))
    assert state.requests["r-a"].phase == "in_flight"
    assert core.record_finished(state, report("resolved", "applied", 2))
    assert state.operations["a"].outcome == "applied"


def test_hold_stops_planning_until_every_token_is_released() -> None:
    state = fresh(intent("a", ["c1"]))
    config = LedgerConfig()
    core.hold(state, "t1")
    core.hold(state, "t2")
    assert core.plan_dispatches(state, config) == []
    assert core.release(state, "t1") and not core.release(state, "t1")
    assert core.plan_dispatches(state, config) == []
    core.release(state, "t2")
    assert core.plan_dispatches(state, config) == ["a"]


def test_skip_refuses_unknown_resolved_and_in_flight_operations() -> None:
    state = fresh(intent("a", ["c1"]), intent("b", ["c2"]))
    dispatch_all(state, LedgerConfig())
    with pytest.raises(core.LedgerInputError, match="'zz' is not known"):
        core.check_skip(state, "zz")
    with pytest.raises(core.LedgerInputError, match="in flight"):
        core.check_skip(state, "a")
    finish(state, "r-b", "applied")
    with pytest.raises(core.LedgerInputError, match="already resolved"):
        core.check_skip(state, "b")


def test_message_parsers_refuse_before_anything_is_recorded() -> None:
    """Each message's parser raises InvalidRequest naming the field; a stopped ledger
    refuses hold, resume and stop as LedgerStopped (the class name is the rejection type)."""
    state = fresh(intent("a", ["c1"]))
    core.hold(state, "t1")
    assert core.validate_release(state, {"token": "t1"}).token == "t1"
    assert core.parse_release({"token": "t9"}).token == "t9"  # held or not: the signal's check
    with pytest.raises(core.LedgerInputError, match="token 't9' is not held"):
        core.validate_release(state, {"token": "t9"})
    with pytest.raises(core.LedgerInputError, match=r"^invalid release input: token: "):
        core.parse_release({"token": 5})
    assert core.validate_skip(state, {"operation_id": "a"}).reason == "skipped"
    with pytest.raises(core.LedgerInputError, match=r"^invalid skip input: extra: "):
        core.validate_skip(state, {"operation_id": "a", "extra": 1})
    with pytest.raises(core.LedgerInputError, match="'zz' is not known"):
        core.validate_skip(state, {"operation_id": "zz"})
    core.validate_empty(state, "resume", None)
    with pytest.raises(core.LedgerInputError, match=r"^invalid resume input: "):
        core.validate_empty(state, "resume", "not an object")
    with pytest.raises(core.LedgerInputError, match=r"^invalid request report: "):
        core.parse_report({"request_id": "r"})
    state.stopped = True
    for refuse in (
        lambda: core.check_running(state),
        lambda: core.validate_empty(state, "stop", {}),
    ):
        with pytest.raises(core.LedgerStopped, match=r"^ledger is stopped$"):
            refuse()
    # Not LedgerStopped: a stopped ledger refuses an enqueue as bad input.
    with pytest.raises(core.LedgerInputError, match="stopped: enqueue refused") as refused:
        core.validate_enqueue(state, {"operations": [intent("b", ["c2"])]})
    assert type(refused.value) is core.LedgerInputError


def test_start_input_and_the_next_runs_input() -> None:
    start = core.read_start(lambda: None, "ledger:from-id")
    assert (start.ledger_id, start.state.ledger_id, start.error) == ("from-id", "from-id", None)
    bad = core.read_start(lambda: {"concurrency": 0}, "ledger:x")
    assert bad.error is not None and bad.error.startswith("invalid OperationLedger input: ")
    assert "concurrency" in bad.error

    def unreadable() -> Any:
        raise ValueError("the input cannot be decoded: nope")

    assert core.read_start(unreadable, "ledger:x").error == (
        "invalid OperationLedger input: the input cannot be decoded: nope"
    )
    too_long = core.read_start(lambda: None, "ledger:" + "i" * (MAX_ID_BYTES + 1))
    assert "ledger_id is" in (too_long.error or "")
    state = fresh(intent("a", ["c1"]))
    after = core.next_run_input(state, LedgerConfig(concurrency=3), "L")
    assert (after.ledger_id, after.concurrency, after.carried_state) == ("L", 3, state)
    assert "local_compile" not in after.model_dump(exclude_unset=True)
    kept = core.next_run_input(state, LedgerConfig(local_compile=True), "L")
    assert kept.model_dump(exclude_unset=True)["local_compile"] is True


def test_recovery_refuses_two_unresolved_requests_on_one_canvas() -> None:
    state = fresh(intent("a", ["c1"]), intent("b", ["c1"]), intent("c", ["c2"]))
    config = LedgerConfig(concurrency=3)
    dispatch_all(state, config)
    finish(state, "r-a", "applied")
    dispatch_all(state, config)
    core.recover(state)  # consistent: resolved r-a no longer claims c1
    assert state.claims == {"c1": "r-b", "c2": "r-c"}
    state.requests["r-c"].canvas_ids = ["c1"]  # a corrupted/hand-edited ledger
    with pytest.raises(core.RecoveryConflictError) as error:
        core.recover(state)
    assert "canvas 'c1'" in str(error.value)
    assert "'r-b'" in str(error.value) and "'r-c'" in str(error.value)


def test_recovery_drops_compile_reservations() -> None:
    state = fresh(intent("a", ["c1"]))
    core.begin_dispatch(state, "a", "r1")
    carried = LedgerState.model_validate_json(state.model_dump_json())
    core.recover(carried)
    assert carried.compiling == {} and carried.claims == {}
    assert carried.operations["a"].phase == "pending"


# ---------------------------------------------------------------- model run (hypothesis)


def stuck_on_blocked(state: LedgerState, op_id: str, seen: set[str] | None = None) -> bool:
    """Pending only because a dependency is (transitively) blocked or a canvas it needs is
    held by a blocked request (both wait for `resume` or `skip`)."""
    seen = seen or set()
    record = state.operations[op_id]
    if record.phase == "blocked":
        return True
    if record.phase != "pending" or op_id in seen:
        return False
    seen.add(op_id)
    canvas_held_by_blocked = any(
        state.requests[state.claims[c]].phase == "blocked"
        for c in record.intent.participants
        if c in state.claims and state.claims[c] in state.requests
    )
    return canvas_held_by_blocked or any(
        dep in state.operations and stuck_on_blocked(state, dep, seen)
        for dep in record.intent.dependencies
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    graph=graphs(),
    concurrency=st.integers(1, 3),
    text_lane=st.sampled_from([None, 1]),
    batches=st.integers(1, 3),
    data=st.data(),
)
def test_model_invariants_hold_at_every_step_and_everything_settles(
    graph: list[dict[str, Any]],
    concurrency: int,
    text_lane: int | None,
    batches: int,
    data: st.DataObject,
) -> None:
    lanes = {"asset.upload": 1, **({"text.edit": text_lane} if text_lane else {})}
    config = LedgerConfig(concurrency=concurrency, lanes=lanes)
    driver = Driver(config, LedgerState(ledger_id="L"))
    size = -(-len(graph) // batches)
    chunks = [graph[i : i + size] for i in range(0, len(graph), size)]
    for _ in range(60):
        choice = data.draw(
            st.sampled_from(
                ["enqueue", "compile", "send", "send", "resume", "hold", "can", "skip", "late"]
            )
        )
        if choice == "enqueue" and chunks:
            batch = core.validate_enqueue(driver.state, {"operations": chunks.pop(0)})
            core.enqueue(driver.state, batch)
        elif choice == "compile" and driver.state.compiling:
            op_id = data.draw(st.sampled_from(sorted(driver.state.compiling)))
            driver.compile(
                op_id, data.draw(st.sampled_from(["ok", "ok", "ok", "error", "mismatch"]))
            )
        elif choice == "send" and driver.loops:
            request_id = data.draw(st.sampled_from(sorted(driver.loops)))
            driver.send(request_id, data.draw(STATUSES))
        elif choice == "resume":
            core.resume(driver.state, config)
        elif choice == "hold":
            if driver.state.holds:
                core.release(driver.state, driver.state.holds[0])
            else:
                core.hold(driver.state, "token")
        elif choice == "can" and not driver.state.compiling:
            driver.continue_as_new()
        elif choice == "skip":
            stuck = [
                op_id
                for op_id, r in driver.state.operations.items()
                if r.phase == "blocked" and not _in_flight(driver.state, op_id)
            ]
            if stuck:
                driver.skip(data.draw(st.sampled_from(stuck)))
        elif choice == "late":
            relaunched = sorted(r for r, n in driver.launches.items() if n > 1)
            if relaunched:
                driver.late_report(
                    data.draw(st.sampled_from(relaunched)),
                    data.draw(STATUSES),
                    data.draw(st.booleans()),
                )
        driver.pump()
        driver.check()

    # Drain: everything left is enqueued, holds released, one resume; all answers `applied`.
    for chunk in chunks:
        core.enqueue(driver.state, core.validate_enqueue(driver.state, {"operations": chunk}))
    driver.state.holds.clear()
    core.resume(driver.state, config)
    reported_late: set[str] = set()
    for _ in range(500):
        driver.pump()
        driver.check()
        late = sorted(r for r, n in driver.launches.items() if n > 1 and r not in reported_late)
        if late:  # each relaunched request's earlier loop reports late, once
            reported_late.add(late[0])
            driver.late_report(late[0], data.draw(STATUSES), data.draw(st.booleans()))
        elif driver.state.compiling:
            driver.compile(next(iter(driver.state.compiling)), "ok")
        elif driver.loops:
            driver.send(next(iter(driver.loops)), {"outcome": "applied"})
        else:
            break
    assert core.all_done(driver.state) or all(
        r.phase in ("resolved", "blocked") or stuck_on_blocked(driver.state, op_id)
        for op_id, r in driver.state.operations.items()
    )
    for op_id, record in driver.state.operations.items():
        if record.phase == "blocked":
            # Only what no retry can fix stays blocked after a resume and a clean drain.
            assert set(record.blockers) <= core.PERMANENT_BLOCKERS, record
        else:
            assert record.phase == "resolved" or stuck_on_blocked(driver.state, op_id), record
    assert {r.phase for r in driver.state.requests.values()} <= {"resolved", "blocked"}
    event(f"late reports: {'some' if driver.stale_reports else 'none'}")


def _in_flight(state: LedgerState, op_id: str) -> bool:
    request_id = state.operations[op_id].request_id
    return (
        request_id is not None
        and request_id in state.requests
        and (state.requests[request_id].phase == "in_flight")
    )


# ---------------------------------------------------------------- completion hook


def test_a_null_completion_accepts_and_a_blocked_answer_blocks_with_its_error() -> None:
    assert core.completion_blocker(None) is None
    assert core.completion_blocker({"blocked": True, "error": "receipt mismatch"}) == (
        "receipt mismatch"
    )
    assert core.completion_blocker({"blocked": True}) == core.COMPLETION_BLOCKED
    assert core.completion_blocker({"blocked": True, "error": ""}) == core.COMPLETION_BLOCKED
    assert core.completion_blocker({"blocked": True, "error": "e" * 900}) == "e" * 500


@pytest.mark.parametrize(
    "answer",
    [{}, {"blocked": False}, {"blocked": "yes"}, {"blocked": True, "error": 3}, True, "ok", []],
)
def test_any_other_completion_answer_blocks_naming_it(answer: Any) -> None:
    blocker = core.completion_blocker(answer)
    assert blocker is not None and blocker.startswith("completion_failed: answered ")
    assert blocker.endswith('expected null or {"blocked": true, "error"?: str}')


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=30,
)


@given(json_values)
def test_only_null_accepts_and_every_blocker_is_bounded(answer: Any) -> None:
    blocker = core.completion_blocker(answer)
    assert (blocker is None) == (answer is None)
    assert blocker is None or 0 < len(blocker) <= core.MAX_ERROR_LENGTH


def test_a_blocked_completion_keeps_the_far_sides_outcome_and_queries_next() -> None:
    resolved = core.next_step(
        RequestAction.SUBMIT, {"outcome": "applied", "canonical": {"v": 1}}, 1, RetryConfig(), 0
    )
    step = core.completion_blocked(resolved, core.completion_failure("boom"))
    assert (step.result, step.next_action) == ("blocked", RequestAction.QUERY)
    dumped = step.status.model_dump(mode="json", exclude_none=True)
    assert dumped == {
        "outcome": "applied",
        "canonical": {"v": 1},
        "blocked": True,
        "error": "completion_failed: boom",
    }
    assert len(core.completion_failure("x" * 2000)) == core.MAX_ERROR_LENGTH
