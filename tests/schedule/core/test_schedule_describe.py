"""`describe` in the schedule's pure core: the ring of ended runs (bounded, newest first,
carried across continue-as-new), the counters (equal to the events that happened) and the
next fire times (iterating next_occurrence, plus the stored jitter), with hypothesis."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from workflows.schedule.core import (
    InvalidRequest,
    ScheduleCore,
    Skipped,
    initial_state,
)
from workflows.schedule.messages import read_payload
from workflows.schedule.models import (
    MAX_NEXT_FIRE_TIMES,
    MAX_RECENT_ERROR_MESSAGE,
    RECENT_RUNS_KEPT,
    DescribeQuery,
    Outcome,
    RunError,
    RunStatus,
    ScheduleInput,
    ScheduleState,
    SetRequest,
    SkipReason,
)
from workflows.schedule.status import DETAILS_NEXT_TIMES, DETAILS_RUNS, details, iso

ERRORED = Outcome(status="errored", error=RunError(name="Boom", message="x" * 1000))
COMPLETE = Outcome(status="complete")


def every(expression: str, after_ms: int) -> int | None:
    """`every:<step>` fires at multiples of step; `never` never; `until:<step>:<end>` stops."""
    if expression == "never":
        return None
    parts = expression.split(":")
    step = int(parts[1])
    following = (after_ms // step + 1) * step
    if parts[0] == "until" and following >= int(parts[2]):
        return None
    return following


def no_pick(max_ms: int) -> int:
    """The jitter a `{max_ms}` range would draw: these tests store integer jitters."""
    return 0


def core_of(state: ScheduleState | None = None, **settings: Any) -> ScheduleCore:
    return ScheduleCore(
        state or ScheduleState(),
        every,
        ScheduleInput.model_validate({"max_concurrent_runs": 2, "max_queued_runs": 2, **settings}),
    )


def shown(outcome: Outcome | None) -> dict[str, Any] | None:
    """An outcome as a recent run shows it (its error message cut)."""
    if outcome is None:
        return None
    wire = outcome.wire()
    if "error" in wire:
        wire["error"]["message"] = wire["error"]["message"][:MAX_RECENT_ERROR_MESSAGE]
    return wire


class DescribeMachine(RuleBasedStateMachine):
    """Ticks, starts, every way a run ends and an outcome is delivered, redeliveries and
    continue-as-new, against a model that writes down each event."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000_000
        self.core = core_of(max_dead_letters=3)
        self.core.set(SetRequest(expression="every:100", version=1, jitter_ms=7), self.now, no_pick)
        # The model: ended runs in end order (scheduled_time -> outcome wire, delivery).
        self.ended: list[tuple[int, dict[str, Any] | None, str]] = []
        self.started = self.completed = self.errored = 0
        self.delivered = self.dead_lettered = self.redelivered = 0
        self.skipped: dict[str, int] = {}

    def _ended(self, scheduled_time: int, outcome: Outcome | None) -> None:
        self.ended = [e for e in self.ended if e[0] != scheduled_time]
        self.ended.append((scheduled_time, shown(outcome), "pending"))
        if outcome is not None and outcome.status == "complete":
            self.completed += 1
        elif outcome is not None:
            self.errored += 1

    def _delivery(self, scheduled_time: int, delivery: str) -> None:
        self.ended = [(t, o, delivery if t == scheduled_time else d) for t, o, d in self.ended]

    def _runs(self, *states: RunStatus) -> list[int]:
        return sorted(t for t, run in self.core.state.runs.items() if run.state in states)

    @rule(dt=st.integers(0, 400))
    def tick(self, dt: int) -> None:
        self.now += dt
        due = self.core.tick(self.now)
        if isinstance(due, Skipped):
            reason = due.reason.value
            self.skipped[reason] = self.skipped.get(reason, 0) + 1
        self.started += len(self.core.take_startable(self.now))

    @precondition(lambda self: bool(self._runs(RunStatus.RUNNING)))
    @rule(data=st.data(), ok=st.booleans(), how=st.sampled_from(["signal", "stopped"]))
    def stop(self, data: st.DataObject, ok: bool, how: str) -> None:
        """A run stops: by `run_settled`, or its child ends for the schedule to deliver."""
        scheduled_time = data.draw(st.sampled_from(self._runs(RunStatus.RUNNING)))
        outcome = COMPLETE if ok else ERRORED
        if how == "signal":
            self.core.finish(scheduled_time, outcome, self.now)
        else:
            self.core.finished_to_deliver(scheduled_time, outcome, self.now)
        self._ended(scheduled_time, outcome)

    @precondition(lambda self: bool(self.core.awaiting_delivery()))
    @rule(data=st.data(), ok=st.booleans())
    def schedule_delivers(self, data: st.DataObject, ok: bool) -> None:
        run = data.draw(st.sampled_from(self.core.awaiting_delivery()))
        error = None if ok else RunError(name="Down", message="no")
        self.core.delivered(run.scheduled_time, f"o:{run.scheduled_time}", error)
        if ok:
            self.delivered += 1
        else:
            self.dead_lettered += 1
        self._delivery(run.scheduled_time, "delivered" if ok else "dead_lettered")

    @precondition(lambda self: bool(self._runs(RunStatus.RUNNING, RunStatus.COMPLETE)))
    @rule(
        data=st.data(),
        ok=st.booleans(),
        report=st.sampled_from(["completion", "acknowledged", "undelivered", "dead_lettered"]),
    )
    def run_reports(self, data: st.DataObject, ok: bool, report: str) -> None:
        """A run that delivers its own outcome reports its end: by completing (with its
        outcome) or by `run_acknowledged` (without, unless dead-lettered)."""
        candidates = [
            t
            for t in self._runs(RunStatus.RUNNING, RunStatus.COMPLETE, RunStatus.ERRORED)
            if not self.core.state.runs[t].outcome_pending
        ]
        if not candidates:
            return
        scheduled_time = data.draw(st.sampled_from(candidates))
        run = self.core.state.runs[scheduled_time]
        outcome = COMPLETE if ok else ERRORED
        was_running = run.state == RunStatus.RUNNING
        sent: Outcome | None = None if report == "acknowledged" else outcome
        dead = RunError(name="Down", message="no") if report == "dead_lettered" else None
        self.core.acknowledged(
            scheduled_time,
            f"o:{scheduled_time}",
            sent,
            dead,
            delivered=report != "undelivered",
            now_ms=self.now,
        )
        if was_running:
            self._ended(scheduled_time, sent)
        delivery = {"completion": "delivered", "acknowledged": "delivered"}.get(report, report)
        if delivery == "delivered":
            self.delivered += 1
        elif delivery == "dead_lettered":
            self.dead_lettered += 1
        self._delivery(scheduled_time, delivery)

    @precondition(lambda self: any(not d.redelivering for d in self.core.state.dead_letters))
    @rule(data=st.data(), ok=st.booleans())
    def redeliver(self, data: st.DataObject, ok: bool) -> None:
        letters = [d for d in self.core.state.dead_letters if not d.redelivering]
        letter = self.core.begin_redelivery(data.draw(st.sampled_from(letters)).idempotency_key)
        error = None if ok else RunError(name="Down", message="still")
        self.core.redelivered(letter.idempotency_key, error)
        if ok:
            self.redelivered += 1
            self._delivery(letter.scheduled_time, "redelivered")

    @rule()
    def continue_as_new(self) -> None:
        carried = ScheduleState.model_validate(json.loads(self.core.state.model_dump_json()))
        self.core = core_of(carried, max_dead_letters=3)

    @invariant()
    def the_ring_is_bounded_and_newest_first(self) -> None:
        assert len(self.core.state.recent_runs) <= RECENT_RUNS_KEPT
        expected = [
            {"scheduled_time": t, "delivery": d, **({} if o is None else {"outcome": o})}
            for t, o, d in reversed(self.ended[-RECENT_RUNS_KEPT:])
        ]
        recent = self.core.describe(DescribeQuery())["recent_runs"]
        assert [
            {k: v for k, v in entry.items() if k in ("scheduled_time", "outcome", "delivery")}
            for entry in recent
        ] == expected
        for entry in recent:
            assert entry["ended_at"] <= self.now
            assert entry["started_at"] <= entry["ended_at"]
            assert entry["due_at"] >= entry["scheduled_time"]

    @invariant()
    def the_counters_equal_the_events(self) -> None:
        counters = self.core.describe(DescribeQuery())["counters"]
        assert counters == {
            "runs_started": self.started,
            "runs_completed": self.completed,
            "runs_errored": self.errored,
            "ticks_skipped": self.skipped,
            "ticks_skipped_total": sum(self.skipped.values()),
            "outcomes_delivered": self.delivered,
            "outcomes_dead_lettered": self.dead_lettered,
            "outcomes_redelivered": self.redelivered,
        }


