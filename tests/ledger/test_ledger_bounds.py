"""The ledger's carried state stays bounded: retention of resolved operations, the window of
remembered IDs, input limits, the state budget, paged snapshots (pure core)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.ledger_model import dispatch_all, finish, fresh, intent, passthrough
from workflows.budget import STATE_BUDGET_BYTES
from workflows.ledger import core
from workflows.ledger.models import (
    MAX_BATCH_OPERATIONS,
    MAX_PAYLOAD_BYTES,
    LedgerConfig,
    LedgerState,
    RetentionConfig,
)


def config(resolved: int, remembered: int) -> LedgerConfig:
    return LedgerConfig(
        concurrency=100,
        retention=RetentionConfig(resolved_operations=resolved, remembered_ids=remembered),
    )


def enqueue(state: LedgerState, *intents: Any) -> Any:
    return core.enqueue(state, core.validate_enqueue(state, {"operations": list(intents)}))


def resolve_everything(state: LedgerState, cfg: LedgerConfig) -> None:
    for request_id in dispatch_all(state, cfg):
        finish(state, request_id, "applied")


def test_resolved_operations_leave_the_state_and_are_remembered_by_id() -> None:
    cfg = config(resolved=2, remembered=3)
    state = fresh(*(intent(f"op-{n}", [f"c{n}"]) for n in range(6)))
    resolve_everything(state, cfg)
    left = core.compact(state, cfg)
    assert left == ["op-0", "op-1", "op-2", "op-3"]
    assert list(state.operations) == ["op-4", "op-5"]  # the newest resolved stay whole
    assert list(state.forgotten) == ["op-1", "op-2", "op-3"]  # op-0 fell out of the window
    assert set(state.requests) == {"r-op-4", "r-op-5"}
    kept = state.operations["op-5"]
    assert kept.intent.payload is None and kept.intent.participants == []
    assert state.requests["r-op-5"].body == {}
    assert (kept.outcome, kept.phase) == ("applied", "resolved")
    assert state.claims == {}


def test_remembered_ids_are_duplicates_and_resolved_dependencies() -> None:
    cfg = config(resolved=0, remembered=2)
    state = fresh(intent("a", ["c1"]), intent("b", ["c2"]), intent("c", ["c3"]))
    resolve_everything(state, cfg)
    core.compact(state, cfg)
    assert list(state.forgotten) == ["b", "c"]
    result = enqueue(
        state,
        intent("b", ["c1"]),  # remembered: a duplicate, changes nothing
        intent("a", ["c1"]),  # past the window: a new operation
        intent("d", ["c4"], ["c"]),  # depends on a remembered, resolved operation
        intent("e", ["c5"], ["x"]),  # depends on an unknown ID: waits for it
    )
    assert (result.accepted, result.duplicates) == (["a", "d", "e"], ["b"])
    assert core.plan_dispatches(state, cfg) == ["a", "d"]
    with pytest.raises(core.LedgerInputError, match="'c' is already resolved"):
        core.check_skip(state, "c")


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=0, max_value=5),
    st.integers(min_value=0, max_value=8),
    st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=12),
)
def test_whatever_is_enqueued_the_state_keeps_its_bounds(
    resolved: int, remembered: int, batches: list[int]
) -> None:
    """Model: every ID resolved so far, in resolution (= sequence) order. After compaction
    the state holds at most `resolved` resolved operations, the window the `remembered`
    IDs resolved just before those, and an ID is a duplicate exactly when it is in either."""
    cfg = config(resolved, remembered)
    state = LedgerState(ledger_id="L")
    resolved_ids: list[str] = []
    number = 0
    for size in batches:
        ids = [f"op-{number + k}" for k in range(size)]
        number += size
        enqueue(state, *(intent(i, [f"canvas-{i}"]) for i in ids))
        resolve_everything(state, cfg)
        resolved_ids += ids
        core.compact(state, cfg)
        in_state = [r.intent.id for r in state.operations.values() if r.phase == "resolved"]
        assert in_state == resolved_ids[len(resolved_ids) - min(resolved, len(resolved_ids)) :]
        gone = resolved_ids[: len(resolved_ids) - len(in_state)]
        assert list(state.forgotten) == gone[len(gone) - min(remembered, len(gone)) :]
        for known in resolved_ids:
            expected = known in in_state or known in state.forgotten
            assert core.is_known(state, known) is expected
        assert len(state.requests) == len(in_state)
        assert state.resolved_total == len(resolved_ids)


def test_limits_name_the_field_the_value_and_the_limit() -> None:
    state = LedgerState(ledger_id="L")
    big = {"x": "y" * MAX_PAYLOAD_BYTES}
    with pytest.raises(core.LedgerInputError) as error:
        core.validate_enqueue(state, {"operations": [intent("a", ["c"], payload=big)]})
    assert "operations.0.payload is 16392 bytes as JSON, more than the limit of 16384" in str(
        error.value
    )
    many = [intent(f"o{n}", ["c"]) for n in range(MAX_BATCH_OPERATIONS + 1)]
    with pytest.raises(core.LedgerInputError, match="operations: List should have at most 100"):
        core.validate_enqueue(state, {"operations": many})
    with pytest.raises(
        core.LedgerInputError, match=r"operations\.0\.id: String should have at most"
    ):
        core.validate_enqueue(state, {"operations": [intent("i" * 101, ["c"])]})
    assert state.operations == {}


def test_a_full_ledger_refuses_more_until_operations_resolve() -> None:
    state = LedgerState(ledger_id="L")
    payload = {"blob": "z" * 15_000}
    batches = 0
    with pytest.raises(core.LedgerInputError, match="ledger is full: its state is"):
        while True:
            ops = [intent(f"b{batches}-{n}", ["c"], payload=payload) for n in range(5)]
            enqueue(state, *ops)
            batches += 1
    size = core.json_size(state)
    assert STATE_BUDGET_BYTES // 2 < size <= STATE_BUDGET_BYTES
    refused = [intent(f"again-{n}", ["c"], payload=payload) for n in range(5)]
    before = dict(state.operations)
    with pytest.raises(core.LedgerInputError):
        enqueue(state, *refused)
    assert state.operations == before  # a refusal records nothing
    cfg = config(resolved=0, remembered=100)
    while len(state.forgotten) < len(before):
        resolve_everything(state, cfg)
        core.compact(state, cfg)
    assert len(enqueue(state, *refused).accepted) == 5


def test_a_frozen_body_far_larger_than_its_intent_is_not_frozen() -> None:
    state = fresh(intent("a", ["c1"]))
    core.begin_dispatch(state, "a", "r1")
    compiled = {**passthrough(state, "a"), "expanded": "w" * 10_000}
    assert core.freeze(state, LedgerConfig(), "a", "r1", compiled) == "blocked"
    assert state.operations["a"].blockers[0].startswith("invalid_compile_result: 10")
    assert state.requests == {}


def test_snapshot_pages_by_sequence_and_phase_with_counts() -> None:
    cfg = config(resolved=100, remembered=100)
    state = fresh(*(intent(f"op-{n}", [f"c{n}"]) for n in range(5)), intent("x", []))
    for request_id in dispatch_all(state, cfg)[:2]:
        finish(state, request_id, "applied")
    first = core.snapshot(state, core.parse_snapshot_query({"limit": 2}))
    assert [o["id"] for o in first["operations"]] == ["op-0", "op-1"]
    assert [r["id"] for r in first["requests"]] == ["r-op-0", "r-op-1"]
    second = core.snapshot(state, core.parse_snapshot_query({"after": first["next_after"]}))
    assert [o["id"] for o in second["operations"]] == ["op-2", "op-3", "op-4", "x"]
    assert second["next_after"] is None
    blocked = core.snapshot(state, core.parse_snapshot_query({"phase": "blocked"}))
    assert [o["id"] for o in blocked["operations"]] == ["x"]
    assert first["counts"] == {
        "operations": {"blocked": 1, "dispatched": 3, "resolved": 2},
        "requests": {"in_flight": 3, "resolved": 2},
        "forgotten": 0,
        "resolved_total": 2,
    }
    with pytest.raises(core.LedgerInputError, match="limit: Input should be less than or equal"):
        core.parse_snapshot_query({"limit": 10_000})


def test_a_large_status_is_kept_as_its_outcome_and_error() -> None:
    status = {"outcome": "rejected", "error": "e" * 2000, "canonical": {"big": "x" * 5000}}
    kept = core.bounded_status(status)
    assert kept == {"outcome": "rejected", "error": "e" * 500, "truncated": True}
    assert core.bounded_status({"outcome": "applied"}) == {"outcome": "applied"}
