"""The schedule's pure core against a simple model of rules S2-S8 (hypothesis), plus the
validation messages of `set`/`cancel` and the S7 check of `next_occurrence`."""

from __future__ import annotations

import re
from bisect import bisect_right

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from workflows.schedule.core import (
    InvalidRequest,
    ScheduleCore,
    Skipped,
    attempts_begun,
    checked_next,
)
from workflows.schedule.cron import next_occurrence
from workflows.schedule.messages import read_payload
from workflows.schedule.models import (
    JitterRange,
    Outcome,
    OutcomeRetries,
    Run,
    RunError,
    RunStatus,
    ScheduleInput,
    ScheduleState,
    SetRequest,
    SkipReason,
)
from workflows.schedule.status import NEXT_TICK_PUBLISH_SLACK_MS, next_tick_stale


def every(expression: str, after_ms: int) -> int | None:
    """Test next_occurrence: `every:<step>` fires at multiples of step; `never` never."""
    if expression == "never":
        return None
    step = int(expression.removeprefix("every:"))
    return (after_ms // step + 1) * step


# The model's calendar: `every:<step>` as a plain list of its ticks, written out.
HORIZON_MS = 2_000_000
TICKS = {step: list(range(step, HORIZON_MS, step)) for step in (100, 250, 1000)}


class ScheduleMachine(RuleBasedStateMachine):
    """Random set/cancel/tick/settle/ack sequences with a random clock, against a model that
    keeps its own schedule: the stored version, whether it is live, and its position in the
    list of ticks (S6 as a walk along that list, S5 as the seed's `cancel`)."""

    overlap = "queue"
    # The model's queue: how many runs may wait for a slot under each overlap policy.
    QUEUE_LIMIT = {"queue": 3, "skip": 0, "buffer_one": 1}

    def __init__(self) -> None:
        super().__init__()
        self.max_runs = 2
        self.max_queued = self.QUEUE_LIMIT[self.overlap]
        self.core = ScheduleCore(
            ScheduleState(),
            every,
            ScheduleInput.model_validate(
                {
                    "max_concurrent_runs": self.max_runs,
                    "max_queued_runs": 3,
                    "overlap": self.overlap,
                }
            ),
        )
        self.skipped = 0
        self.now = 1_000_000
        self.highest_version = -1  # highest version ever stored or tombstoned
        self.fired: list[int] = []
        self.picks: list[int] = []
        # The model's schedule.
        self.version: int | None = None  # stored version, live or tombstone
        self.live = False
        self.ticks: list[int] = []
        self.position: int | None = None  # index in `ticks` of the next tick; None: none
        self.jitter = 0

    def pick(self, max_ms: int) -> int:
        value = max_ms // 3
        self.picks.append(value)
        return value

    @rule(
        version=st.integers(0, 8),
        step=st.sampled_from([100, 250, 1000]),
        jitter=st.one_of(st.integers(0, 300), st.builds(JitterRange, max_ms=st.integers(0, 300))),
    )
    def set(self, version: int, step: int, jitter: int | JitterRange) -> None:
        before = self.core.state.schedule
        request = SetRequest(expression=f"every:{step}", version=version, jitter_ms=jitter)
        applied = self.core.set(request, self.now, self.pick)
        assert applied == (version > self.highest_version)
        if applied:
            self.highest_version = version
            self.version, self.live = version, True
            self.ticks = TICKS[step]
            self.position = bisect_right(self.ticks, self.now)  # the first tick after now
            self.jitter = jitter if isinstance(jitter, int) else jitter.max_ms // 3
            stored = self.core.state.schedule
            assert stored is not None
            assert stored.next_at == self.ticks[self.position]
            assert stored.jitter_ms == self.jitter
        else:
            assert self.core.state.schedule == before  # nothing changes, jitter kept

    @rule(version=st.one_of(st.none(), st.integers(0, 8)))
    def cancel(self, version: int | None) -> None:
        live = self.core.cancel(
            read_payload("cancel", {} if version is None else {"version": version})
        )
        # The seed's `cancel`, step by step.
        nothing_live = version is None and not self.live
        outranked = version is not None and self.version is not None and self.version > version
        if nothing_live or outranked:
            expected = False
        else:
            expected = self.live
            self.version = version if version is not None else self.version
            self.live, self.position = False, None
            self.highest_version = max(self.highest_version, self.version or 0)
        assert live == expected
        assert (self.core.get() is None) == (not self.live)

    @rule(dt=st.integers(0, 2500))
    def tick(self, dt: int) -> None:
        self.now += dt
        assert self.now < HORIZON_MS - 10_000
        waiting = self.core.queued_count() - max(self.max_runs - self.core.running_count(), 0)
        run = self.core.tick(self.now)
        if not self.live or self.position is None:
            assert run is None and self.core.next_wake_at() is None
            return
        scheduled = self.ticks[self.position]
        if scheduled + self.jitter > self.now:  # not due yet
            assert run is None
            assert self.core.next_wake_at() == scheduled + self.jitter
            return
        # Due: one run for the earliest missed tick; walk past every tick whose firing
        # time has passed too (they collapse into this run) to the first one still ahead.
        self.position += 1
        while self.ticks[self.position] + self.jitter <= self.now:
            self.position += 1
        assert run is not None and run.scheduled_time == scheduled
        assert self.core.next_wake_at() == self.ticks[self.position] + self.jitter
        # after a tick the schedule is never due again at the same instant (S6)
        assert self.core.tick(self.now) is None
        assert run.scheduled_time not in self.fired  # at most once
        self.fired.append(run.scheduled_time)
        if waiting + 1 > self.max_queued:  # no room: skipped, never recorded
            reason = SkipReason.QUEUE_FULL if self.overlap == "queue" else SkipReason.OVERLAP
            assert run == Skipped(scheduled, scheduled + self.jitter, reason)
            assert run.scheduled_time not in self.core.state.runs
            self.skipped += 1
        else:
            assert isinstance(run, Run)
            assert run.state == RunStatus.QUEUED and run.due_at == scheduled + self.jitter
        assert self.core.state.skipped_ticks == self.skipped

    @rule()
    def start(self) -> None:
        queued_before = sorted(
            r.scheduled_time for r in self.core.state.runs.values() if r.state == RunStatus.QUEUED
        )
        free = self.max_runs - self.core.running_count()
        started = [r.scheduled_time for r in self.core.take_startable()]
        assert started == queued_before[: max(free, 0)]  # FIFO, up to the free slots

    @precondition(lambda self: self.core.running_count() > 0)
    @rule(data=st.data(), ok=st.booleans())
    def finish(self, data: st.DataObject, ok: bool) -> None:
        running = [r for r in self.core.state.runs.values() if r.state == RunStatus.RUNNING]
        run = data.draw(st.sampled_from(running))
        outcome = (
            Outcome(status="complete")
            if ok
            else Outcome.model_validate(
                {"status": "errored", "error": {"name": "Boom", "message": "x"}}
            )
        )
        assert self.core.finish(run.scheduled_time, outcome)
        assert not self.core.finish(run.scheduled_time, outcome)  # settles once

    @precondition(lambda self: bool(self.core.state.runs))
    @rule(data=st.data())
    def acknowledge(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.core.state.runs)))
        assert self.core.forget(key)
        assert key not in [r["scheduled_time"] for r in self.core.runs()]

    @invariant()
    def slots_are_respected(self) -> None:
        assert self.core.running_count() <= self.max_runs

    @invariant()
    def the_queue_is_bounded(self) -> None:
        free = max(self.max_runs - self.core.running_count(), 0)
        assert self.core.queued_count() - free <= self.max_queued

    @invariant()
    def stored_version_never_drops(self) -> None:
        stored = self.core.state.schedule
        if stored is not None:
            assert stored.version <= self.highest_version

    @invariant()
    def state_survives_continue_as_new(self) -> None:
        carried = ScheduleState.model_validate_json(self.core.state.model_dump_json())
        assert carried == self.core.state