TestDescribeMachine = DescribeMachine.TestCase
TestDescribeMachine.settings = settings(max_examples=150, stateful_step_count=50, deadline=None)


@given(
    step=st.integers(1, 10_000),
    end=st.one_of(st.none(), st.integers(0, 200_000)),
    now=st.integers(0, 100_000),
    jitter=st.integers(0, 50_000),
    count=st.integers(0, MAX_NEXT_FIRE_TIMES),
)
def test_next_fire_times_iterate_next_occurrence_plus_the_stored_jitter(
    step: int, end: int | None, now: int, jitter: int, count: int
) -> None:
    expression = f"every:{step}" if end is None else f"until:{step}:{end}"
    core = core_of()
    core.set(SetRequest(expression=expression, version=1, jitter_ms=jitter), now, no_pick)
    times = core.next_fire_times(count)
    expected: list[int] = []
    cursor = every(expression, now)
    while cursor is not None and len(expected) < count:
        expected.append(cursor + jitter)
        cursor = every(expression, cursor)
    assert times == expected
    assert all(a < b for a, b in itertools.pairwise(times))
    if times:  # the first is what the tick timer waits for
        assert times[0] == core.next_wake_at()


def test_no_fire_times_while_paused_cancelled_or_never_set() -> None:
    core = core_of()
    assert core.next_fire_times(10) == []
    core.set(SetRequest(expression="every:100", version=1), 0, no_pick)
    assert core.next_fire_times(3) == [100, 200, 300]
    core.pause()
    assert core.next_fire_times(3) == []
    core.unpause(1000)
    assert core.next_fire_times(2) == [1100, 1200]
    core.cancel(read_payload("cancel", {}))
    assert core.next_fire_times(3) == []


