"""The core's slots (L4, L12): only attempts in progress count toward `concurrency` and the
lanes, and due retries are granted first, in (retry time, sequence) order."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from workflows.ledger import core
from workflows.ledger.models import LedgerConfig, LedgerState, RequestReport

TYPES = ("shape.update", "asset.upload", "run.cancel")


def build(ops: list[dict[str, Any]], config: LedgerConfig) -> LedgerState:
    state = LedgerState(ledger_id="L")
    intents = [
        {
            "id": op["id"],
            "operation_type": op["type"],
            "participants": [f"c-{op['id']}"],
            "payload": {"op": op["id"]},
        }
        for op in ops
    ]
    core.enqueue(state, core.validate_enqueue(state, {"operations": intents}), config)
    return state


def freeze_now(state: LedgerState, config: LedgerConfig, op_id: str) -> str:
    request_id = f"r-{op_id}"
    core.begin_dispatch(state, op_id, request_id)
    compiled = {"canvas_ids": [f"c-{op_id}"], "payload": {"op": op_id}}
    assert core.freeze(state, config, op_id, request_id, compiled) == "launch"
    return request_id


def report(request_id: str, attempt: int, retry_at: int, awaiting: bool = True) -> RequestReport:
    return RequestReport(
        request_id=request_id,
        phase="in_flight",
        status={"outcome": "unresolved", "error": "http 503"},
        attempt=attempt,
        next_action="query",
        retry_at=retry_at,
        awaiting_grant=awaiting,
    )


def in_progress(state: LedgerState) -> tuple[int, dict[str, int]]:
    """Counted from scratch: compiles and requests in flight that are not waiting."""
    by_type: dict[str, int] = {}
    for op_id in state.compiling:
        kind = state.operations[op_id].intent.operation_type
        by_type[kind] = by_type.get(kind, 0) + 1
    for request in state.requests.values():
        if request.phase == "in_flight" and not request.waiting:
            by_type[request.operation_type] = by_type.get(request.operation_type, 0) + 1
    return sum(by_type.values()), by_type


def pump(state: LedgerState, config: LedgerConfig, now: int) -> tuple[list[str], list[str]]:
    """What the shell's `_pump` does, in its order: grants, relaunches, dispatches."""
    granted = core.plan_grants(state, config, now)
    for request_id in granted:
        core.mark_granted(state, request_id)
    for request_id in core.plan_launches(state, config):
        core.mark_launched(state, request_id)
    dispatched = core.plan_dispatches(state, config)
    for op_id in dispatched:
        core.begin_dispatch(state, op_id, f"r-{op_id}")
    return granted, dispatched


def check_limits(state: LedgerState, config: LedgerConfig) -> None:
    total, by_type = in_progress(state)
    assert (total, by_type) == (core.in_flight(state)[0], dict(+core.in_flight(state)[1]))
    assert total <= config.concurrency
    for kind, lane in config.lanes.items():
        assert by_type.get(kind, 0) <= lane


op_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(TYPES),
            "retry_in": st.integers(-3, 5),
            "waits": st.booleans(),
        }
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(
    ops=op_strategy,
    concurrency=st.integers(1, 4),
    lanes=st.dictionaries(st.sampled_from(TYPES), st.integers(1, 2), max_size=2),
    extra=st.integers(0, 5),
)
def test_one_pump_counts_only_attempts_in_progress_and_grants_in_order(
    ops: list[dict[str, Any]], concurrency: int, lanes: dict[str, int], extra: int
) -> None:
    """Requests admitted one by one (within the limits), some then waiting for a retry, plus
    ready operations: one pump never exceeds the limits counting only attempts in progress,
    grants only due retries, in (due, sequence) order, and leaves none it could grant."""
    config = LedgerConfig(concurrency=concurrency, lanes=lanes)
    named = [{**op, "id": f"op{i:02d}"} for i, op in enumerate(ops)]
    ready = [{"id": f"new{i}", "type": "shape.update"} for i in range(extra)]
    state = build(named + ready, config)
    now = 1_000
    for op in named:
        if core.in_flight(state)[0] >= concurrency or not core.fits(
            config, *core.in_flight(state), op["type"]
        ):
            continue
        request_id = freeze_now(state, config, op["id"])
        if op["waits"]:
            assert core.record_attempt(state, report(request_id, 1, now + op["retry_in"] * 100))
    check_limits(state, config)
    waiting_before = {r.id for r in state.requests.values() if r.waiting}
    granted, _ = pump(state, config, now)
    check_limits(state, config)
    retry_at = {r.id: r.retry_at or 0 for r in state.requests.values()}
    sequence = {
        r.id: state.operations[r.operation_ids[0]].sequence for r in state.requests.values()
    }
    assert set(granted) <= waiting_before
    assert all(retry_at[r] <= now for r in granted)
    assert granted == sorted(granted, key=lambda r: (retry_at[r], sequence[r]))
    # Nothing due is left waiting that a slot and its lane would take.
    total, by_type = core.in_flight(state)
    for request in state.requests.values():
        if request.waiting and (request.retry_at or 0) <= now:
            assert not core.fits(config, total, by_type, request.operation_type)


