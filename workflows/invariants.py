"""The seeds' promises as executable predicates over a core's state and the effects it asked for.

Pure (no Temporal import). Each check returns the violations it finds (an empty list when the
rule holds), each naming its rule (S1-S14, L1-L14). The simulations in `tests/simulation/`
call them after every transition; anything else that holds a core's state may call them too.
A new promise is a new predicate here, listed in its capability's `*_CHECKS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Violation:
    """One broken promise: the rule's number and what was seen."""

    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.detail}"


# ============================================================================ schedule (S1-S14)
# Predicates over the schedule core's state and effects.


@dataclass(frozen=True)
class ScheduleStep:
    """One transition of a schedule, as a checker sees it: the state before and after (plain
    JSON, `ScheduleState.model_dump(mode="json")`), the settings' bounds, and the effects
    the shell carried out. `history_*` fields count over the schedule's whole life (every run
    of the workflow), so a check can see what no single state holds."""

    before: Mapping[str, Any]
    after: Mapping[str, Any]
    max_concurrent_runs: int
    max_dead_letters: int
    # `ScheduleCore.closing` after the step: None, "continue_as_new" or "cancelled".
    closing: str | None
    # What the step was ("tick", "message:set", "continue_as_new", ...), for the report.
    label: str = ""
    # scheduled_times whose `ScheduledRun` child this step started.
    children_started: tuple[int, ...] = ()
    # scheduled_times whose outcome delivery this step started, and those going before it.
    deliveries_started: tuple[int, ...] = ()
    deliveries_going_before: frozenset[int] = frozenset()
    # The scheduled_times `trigger` answered in this step (each a success).
    triggered: tuple[int, ...] = ()
    # A tick of the expression fired in this step at this scheduled_time (recorded or skipped).
    ticked_at: int | None = None
    # The step was a continue-as-new (or a worker restart): the state the next run starts
    # from, before it does anything.
    carried: Mapping[str, Any] | None = None
    # The step applied a message that changes the schedule (applied, not refused).
    message_applied: bool = False
    # Over the schedule's life: children started per scheduled_time, the scheduled_times whose
    # child ended with its outcome still to deliver, and the outcomes delivered.
    history_children: Mapping[int, int] = field(default_factory=dict)
    history_owed: frozenset[int] = frozenset()
    history_delivered: frozenset[int] = frozenset()
    # After the step: the deliveries going, how many may go at once, and whether the core
    # stopped them (a close for continue-as-new).
    deliveries_going_after: frozenset[int] = frozenset()
    delivery_limit: int = 0
    deliveries_stopped: bool = False