def test_state_from_the_previous_build_loads_and_counts_from_what_it_knows() -> None:
    """Carried state of 0.1.0 (no ring, no counters): its skipped ticks and dead letters
    count; the rest counts from now."""
    letter = {
        "scheduled_time": 5,
        "due_at": 5,
        "idempotency_key": "o:5",
        "outcome": {"status": "complete"},
        "error": {"name": "E", "message": "m"},
    }
    carried = {"skipped_ticks": 4, "dead_letters": [letter], "dead_letters_dropped": 2}
    core = core_of(ScheduleState.model_validate(carried))
    described = core.describe(read_payload("describe", None))
    assert described["recent_runs"] == []
    assert described["counters"]["ticks_skipped_total"] == 4
    assert described["counters"]["outcomes_dead_lettered"] == 3
    assert described["counters"]["runs_started"] == 0


def test_a_skipped_tick_counts_under_its_reason() -> None:
    core = core_of(max_concurrent_runs=1, max_queued_runs=0)
    core.set(SetRequest(expression="every:100", version=1), 0, no_pick)
    core.tick(100)
    core.take_startable(100)
    core.tick(200)
    counters = core.describe(DescribeQuery())["counters"]
    assert counters["ticks_skipped"] == {SkipReason.QUEUE_FULL.value: 1}
    assert counters["ticks_skipped_total"] == 1


