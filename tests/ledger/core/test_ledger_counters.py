"""The snapshot's `counters` in the ledger's pure core: they equal the events that happened
(the model's `Driver` of tests/ledger/core/test_ledger_rules.py, counting on its own), survive
continue-as-new, and start from what state of the previous build knows."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.ledger_model import STATUSES, Driver, fresh, graphs
from workflows.ledger import core
from workflows.ledger.models import LedgerConfig, LedgerState, RequestAction, RequestReport


def expected_answer(status: Any) -> str:
    """What one answer counts as, written out from the answers STATUSES draws."""
    if not isinstance(status, dict):
        return "unknown"
    if status.get("blocked"):
        return "blocked"
    return str(status["outcome"])


class CountingDriver(Driver):
    """The model's driver, counting every event it plays."""

    def __init__(self, config: LedgerConfig, state: LedgerState) -> None:
        super().__init__(config, state)
        self.enqueued = 0
        self.answers: Counter[str] = Counter()
        self.resolved: Counter[str] = Counter()
        self.blocked: Counter[str] = Counter()

    def send(self, request_id: str, status: Any) -> None:
        operations = len(self.state.requests[request_id].operation_ids)
        super().send(request_id, status)
        self.answers[expected_answer(status)] += 1
        phase = self.state.requests[request_id].phase
        if phase == "resolved":
            self.resolved[status["outcome"]] += operations
        elif phase == "blocked":
            self.blocked["far_side"] += 1

    def compile(self, op_id: str, kind: str) -> None:
        request_id = self.state.compiling[op_id]
        super().compile(op_id, kind)
        request = self.state.requests.get(request_id)
        if request is not None and request.blocker == core.INTERPRETER_UNAVAILABLE:
            self.blocked[core.INTERPRETER_UNAVAILABLE] += 1

    def skip(self, op_id: str) -> None:
        super().skip(op_id)
        self.resolved["skipped"] += 1

    def check(self) -> None:
        super().check()
        counters = core.snapshot(self.state)["counters"]
        assert counters == {
            "operations_enqueued": self.enqueued,
            "operations_resolved": dict(self.resolved),
            "request_attempts": dict(self.answers),
            "requests_blocked": dict(self.blocked),
            "completion_refusals": {},
        }


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=graphs(), data=st.data())
def test_the_counters_equal_the_events_across_continue_as_new(
    graph: list[dict[str, Any]], data: st.DataObject
) -> None:
    config = LedgerConfig(concurrency=2)
    driver = CountingDriver(config, LedgerState(ledger_id="L"))
    chunks = [graph[: len(graph) // 2], graph[len(graph) // 2 :]]
    for _ in range(60):
        choice = data.draw(
            st.sampled_from(["enqueue", "compile", "send", "send", "resume", "can", "skip"])
        )
        if choice == "enqueue" and chunks:
            batch = core.validate_enqueue(driver.state, {"operations": chunks.pop(0)})
            # Sent twice: the second time every ID is a duplicate and nothing counts.
            driver.enqueued += len(core.enqueue(driver.state, batch).accepted)
            assert core.enqueue(driver.state, batch).accepted == []
        elif choice == "compile" and driver.state.compiling:
            op_id = data.draw(st.sampled_from(sorted(driver.state.compiling)))
            driver.compile(op_id, data.draw(st.sampled_from(["ok", "ok", "error"])))
        elif choice == "send" and driver.loops:
            driver.send(data.draw(st.sampled_from(sorted(driver.loops))), data.draw(STATUSES))
        elif choice == "resume":
            core.resume(driver.state, config)
        elif choice == "can" and not driver.state.compiling:
            driver.continue_as_new()
        elif choice == "skip":
            stuck = [
                op_id
                for op_id, r in driver.state.operations.items()
                if r.phase == "blocked"
                and op_id not in driver.state.compiling
                and r.request_id not in driver.loops
            ]
            if stuck:
                driver.skip(data.draw(st.sampled_from(stuck)))
        driver.pump()
        driver.check()


def report(request_id: str, attempt: int, status: dict[str, Any], phase: str) -> RequestReport:
    return RequestReport(
        request_id=request_id,
        phase=phase,
        status=status,
        attempt=attempt,
        next_action=RequestAction.QUERY,
        awaiting_grant=phase == "in_flight",
    )


def launched(*op_ids: str) -> LedgerState:
    state = fresh(*({"id": i, "operation_type": "t", "participants": [i]} for i in op_ids))
    config = LedgerConfig()
    for op_id in core.plan_dispatches(state, config):
        core.begin_dispatch(state, op_id, f"r-{op_id}")
        compiled = {"canvas_ids": [op_id], "kind": "t", "payload": {}}
        assert core.freeze(state, config, op_id, f"r-{op_id}", compiled) == "launch"
    return state


def test_a_report_sent_again_while_waiting_for_its_grant_counts_once() -> None:
    state = launched("a")
    progress = report("r-a", 1, {"outcome": "accepted"}, "in_flight")
    assert core.record_attempt(state, progress)
    assert core.record_attempt(state, progress)  # the reminder: recorded, not counted again
    assert core.snapshot(state)["counters"]["request_attempts"] == {"accepted": 1}


def test_completion_refusals_count_by_kind_and_as_blocked_by_the_completion() -> None:
    state = launched("a", "b")
    refused = core.completion_blocked(
        core.next_step(RequestAction.SUBMIT, {"outcome": "applied"}, 1, LedgerConfig().retry, 0),
        core.completion_blocker({"blocked": True, "error": "not yet"}) or "",
    )
    failed = core.completion_blocked(
        core.next_step(RequestAction.SUBMIT, {"outcome": "rejected"}, 1, LedgerConfig().retry, 0),
        core.completion_failure("activity timed out"),
    )
    for request_id, step in (("r-a", refused), ("r-b", failed)):
        status = step.status.model_dump(mode="json", exclude_none=True)
        assert core.record_finished(state, report(request_id, 1, status, "blocked"))
    counters = core.snapshot(state)["counters"]
    assert counters["completion_refusals"] == {"refused": 1, "failed": 1}
    assert counters["requests_blocked"] == {"completion": 2}
    # The far side answered applied and rejected: that is what the attempts count.
    assert counters["request_attempts"] == {"applied": 1, "rejected": 1}


def test_a_transport_failure_and_an_interruption_count_by_their_kind() -> None:
    state = launched("a")
    transport = {"outcome": "unresolved", "error": "transport: connection refused"}
    assert core.record_attempt(state, report("r-a", 1, transport, "in_flight"))
    assert core.request_interrupted(state, "r-a", "request_failed: boom", stopped=False)
    counters = core.snapshot(state)["counters"]
    assert counters["request_attempts"] == {"transport": 1}
    assert counters["requests_blocked"] == {"request_failed": 1}


def test_state_from_the_previous_build_counts_what_it_knows() -> None:
    """Carried state of a build without counters: every operation it was ever enqueued took
    a sequence; the rest counts from this run on."""
    carried = {"ledger_id": "L", "next_sequence": 8, "resolved_total": 5}
    start = core.read_start(lambda: {"ledger_id": "L", "carried_state": carried}, "ledger:L")
    counters = core.snapshot(start.state)["counters"]
    assert counters["operations_enqueued"] == 7
    assert counters["operations_resolved"] == {}


def test_a_kind_past_the_bound_counts_as_other() -> None:
    state = LedgerState(ledger_id="L")
    counts: dict[str, int] = {}
    for n in range(core.MAX_COUNTER_KINDS + 3):
        core.bump(counts, f"kind-{n}" + "x" * 100)
    assert len(counts) == core.MAX_COUNTER_KINDS + 1
    assert counts["other"] == 3
    assert all(len(kind) <= core.MAX_COUNTER_KIND for kind in counts)
    assert state.counters is None