TestScheduleMachine = ScheduleMachine.TestCase
TestScheduleMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


class SkipOverlapMachine(ScheduleMachine):
    """`overlap: "skip"`: a tick that finds every slot busy is skipped (S6 and S8 hold)."""

    overlap = "skip"


class BufferOneOverlapMachine(ScheduleMachine):
    """`overlap: "buffer_one"`: at most one run waits; later ticks are skipped meanwhile."""

    overlap = "buffer_one"


TestSkipOverlap = SkipOverlapMachine.TestCase
TestSkipOverlap.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
TestBufferOneOverlap = BufferOneOverlapMachine.TestCase
TestBufferOneOverlap.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)


def test_a_tick_after_a_long_outage_fires_once_at_the_earliest_missed_time() -> None:
    core = ScheduleCore(ScheduleState(), every, ScheduleInput(max_concurrent_runs=10))
    core.set(SetRequest(expression="every:1000", version=1), 500, lambda _: 0)
    run = core.tick(86_400_500)  # a day later
    assert run is not None and run.scheduled_time == 1000
    assert core.tick(86_400_500) is None
    assert core.next_wake_at() == 86_401_000


def test_jitter_delays_the_firing_and_the_search_uses_now_minus_jitter() -> None:
    core = ScheduleCore(ScheduleState(), every, ScheduleInput(max_concurrent_runs=10))
    core.set(SetRequest(expression="every:1000", version=1, jitter_ms=400), 0, lambda _: 0)
    assert core.tick(1399) is None
    run = core.tick(1400)
    assert run is not None and (run.scheduled_time, run.due_at) == (1000, 1400)
    assert core.get() == {
        "expression": "every:1000",
        "version": 1,
        "jitter_ms": 400,
        "next_at": 2000,
        "params": {},
    }


