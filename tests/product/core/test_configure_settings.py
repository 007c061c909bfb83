"""`configure`'s pure half, for both workflows: a partial start input merged onto the settings
in effect and read strictly as a new run reads its start input (`workflows.validation.
configured`), and what the schedule's core does with the new bounds (`use_settings`)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from workflows.ledger import core as ledger_core
from workflows.ledger.models import LedgerConfig, LedgerState
from workflows.schedule import core as schedule_core
from workflows.schedule.core import ScheduleCore
from workflows.schedule.models import (
    Outcome,
    RunError,
    RunStatus,
    ScheduleInput,
    ScheduleState,
    SetRequest,
)
from workflows.validation import MAX_SETTINGS_BYTES, InvalidRequest, configured

MAX_MS = 2**31 - 1
# Each integer start field with its bounds (docs/contract.md 2.1, 3.1).
SCHEDULE_INTS = {
    "max_concurrent_runs": (1, 1000),
    "max_queued_runs": (0, 1000),
    "max_dead_letters": (0, 20),
    "run_timeout_ms": (1, MAX_MS),
    "outcome_timeout_ms": (1, MAX_MS),
    "run_heartbeat_timeout_ms": (1, MAX_MS),
}
LEDGER_INTS = {"concurrency": (1, 1000)}


def schedule_configure(raw: Any, current: ScheduleInput | None = None) -> ScheduleInput:
    return schedule_core.parse_configure(raw, current or ScheduleInput(object_id="acct-1"))


def ledger_configure(raw: Any, current: LedgerConfig | None = None) -> LedgerConfig:
    return ledger_core.parse_configure(raw, current or LedgerConfig())


def ints_within(bounds: dict[str, tuple[int, int]]) -> st.SearchStrategy[dict[str, int]]:
    return st.fixed_dictionaries(
        {}, optional={name: st.integers(low, high) for name, (low, high) in bounds.items()}
    ).filter(bool)


@settings(max_examples=200)
@given(changes=ints_within(SCHEDULE_INTS), current_runs=st.integers(1, 1000))
def test_schedule_fields_in_bounds_change_and_every_other_field_is_kept(
    changes: dict[str, int], current_runs: int
) -> None:
    current = ScheduleInput(
        object_id="acct-1", max_concurrent_runs=current_runs, overlap="skip", run_activity="r"
    )
    new = schedule_configure(changes, current)
    before, after = current.model_dump(), new.model_dump()
    assert {name: after[name] for name in changes} == changes
    assert {k: v for k, v in after.items() if k not in changes} == {
        k: v for k, v in before.items() if k not in changes
    }
    # What `settings` shows, less the fixed fields, configures the same settings again.
    shown = schedule_core.settings_of(new)
    again = {k: v for k, v in shown.items() if k not in schedule_core.FIXED_SETTINGS}
    assert schedule_configure(again, new) == new


@settings(max_examples=200)
@given(
    name=st.sampled_from(sorted(SCHEDULE_INTS)),
    value=st.one_of(
        st.integers(max_value=-1),
        st.integers(min_value=MAX_MS + 1),
        st.integers(1001, 10**6),
        st.text(max_size=5),
        st.floats(allow_nan=False),
        st.booleans(),
    ),
)
def test_a_schedule_value_out_of_bounds_or_of_another_type_is_refused_naming_it(
    name: str, value: Any
) -> None:
    low, high = SCHEDULE_INTS[name]
    in_bounds = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    if in_bounds:
        assert getattr(schedule_configure({name: value}), name) == value
        return
    with pytest.raises(InvalidRequest) as refused:
        schedule_configure({name: value})
    message = str(refused.value)
    assert message.startswith(f"invalid configure: {name}: "), message
    assert f"(got {value!r}"[:40] in message, message


@settings(max_examples=100)
@given(
    changes=ints_within(LEDGER_INTS), lanes=st.dictionaries(st.text(max_size=8), st.integers(1, 9))
)
def test_ledger_fields_change_and_the_rest_is_kept(
    changes: dict[str, int], lanes: dict[str, int]
) -> None:
    current = LedgerConfig(concurrency=3, complete_activity="complete")
    new = ledger_configure({**changes, "lanes": lanes}, current)
    assert new.lanes == lanes and new.concurrency == changes.get("concurrency", 3)
    assert new.complete_activity == "complete" and new.retry == current.retry


@pytest.mark.parametrize(
    ("configure", "raw", "refusal"),
    [
        (schedule_configure, {}, "configure payload must be a non-empty JSON object"),
        (schedule_configure, None, "configure payload must be a non-empty JSON object"),
        (schedule_configure, [1], "a non-empty JSON object of start fields, got [1]"),
        (schedule_configure, {"object_id": "other"}, "configure.object_id cannot change"),
        (schedule_configure, {"carried": {}}, "configure.carried cannot change"),
        (
            schedule_configure,
            {"continue_as_new_after_events": 50},
            "configure.continue_as_new_after_events cannot change",
        ),
        (schedule_configure, {"max_runs": 3}, "configure has unknown field(s) max_runs"),
        (
            schedule_configure,
            {"max_concurrent_runs": "3"},
            "invalid configure: max_concurrent_runs: Input should be a valid integer (got '3')",
        ),
        (
            schedule_configure,
            {"overlap": "sometimes"},
            "invalid configure: overlap: Input should be 'queue', 'skip' or 'buffer_one' "
            "(got 'sometimes')",
        ),
        (
            schedule_configure,
            {"outcome_retries": {"initial_interval_ms": 5000, "maximum_interval_ms": 10}},
            "maximum_interval_ms must be >= initial_interval_ms, got 10 < 5000",
        ),
        (schedule_configure, {"run_activity": ""}, "invalid configure: run_activity: "),
        (
            schedule_configure,
            {"activity_task_queue": "/_sys/x"},
            "invalid configure: activity_task_queue: ",
        ),
        (ledger_configure, {}, "configure payload must be a non-empty JSON object"),
        (ledger_configure, {"ledger_id": "other"}, "configure.ledger_id cannot change"),
        (ledger_configure, {"carried_state": None}, "configure.carried_state cannot change"),
        (ledger_configure, {"local_compile": True}, "configure.local_compile cannot change"),
        (ledger_configure, {"own_retry_timers": True}, "configure.own_retry_timers cannot change"),
        (ledger_configure, {"lanes": 3}, "invalid configure: lanes: "),
        (ledger_configure, {"concurrency": 0}, "invalid configure: concurrency: "),
        (ledger_configure, {"retry": {"initial": 1}}, "invalid configure: retry.initial: "),
        (ledger_configure, {"concurency": 3}, "configure has unknown field(s) concurency"),
    ],
)
def test_every_kind_of_refusal_names_the_field(configure: Any, raw: Any, refusal: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        configure(raw)
    assert refusal in str(refused.value), str(refused.value)


def test_a_fixed_field_is_refused_even_beside_good_ones() -> None:
    with pytest.raises(InvalidRequest, match=r"configure\.object_id cannot change"):
        schedule_configure({"max_concurrent_runs": 3, "object_id": "acct-1"})


def test_the_settings_left_are_bounded() -> None:
    lanes = {f"type-{index:05}": 1 for index in range(MAX_SETTINGS_BYTES // 8)}
    with pytest.raises(InvalidRequest, match=f"more than {MAX_SETTINGS_BYTES}"):
        ledger_configure({"lanes": lanes})


def test_a_field_another_helper_adds_to_a_start_model_is_configurable_as_it_is() -> None:
    """The merge reads the model, not a list of fields: a new start field (the schedule's
    bounds) is configurable, within its bounds, with no code of its own."""

    class WithBounds(ScheduleInput):
        remaining_runs: int | None = Field(None, ge=0)

    current = WithBounds(object_id="acct-1")
    assert configured("configure", current, {"remaining_runs": 5}, {}).remaining_runs == 5
    with pytest.raises(InvalidRequest, match=r"remaining_runs: .*\(got -1\)"):
        configured("configure", current, {"remaining_runs": -1}, {})


def test_settings_show_every_public_field_and_no_internal_one() -> None:
    shown = schedule_core.settings_of(ScheduleInput(object_id="acct-1"))
    assert set(shown) == set(ScheduleInput.model_fields) - {"continue_as_new_after_events"}
    assert shown["object_id"] == "acct-1" and shown["run_host"] is None
    ledger = ledger_core.settings_of(LedgerConfig(), "doc-1")
    internal = {"continue_as_new_after_events", "local_compile", "own_retry_timers"}
    assert set(ledger) == set(LedgerConfig.model_fields) - internal
    # Fields a start input leaves out while unset are shown all the same.
    assert ledger["complete_activity"] is None and ledger["ledger_id"] == "doc-1"
    json.dumps([shown, ledger])


def test_a_configured_ledger_still_leaves_unset_settings_out_of_its_next_run() -> None:
    """`configure` of another field does not make the next run's input name `complete_activity`
    or `local_compile` (a worker of the earlier release would refuse them)."""
    config = ledger_configure({"concurrency": 5})
    state = LedgerState(ledger_id="doc-1")
    carried = ledger_core.next_run_input(state, config, "doc-1").model_dump(mode="json")
    assert carried["concurrency"] == 5
    assert "complete_activity" not in carried and "local_compile" not in carried


# --- the schedule's core under new settings


def every_second(expression: str, after_ms: int) -> int | None:
    return (after_ms // 1000 + 1) * 1000


def core_with(queued: int, **settings: Any) -> ScheduleCore:
    core = ScheduleCore(ScheduleState(), every_second, ScheduleInput(**settings))
    core.set(SetRequest(expression="x", version=1), 0, lambda m: 0)
    for time in range(1, queued + 1):
        core.trigger(time)
    return core


def test_a_higher_max_concurrent_runs_starts_queued_runs_and_a_lower_one_stops_nothing() -> None:
    core = core_with(5, max_concurrent_runs=1)
    assert len(core.take_startable()) == 1 and core.queued_count() == 4
    core.use_settings(ScheduleInput(max_concurrent_runs=3))
    assert [run.scheduled_time for run in core.take_startable()] == [2, 3]
    core.use_settings(ScheduleInput(max_concurrent_runs=1))
    assert core.running_count() == 3 and core.take_startable() == []
    for time in (1, 2):
        core.finish(time, Outcome(status="complete"))
    assert core.take_startable() == []  # 1 running: still not below 1
    core.finish(3, Outcome(status="complete"))
    assert len(core.take_startable()) == 1


def test_a_lower_max_queued_runs_keeps_the_queue_and_skips_new_ticks() -> None:
    core = core_with(3, max_concurrent_runs=1, max_queued_runs=10)
    core.take_startable()
    core.use_settings(ScheduleInput(max_concurrent_runs=1, max_queued_runs=1))
    assert core.queued_count() == 2
    skipped = core.tick(1000)
    assert isinstance(skipped, schedule_core.Skipped), skipped
    assert skipped.reason == "queue_full" and core.queued_count() == 2
    core.use_settings(ScheduleInput(max_concurrent_runs=1, max_queued_runs=10, overlap="skip"))
    assert core.max_queued_runs == 0 and core.full_reason == "overlap"


def test_a_lower_max_dead_letters_drops_the_oldest_and_counts_them() -> None:
    core = core_with(4, max_concurrent_runs=4, max_dead_letters=10)
    error = RunError(name="Unavailable", message="down")
    for run in core.take_startable():
        core.finished_to_deliver(run.scheduled_time, Outcome(status="complete"))
        core.delivered(run.scheduled_time, f"k:{run.scheduled_time}", error)
    assert len(core.state.dead_letters) == 4 and core.state.dead_letters_dropped == 0
    core.use_settings(ScheduleInput(max_dead_letters=1))
    assert [d.scheduled_time for d in core.state.dead_letters] == [4]
    assert core.state.dead_letters_dropped == 3
    assert all(run.state != RunStatus.QUEUED for run in core.state.runs.values())