def test_a_recent_run_keeps_its_times_and_a_cut_error() -> None:
    core = core_of()
    core.set(SetRequest(expression="every:100", version=1, jitter_ms=5), 0, no_pick)
    core.tick(105)
    core.take_startable(110)
    core.finished_to_deliver(100, ERRORED, 150)
    [entry] = core.recent_runs()
    assert entry == {
        "scheduled_time": 100,
        "due_at": 105,
        "started_at": 110,
        "ended_at": 150,
        "outcome": {
            "status": "errored",
            "error": {"name": "Boom", "message": "x" * MAX_RECENT_ERROR_MESSAGE},
        },
        "delivery": "pending",
    }
    core.delivered(100, "o:100", None)
    assert core.recent_runs()[0]["delivery"] == "delivered"
    assert core.recent_runs(0) == []


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "(root): Input should be an object (got [])"),
        ({"runs": -1}, "runs: Input should be greater than or equal to 0 (got -1)"),
        ({"runs": 11}, "runs: Input should be less than or equal to 10 (got 11)"),
        ({"runs": True}, "runs: Input should be a valid integer (got True)"),
        ({"next": 51}, "next: Input should be less than or equal to 50 (got 51)"),
        ({"next": "3"}, "next: Input should be a valid integer (got '3')"),
        ({"limit": 3}, "limit: Extra inputs are not permitted (got 3)"),
    ],
)
def test_a_bad_describe_argument_is_refused_naming_field_and_value(
    raw: object, message: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        read_payload("describe", raw)
    assert str(refused.value) == f"invalid describe payload: {message}"


def test_describe_arguments_default_and_bound() -> None:
    assert read_payload("describe", None) == DescribeQuery(runs=RECENT_RUNS_KEPT, next=10)
    assert read_payload("describe", {"runs": 0, "next": MAX_NEXT_FIRE_TIMES}) == DescribeQuery(
        runs=0, next=MAX_NEXT_FIRE_TIMES
    )


def test_the_ui_details_show_the_last_runs_and_next_times_bounded() -> None:
    core = core_of(max_concurrent_runs=1)
    core.set(SetRequest(expression="every:100", version=1), 0, no_pick)
    for n in range(1, RECENT_RUNS_KEPT + 3):
        core.tick(n * 100)
        core.take_startable(n * 100)
        core.finished_to_deliver(n * 100, ERRORED if n % 2 else COMPLETE, n * 100 + 50)
        core.delivered(n * 100, f"o:{n}", None)
    shown = details(core.state, core.next_wake_at(), core.next_fire_times(MAX_NEXT_FIRE_TIMES))
    lines = shown.splitlines()
    start = lines.index("Last runs (newest first):")
    assert lines[start + 1] == ""  # a blank line first, so the UI renders a list
    runs = lines[start + 2 : start + 2 + DETAILS_RUNS + 1]
    assert runs[:DETAILS_RUNS] == [
        f"- {iso(n * 100)}: {'errored (Boom)' if n % 2 else 'complete'}, delivered"
        for n in range(RECENT_RUNS_KEPT + 2, RECENT_RUNS_KEPT + 2 - DETAILS_RUNS, -1)
    ]
    assert runs[DETAILS_RUNS] == ""  # no more than DETAILS_RUNS
    upcoming = [line for line in lines if line.startswith("Next fire times: ")]
    expected = core.next_fire_times(DETAILS_NEXT_TIMES)
    assert upcoming == ["Next fire times: " + ", ".join(iso(t) for t in expected)]
    assert len(shown) < 1024


def test_the_ring_and_counters_take_at_most_24_kib_of_the_state_budget() -> None:
    """docs/limits.md: the worst case, every error cut at its bound and made of characters
    JSON escapes six-fold, every counter at the largest safe integer."""
    largest = 2**53 - 1
    worst = ERRORED.model_copy(
        update={"error": RunError(name="\x00" * 1000, message="\x00" * 1000)}
    )
    core = core_of(max_concurrent_runs=1)
    core.set(SetRequest(expression="every:1", version=1), 0, no_pick)
    for n in range(1, RECENT_RUNS_KEPT * 2):
        core.tick(largest - 10**6 + n)
        [run] = core.take_startable(largest - 10**6 + n)
        core.finished_to_deliver(run.scheduled_time, worst, largest)
        core.delivered(run.scheduled_time, "o", RunError(name="x", message="y"))
    counters = core.counters
    for name in type(counters).model_fields:
        if name != "ticks_skipped":
            setattr(counters, name, largest)
    counters.ticks_skipped = {reason.value: largest for reason in SkipReason}
    carried = ScheduleState(recent_runs=core.state.recent_runs, counters=counters)
    assert len(carried.recent_runs) == RECENT_RUNS_KEPT
    assert len(carried.model_dump_json()) <= 24 * 1024


@given(
    step=st.integers(1, 5_000),
    now=st.integers(0, 50_000),
    jitter=st.integers(0, 5_000),
    start_at=st.one_of(st.none(), st.integers(0, 100_000)),
    length=st.one_of(st.none(), st.integers(1, 100_000)),
    remaining=st.one_of(st.none(), st.integers(0, 12)),
    count=st.integers(0, MAX_NEXT_FIRE_TIMES),
)
def test_next_fire_times_stay_within_the_schedules_life(
    step: int,
    now: int,
    jitter: int,
    start_at: int | None,
    length: int | None,
    remaining: int | None,
    count: int,
) -> None:
    """None before `start_at`, none at or after `end_at`, at most `remaining_runs`: each
    fire time is one a tick will wait for (the schedule's bounds)."""
    end_at = None if length is None else (start_at or 0) + length
    bounds = {"start_at": start_at, "end_at": end_at, "remaining_runs": remaining}
    core = core_of(initial_state(ScheduleInput.model_validate(bounds)), **bounds)
    core.set(SetRequest(expression=f"every:{step}", version=1, jitter_ms=jitter), now, no_pick)
    expected: list[int] = []
    cursor = every(f"every:{step}", max(now, (start_at or 0) - 1))
    while (
        cursor is not None
        and (end_at is None or cursor < end_at)
        and len(expected) < min(count, remaining if remaining is not None else count)
    ):
        expected.append(cursor + jitter)
        cursor = every(f"every:{step}", cursor)
    times = core.next_fire_times(count)
    assert times == expected
    if times:
        assert times[0] == core.next_wake_at()


def test_catchup_skips_count_under_their_reason_and_describe_shows_the_pause_note() -> None:
    core = core_of(catchup_window_ms=50)
    core.set(SetRequest(expression="every:100", version=1), 0, no_pick)
    core.tick(1_000)  # 100 was due 900 ms ago: skipped by the window
    counters = core.describe(DescribeQuery())["counters"]
    assert counters["ticks_skipped"] == {SkipReason.CATCHUP_WINDOW.value: 1}
    assert counters["ticks_skipped_total"] == 1
    core.pause("deploying")
    described = core.describe(DescribeQuery())
    assert (described["paused"], described["pause_note"]) == (True, "deploying")
    assert described["next_fire_times"] == []


def test_describe_shows_the_live_count_of_remaining_runs() -> None:
    bounds = {"remaining_runs": 2}
    core = core_of(initial_state(ScheduleInput.model_validate(bounds)), **bounds)
    core.set(SetRequest(expression="every:100", version=1), 0, no_pick)
    assert core.describe(DescribeQuery())["remaining_runs"] == 2
    core.tick(100)
    assert core.describe(DescribeQuery())["remaining_runs"] == 1
    unlimited = core_of()
    assert unlimited.describe(DescribeQuery())["remaining_runs"] is None