def test_a_schedule_whose_next_occurrence_is_none_stops_ticking() -> None:
    core = ScheduleCore(ScheduleState(), every, ScheduleInput(max_concurrent_runs=10))
    core.set(SetRequest(expression="never", version=1), 0, lambda _: 0)
    assert core.next_wake_at() is None and core.tick(10**12) is None
    assert core.get() is not None and core.get()["next_at"] is None  # type: ignore[index]


# The seed's `cancel(version?)` (000_*.txt), case by case: what it returns, whether a schedule
# is still live after it, and the highest version a later `set` is refused for (-1: none).
SEED_CANCEL_CASES = [
    # stored before            cancel           returns  live after  set refused up to
    ("none", {}, False, None, -1),  # nothing live: nothing recorded
    ("none", {"version": 3}, False, None, 3),  # a tombstone of 3 from nothing
    ("live 5", {}, True, None, 5),
    ("live 5", {"version": 4}, False, 5, 5),  # the stored version is higher: ignored
    ("live 5", {"version": 5}, True, None, 5),
    ("live 5", {"version": 7}, True, None, 7),
    ("tombstone 5", {}, False, None, 5),
    ("tombstone 5", {"version": 4}, False, None, 5),
    ("tombstone 5", {"version": 9}, False, None, 9),
]


def _stored(before: str) -> ScheduleCore:
    core = ScheduleCore(ScheduleState(), every, ScheduleInput(max_concurrent_runs=10))
    if before != "none":
        core.set(SetRequest(expression="every:1000", version=5), 0, lambda _: 0)
    if before.startswith("tombstone"):
        core.cancel(read_payload("cancel", {}))
    return core


@pytest.mark.parametrize(
    ("before", "payload", "returns", "live_after", "refused"), SEED_CANCEL_CASES
)
def test_cancel_follows_the_seed_case_by_case(
    before: str, payload: dict[str, int], returns: bool, live_after: int | None, refused: int
) -> None:
    core = _stored(before)
    assert core.cancel(read_payload("cancel", payload)) is returns
    view = core.get()
    assert (None if view is None else view["version"]) == live_after
    if live_after is None:
        assert core.next_wake_at() is None
    # A later set: refused up to the recorded version, applied above it.
    state = core.state.model_dump_json()
    for version, applies in ((refused, False), (refused + 1, True)):
        if version < 0:
            continue
        probe = ScheduleCore(
            ScheduleState.model_validate_json(state), every, ScheduleInput(max_concurrent_runs=10)
        )
        request = SetRequest(expression="every:10", version=version)
        assert probe.set(request, 0, lambda _: 0) is applies, version


def test_cancel_with_a_version_records_a_tombstone_that_blocks_that_version() -> None:
    core = ScheduleCore(ScheduleState(), every, ScheduleInput(max_concurrent_runs=10))
    assert core.cancel(read_payload("cancel", {"version": 3})) is False
    assert not core.set(SetRequest(expression="every:10", version=3), 0, lambda _: 0)
    assert core.set(SetRequest(expression="every:10", version=4), 0, lambda _: 0)
    assert core.cancel(read_payload("cancel", {"version": 2})) is False  # stored is higher: ignored
    assert core.get() is not None
    assert core.cancel(read_payload("cancel", {})) is True