def _runs(state: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    return {int(key): run for key, run in state.get("runs", {}).items()}


def _running(state: Mapping[str, Any]) -> int:
    return sum(1 for run in _runs(state).values() if run.get("state") == "running")


def check_one_child_per_time(step: ScheduleStep) -> list[Violation]:
    """S6: a scheduled_time's run is started at most once (its child's ID is the time's)."""
    return [
        Violation("S6", f"the run at {time} was started {count} times")
        for time, count in step.history_children.items()
        if count > 1
    ]


def check_slots_bound(step: ScheduleStep) -> list[Violation]:
    """S8: a step that starts runs never leaves more running than `max_concurrent_runs`."""
    running = _running(step.after)
    if step.children_started and running > step.max_concurrent_runs:
        return [
            Violation(
                "S8",
                f"{running} runs running after starting {list(step.children_started)}, "
                f"max_concurrent_runs={step.max_concurrent_runs}",
            )
        ]
    return []


def check_queue_order(step: ScheduleStep) -> list[Violation]:
    """S8: runs start in scheduled_time order: none started while an earlier one waits."""
    queued = [t for t, run in _runs(step.after).items() if run.get("state") == "queued"]
    late = [t for t in step.children_started if queued and t > min(queued)]
    return [Violation("S8", f"started {late} while {min(queued)} still waits")] if late else []


def check_versions_only_grow(step: ScheduleStep) -> list[Violation]:
    """S3/S5: the stored version never goes down, and a cancel tombstone is never revived by
    a version at or below it."""
    before, after = step.before.get("schedule"), step.after.get("schedule")
    if before is None:
        return []
    if after is None or after["version"] < before["version"]:
        return [Violation("S3", f"version went from {before['version']} to {after}")]
    revived = before["expression"] is None and after["expression"] is not None
    if revived and after["version"] <= before["version"]:
        return [Violation("S5", f"tombstone {before['version']} revived by {after['version']}")]
    return []


def check_next_after_tick(step: ScheduleStep) -> list[Violation]:
    """S6: the tick that fired at `ticked_at` moves `next_at` strictly after it (or ends)."""
    after = step.after.get("schedule")
    if step.ticked_at is None or after is None or after.get("next_at") is None:
        return []
    if after["next_at"] <= step.ticked_at:
        return [Violation("S6", f"next_at {after['next_at']} after the tick at {step.ticked_at}")]
    return []


def check_outcomes_owed(step: ScheduleStep) -> list[Violation]:
    """S11: every run whose child ended with its outcome for the schedule to deliver is still
    owed (in `runs`), delivered, or dead-lettered (kept, or dropped and counted)."""
    runs = _runs(step.after)
    lettered = {letter["scheduled_time"] for letter in step.after.get("dead_letters", [])}
    dropped = step.after.get("dead_letters_dropped", 0)
    lost = [
        t
        for t in step.history_owed
        if t not in runs and t not in step.history_delivered and t not in lettered
    ]
    if len(lost) > dropped:
        return [Violation("S11", f"outcomes of {sorted(lost)} neither delivered nor kept")]
    return []


def check_one_delivery_at_once(step: ScheduleStep) -> list[Violation]:
    """S11: an outcome is never delivered by two activities at once."""
    twice = sorted(set(step.deliveries_started) & step.deliveries_going_before)
    dupes = len(step.deliveries_started) != len(set(step.deliveries_started))
    if twice or dupes:
        return [Violation("S11", f"second delivery started for {twice or step.deliveries_started}")]
    return []


def check_owed_outcomes_delivered(step: ScheduleStep) -> list[Violation]:
    """S11: an outcome owed has a delivery going, or waits only for room or for a stop (a
    close for continue-as-new carries it): nothing is owed with nothing delivering it."""
    if step.deliveries_stopped or len(step.deliveries_going_after) >= step.delivery_limit:
        return []
    owed = {t for t, run in _runs(step.after).items() if run.get("outcome_pending")}
    idle = sorted(owed - step.deliveries_going_after)
    return [Violation("S11", f"outcomes of {idle} owed with no delivery going")] if idle else []


def check_triggers_distinct(step: ScheduleStep) -> list[Violation]:
    """Each `trigger` answered records its own run: a time no run held before, and no two
    triggers of one step on the same time."""
    held = set(_runs(step.before))
    merged = [t for t in step.triggered if t in held]
    if merged or len(set(step.triggered)) != len(step.triggered):
        return [Violation("S6", f"triggers {list(step.triggered)} merged into runs {merged}")]
    missing = [t for t in step.triggered if t not in _runs(step.after)]
    return [Violation("S6", f"triggers answered {missing} but recorded no run")] if missing else []


def check_closing_takes_nothing(step: ScheduleStep) -> list[Violation]:
    """A schedule closing as cancelled applies no message (each is refused or dropped, so
    nothing is answered `applied` and then lost) and starts no run."""
    if step.closing != "cancelled":
        return []
    found = []
    if step.message_applied:
        found.append(Violation("S2", f"{step.label} applied while closing as cancelled"))
    if step.children_started:
        found.append(Violation("S8", f"runs {list(step.children_started)} started while closing"))
    return found


def check_carried_equals_state(step: ScheduleStep) -> list[Violation]:
    """S13: nothing is lost across continue-as-new: the state the next run starts from is
    the state the run closed with (the state before the step)."""
    if step.carried is not None and dict(step.carried) != dict(step.before):
        return [Violation("S13", f"{step.label}: carried state differs from the state")]
    return []


def check_counters_only_grow(step: ScheduleStep) -> list[Violation]:
    """`dropped_signals`, `skipped_ticks` and `dead_letters_dropped` never go down; the dead
    letters kept stay within `max_dead_letters`."""
    found = [
        Violation("S2", f"{name} went from {step.before.get(name, 0)} to {step.after.get(name, 0)}")
        for name in ("dropped_signals", "skipped_ticks", "dead_letters_dropped")
        if step.after.get(name, 0) < step.before.get(name, 0)
    ]
    kept = len(step.after.get("dead_letters", []))
    if kept > step.max_dead_letters:
        found.append(Violation("S11", f"{kept} dead letters kept, max {step.max_dead_letters}"))
    return found


SCHEDULE_CHECKS: tuple[Callable[[ScheduleStep], list[Violation]], ...] = (
    check_one_child_per_time,
    check_slots_bound,
    check_queue_order,
    check_versions_only_grow,
    check_next_after_tick,
    check_outcomes_owed,
    check_one_delivery_at_once,
    check_owed_outcomes_delivered,
    check_triggers_distinct,
    check_closing_takes_nothing,
    check_carried_equals_state,
    check_counters_only_grow,
)


def schedule_violations(step: ScheduleStep) -> list[Violation]:
    """Every schedule promise `step` breaks (empty when it keeps them all)."""
    return [violation for check in SCHEDULE_CHECKS for violation in check(step)]


# ============================================================================ ledger (L1-L14)
# Predicates over the ledger core's state and effects.