@settings(max_examples=60, deadline=None)
@given(
    plan=st.lists(st.tuples(st.integers(0, 11), st.integers(1, 6), st.booleans()), max_size=40),
    concurrency=st.integers(1, 3),
    lanes=st.dictionaries(st.sampled_from(TYPES), st.integers(1, 2), max_size=2),
    types=st.lists(st.sampled_from(TYPES), min_size=12, max_size=12),
)
def test_over_time_retries_never_exceed_the_limits_and_come_out_in_due_order(
    plan: list[tuple[int, int, bool]],
    concurrency: int,
    lanes: dict[str, int],
    types: list[str],
) -> None:
    """A run of pumps while attempts end (waiting for a retry, or resolving) and the clock
    moves: limits hold at every step, and each pump's grants are due and in (due, sequence)
    order."""
    config = LedgerConfig(concurrency=concurrency, lanes=lanes)
    state = build([{"id": f"op{i:02d}", "type": t} for i, t in enumerate(types)], config)
    now = 0
    for pick, delay, resolves in plan:
        now += 100
        granted, dispatched = pump(state, config, now)
        check_limits(state, config)
        retry_at = {r.id: r.retry_at or 0 for r in state.requests.values()}
        seq = {r.id: state.operations[r.operation_ids[0]].sequence for r in state.requests.values()}
        assert all(retry_at[r] <= now for r in granted)
        assert granted == sorted(granted, key=lambda r: (retry_at[r], seq[r]))
        for op_id in dispatched:  # their compiles end: frozen and in progress
            request_id = state.compiling[op_id]
            compiled = {"canvas_ids": [f"c-{op_id}"], "payload": {"op": op_id}}
            assert core.freeze(state, config, op_id, request_id, compiled) == "launch"
        # One attempt in progress ends: it waits for a retry `delay` ahead, or resolves.
        active = [r for r in state.requests.values() if r.phase == "in_flight" and not r.waiting]
        if not active:
            continue
        request = active[pick % len(active)]
        attempt = request.attempt + 1
        if resolves:
            final = report(request.id, attempt, 0, awaiting=False)
            done = final.model_copy(update={"phase": "resolved", "status": {"outcome": "applied"}})
            assert core.record_finished(state, done)
        else:
            assert core.record_attempt(state, report(request.id, attempt, now + delay * 100))
        check_limits(state, config)


def test_a_report_sent_again_after_its_grant_changes_nothing() -> None:
    config = LedgerConfig(concurrency=1)
    state = build([{"id": "a", "type": "shape.update"}], config)
    request_id = freeze_now(state, config, "a")
    assert core.record_attempt(state, report(request_id, 1, 500))
    assert core.attempts_in_progress(state) == 0
    assert core.plan_grants(state, config, 400) == []
    assert core.next_grant_due(state, config, 400) == 500
    assert core.plan_grants(state, config, 500) == [request_id]
    core.mark_granted(state, request_id)
    assert core.attempts_in_progress(state) == 1
    # The child's hourly report of the same attempt, crossing its grant: still in progress.
    assert not core.record_attempt(state, report(request_id, 1, 500))
    assert core.attempts_in_progress(state) == 1
    # Its next attempt's report frees the slot again.
    assert core.record_attempt(state, report(request_id, 2, 900))
    assert core.attempts_in_progress(state) == 0


def test_held_or_stopped_grants_nothing_and_sets_no_wake() -> None:
    config = LedgerConfig(concurrency=2)
    state = build([{"id": "a", "type": "shape.update"}], config)
    request_id = freeze_now(state, config, "a")
    core.record_attempt(state, report(request_id, 1, 500))
    core.hold(state, "t")
    assert core.plan_grants(state, config, 600) == []
    assert core.next_grant_due(state, config, 100) is None
    core.release(state, "t")
    assert core.next_grant_due(state, config, 100) == 500
    assert core.plan_grants(state, config, 600) == [request_id]
    core.record_attempt(state, report(request_id, 2, 900))
    core.stop(state)
    assert core.plan_grants(state, config, 1_000) == []
    assert core.next_grant_due(state, config, 100) is None


def test_a_request_on_its_own_timer_counts_for_its_whole_loop() -> None:
    """A report without `awaiting_grant` (a request started before 0.1.1): still in flight."""
    config = LedgerConfig(concurrency=1)
    state = build([{"id": "a", "type": "shape.update"}, {"id": "b", "type": "x"}], config)
    request_id = freeze_now(state, config, "a")
    assert core.record_attempt(state, report(request_id, 1, 500, awaiting=False))
    assert core.attempts_in_progress(state) == 1
    assert core.plan_dispatches(state, config) == []
    assert core.next_grant_due(state, config, 100) is None


def test_the_carried_state_keeps_waiting_and_an_older_state_reads_as_in_progress() -> None:
    config = LedgerConfig(concurrency=1)
    state = build([{"id": "a", "type": "shape.update"}], config)
    request_id = freeze_now(state, config, "a")
    core.record_attempt(state, report(request_id, 1, 500))
    carried = LedgerState.model_validate_json(state.model_dump_json())
    assert carried.requests[request_id].waiting is True
    old = state.model_dump(mode="json")
    del old["requests"][request_id]["waiting"]
    assert LedgerState.model_validate(old).requests[request_id].waiting is False
    left_out = core.next_run_input(state, config, "L").model_dump(exclude_unset=True)
    assert "own_retry_timers" not in left_out