EVERY = {"expression": "@every 1s", "version": 1}
MAX = "2147483647"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({**EVERY, "version": -1}, "version: Input should be greater than or equal to 0 (got -1)"),
        ({**EVERY, "version": 2**53}, f"version: Input should be less than or equal to {2**53 - 1} (got {2**53})"),  # noqa: E501
        ({**EVERY, "version": True}, "version: Input should be a valid integer (got True)"),
        ({**EVERY, "expression": ""}, "expression: must not be blank (got '')"),
        ({**EVERY, "expression": "every 1s"}, "expression: does not parse: "),
        ({**EVERY, "jitter_ms": 2**31}, f"jitter_ms.integer: Input should be less than or equal to {MAX} (got {2**31})"),  # noqa: E501
        ({**EVERY, "jitter_ms": {"max_ms": -5}}, "jitter_ms.range.max_ms: Input should be greater than or equal to 0 (got -5)"),  # noqa: E501
        ({**EVERY, "jitter_ms": {"min_ms": 5}}, "jitter_ms.range.max_ms: Field required (got {'min_ms': 5})"),  # noqa: E501
        ({**EVERY, "params": [1]}, "params: Input should be an object (got [1])"),
        ({**EVERY, "verison": 2}, "verison: Extra inputs are not permitted (got 2)"),
        ("@every 1s", "(root): Input should be an object (got '@every 1s')"),
    ],
)  # fmt: skip
def test_a_malformed_set_is_rejected_with_a_message_naming_field_and_value(
    payload: object, message: str
) -> None:
    with pytest.raises(InvalidRequest, match=re.escape(f"invalid set payload: {message}")):
        read_payload("set", payload, 0, next_occurrence)


def test_a_well_formed_set_parses_with_defaults() -> None:
    request = read_payload("set", {"expression": "@every 1s", "version": 0}, 0, next_occurrence)
    assert (request.jitter_ms, request.params) == (0, {})


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"version": -2}, "version: Input should be greater than or equal to 0 (got -2)"),
        ({"version": "3"}, "version: Input should be a valid integer (got '3')"),
        ({"versoin": 3}, "versoin: Extra inputs are not permitted (got 3)"),
    ],
)
def test_a_malformed_cancel_is_rejected_with_a_message_naming_field_and_value(
    payload: object, message: str
) -> None:
    with pytest.raises(InvalidRequest, match=re.escape(f"invalid cancel payload: {message}")):
        read_payload("cancel", payload)


@pytest.mark.parametrize("bad", [100, 99, 100.5, "200", True])
def test_next_occurrence_must_return_none_or_an_int_strictly_after(bad: object) -> None:
    with pytest.raises(ValueError, match=re.escape(f"got {bad!r}")):
        checked_next(lambda _e, _a: bad, "x", 100)  # type: ignore[arg-type]
    assert checked_next(lambda _e, _a: 101, "x", 100) == 101
    assert checked_next(lambda _e, _a: None, "x", 100) is None


def test_params_over_the_limit_are_refused_naming_the_size() -> None:
    big = {"blob": "x" * 9000}
    with pytest.raises(InvalidRequest, match=r"params: is 9011 bytes as JSON, more than"):
        read_payload("set", {"expression": "every:1000", "version": 1, "params": big}, 0, every)


def test_a_full_queue_refuses_trigger_and_backfill_and_skips_ticks() -> None:
    core = ScheduleCore(
        ScheduleState(), every, ScheduleInput(max_concurrent_runs=1, max_queued_runs=1)
    )
    core.set(SetRequest(expression="every:1000", version=1), 0, lambda m: 0)
    first = core.trigger(10)
    assert [r.scheduled_time for r in core.take_startable()] == [first.scheduled_time]
    core.trigger(20)  # waits: the queue holds one
    with pytest.raises(InvalidRequest, match="trigger refused: 1 more run"):
        core.trigger(30)
    with pytest.raises(InvalidRequest, match="backfill refused: 2 more run"):
        core.backfill(0, 2000)
    assert sorted(core.state.runs) == [10, 20]
    assert core.tick(1000) == Skipped(1000, 1000, SkipReason.QUEUE_FULL)
    assert core.state.skipped_ticks == 1 and sorted(core.state.runs) == [10, 20]


def test_max_queued_runs_zero_skips_a_tick_only_while_every_slot_is_busy() -> None:
    core = ScheduleCore(
        ScheduleState(), every, ScheduleInput(max_concurrent_runs=1, max_queued_runs=0)
    )
    core.set(SetRequest(expression="every:1000", version=1), 0, lambda m: 0)
    run = core.tick(1000)
    assert isinstance(run, Run)
    assert core.take_startable() == [run]
    assert core.tick(2000) == Skipped(2000, 2000, SkipReason.QUEUE_FULL)
    core.finish(1000, Outcome(status="complete"))
    core.forget(1000)
    assert isinstance(core.tick(3000), Run)


def test_only_a_run_that_takes_the_last_free_slot_frees_it_by_signal() -> None:
    core = ScheduleCore(ScheduleState(), every, ScheduleInput(max_concurrent_runs=3))
    core.set(SetRequest(expression="every:1000", version=1), 0, lambda m: 0)
    core.trigger(10)
    first = core.take_startable()
    assert core.takes_last_slot(first) == [False]  # two slots stay free
    for now in (20, 30, 40):
        core.trigger(now)
    started = core.take_startable()
    assert [run.scheduled_time for run in started] == [20, 30]  # the third slot is the last
    assert core.takes_last_slot(started) == [False, True]
    assert core.takes_last_slot(core.take_startable()) == []  # 40 waits: nothing started


def test_dead_letters_keep_the_newest_up_to_the_bound_and_leave_once_redelivered() -> None:
    core = ScheduleCore(
        ScheduleState(), every, ScheduleInput(max_concurrent_runs=3, max_dead_letters=2)
    )
    core.set(SetRequest(expression="every:1000", version=1, params={"p": 1}), 0, lambda m: 0)
    failed = RunError(name="Down", message="receiver down")
    done = Outcome(status="complete")
    for now in (10, 20, 30):
        core.trigger(now)
        core.record_dead_letter(now, f"o:{now}", done, failed)
        core.forget(now)
    assert [d.scheduled_time for d in core.state.dead_letters] == [20, 30]
    assert core.state.dead_letters_dropped == 1
    assert core.state.dead_letters[0].params == {"p": 1}
    with pytest.raises(InvalidRequest, match=r"redeliver\.idempotency_key has no dead letter"):
        core.redeliverable("o:10")
    letter = core.redeliverable("o:20")
    letter.redelivering = True
    with pytest.raises(InvalidRequest, match="already being redelivered"):
        core.redeliverable("o:20")
    again = RunError(name="Down", message="still down")
    core.redelivered("o:20", again)  # failed again: kept, with the new error, re-drivable
    assert core.redeliverable("o:20").error == again
    core.redelivered("o:20", None)  # delivered: leaves the list
    assert [d.idempotency_key for d in core.state.dead_letters] == ["o:30"]
    assert ScheduleState.model_validate_json(core.state.model_dump_json()) == core.state


def test_no_dead_letter_is_kept_with_max_dead_letters_zero() -> None:
    core = ScheduleCore(
        ScheduleState(), every, ScheduleInput(max_concurrent_runs=1, max_dead_letters=0)
    )
    core.set(SetRequest(expression="every:1000", version=1), 0, lambda m: 0)
    core.trigger(10)
    core.record_dead_letter(10, "o:10", Outcome(status="complete"), RunError(name="X", message="x"))
    assert core.state.dead_letters == [] and core.state.dead_letters_dropped == 1


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("o:1", "(root): Input should be an object (got 'o:1')"),
        ({}, "idempotency_key: Field required"),
        ({"idempotency_key": ""}, "idempotency_key: String should have at least 1 character"),
        ({"idempotency_key": 7}, "idempotency_key: Input should be a valid string (got 7)"),
        ({"idempotency_key": "k", "x": 1}, "x: Extra inputs are not permitted (got 1)"),
    ],
)
def test_a_malformed_redeliver_is_refused_naming_the_field(payload: object, message: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        read_payload("redeliver", payload)
    assert f"invalid redeliver payload: {message}" in str(refused.value)


def test_a_run_end_frees_its_slot_for_a_queued_run_once_and_keeps_its_dead_letter() -> None:
    core = ScheduleCore(
        ScheduleState(), every, ScheduleInput(max_concurrent_runs=1, max_dead_letters=5)
    )
    core.set(SetRequest(expression="every:1000", version=1), 0, lambda m: 0)
    first, second = core.trigger(10), core.trigger(20)
    assert core.take_startable() == [first]
    error = RunError(name="Unavailable", message="receiver down")
    failed = Outcome(status="errored", error=error)
    # By completion: settles the run, keeps the dead letter, forgets it; a run waits.
    assert core.acknowledged(10, "o:10", failed, error) is True
    assert 10 not in core.state.runs
    assert [(d.idempotency_key, d.outcome, d.error) for d in core.state.dead_letters] == [
        ("o:10", failed, error)
    ]
    assert core.take_startable() == [second]
    # Its end was signalled first (`run_settled`): the completion frees nothing more.
    assert core.finish(20, Outcome(status="complete")) is True
    assert core.acknowledged(20, "o:20", Outcome(status="complete")) is False
    # By the `run_acknowledged` signal (no outcome): frees the slot it still held.
    third, fourth = core.trigger(30), core.trigger(40)
    assert core.take_startable() == [third]
    assert core.acknowledged(30, "o:30", None) is True
    assert core.take_startable() == [fourth]
    # Nothing queued: a slot is freed, but no run can take it.
    assert core.acknowledged(40, "o:40", None) is False
    assert core.acknowledged(99, "o:99", None) is False  # unknown run
    assert core.state.runs == {} and len(core.state.dead_letters) == 1


@settings(max_examples=300)
@given(published=st.none() | st.integers(0, 10**7), wake_at=st.none() | st.integers(0, 10**7))
def test_the_published_next_tick_is_never_later_than_the_real_one_nor_a_minute_earlier(
    published: int | None, wake_at: int | None
) -> None:
    kept = published if not next_tick_stale(published, wake_at) else wake_at
    if wake_at is None or kept is None:
        assert kept == wake_at
    else:
        assert 0 <= wake_at - kept <= NEXT_TICK_PUBLISH_SLACK_MS


def test_a_stopped_run_frees_its_slot_and_waits_for_the_schedule_to_deliver() -> None:
    core = ScheduleCore(ScheduleState(), every, ScheduleInput(max_concurrent_runs=1))
    core.set(SetRequest(expression="every:1000", version=1), 0, lambda m: 0)
    core.trigger(10)
    core.take_startable()
    core.trigger(20)  # queued behind 10
    failed = Outcome(status="errored", error=RunError(name="Boom", message="no"))
    assert core.finished_to_deliver(10, failed) is True  # the queued run can take the slot
    assert [run["state"] for run in core.runs()] == ["errored", "queued"]
    assert [run.scheduled_time for run in core.take_startable()] == [20]
    assert [run.scheduled_time for run in core.awaiting_delivery()] == [10]
    assert core.state.runs[10].outcome() == failed
    # Carried across continue-as-new with the attempts left, at least one.
    core.delivery_interrupted(10, begun=3, max_attempts=10)
    core.delivery_interrupted(10, begun=30, max_attempts=10)
    assert core.state.runs[10].delivery_attempts_left == 1
    carried = ScheduleState.model_validate(core.state.model_dump(mode="json"))
    assert carried.runs[10].outcome_pending and carried.runs[10].delivery_attempts_left == 1
    core.delivered(10, "o:10", RunError(name="Unavailable", message="down"))
    assert [letter.outcome for letter in core.state.dead_letters] == [failed]
    assert [run["scheduled_time"] for run in core.runs()] == [20]
    assert core.finished_to_deliver(20, Outcome(status="complete")) is False  # nothing queued
    core.delivered(20, "o:20", None)
    assert core.runs() == [] and len(core.state.dead_letters) == 1


@settings(max_examples=300, deadline=None)
@given(
    max_attempts=st.integers(1, 40),
    initial=st.integers(1, 5000),
    coefficient=st.floats(1.0, 4.0),
    maximum_factor=st.integers(1, 50),
    timeout=st.integers(1, 5000),
    fractions=st.lists(st.floats(0.0, 1.0), min_size=40, max_size=40),
    elapsed=st.integers(0, 2_000_000),
)
def test_attempts_begun_never_counts_an_attempt_that_may_not_have_begun(
    max_attempts: int,
    initial: int,
    coefficient: float,
    maximum_factor: int,
    timeout: int,
    fractions: list[float],
    elapsed: int,
) -> None:
    """Simulate the retries of a delivery whose attempts all fail, each within its timeout
    and taken at once: the attempts begun by `elapsed` are at least `attempts_begun`."""
    retries = OutcomeRetries(
        max_attempts=max_attempts,
        initial_interval_ms=initial,
        backoff_coefficient=coefficient,
        maximum_interval_ms=initial * maximum_factor,
    )
    begun, at, interval = 0, 0.0, float(initial)
    for attempt in range(max_attempts):
        if at > elapsed:
            break
        begun += 1
        at += fractions[attempt] * timeout + interval
        interval = min(interval * coefficient, retries.maximum_interval_ms)
    counted = attempts_begun(retries, timeout, elapsed, max_attempts)
    assert 1 <= counted <= begun
    # A long enough wait counts every attempt.
    assert attempts_begun(retries, timeout, 10**12, max_attempts) == max_attempts
