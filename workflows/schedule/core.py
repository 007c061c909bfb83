"""The schedule's pure, deterministic state machine (rules S2-S8), no Temporal import.

All time is passed in as epoch milliseconds and randomness as a `pick(max_ms) -> int`
callable, so the workflow shell can back them with `workflow.now()` and
`workflow.random()`, and tests can drive them directly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from workflows.budget import STATE_BUDGET_BYTES
from workflows.limits import id_form_problem, id_problem
from workflows.schedule.cron import NextOccurrence
from workflows.schedule.models import (
    FAILURE_NOTE_ERROR_LENGTH,
    MAX_BACKFILL_RUNS,
    MAX_PAUSE_NOTE_LENGTH,
    MAX_RECENT_ERROR_MESSAGE,
    MAX_RECENT_ERROR_NAME,
    RECENT_RUNS_KEPT,
    CancelRequest,
    DeadLetter,
    Delivery,
    DescribeQuery,
    JitterRange,
    Outcome,
    OutcomeRetries,
    OverlapPolicy,
    RecentRun,
    Run,
    RunError,
    RunStatus,
    ScheduleCounters,
    ScheduleInput,
    ScheduleState,
    ScheduleWorkflowInput,
    SetRequest,
    SkipReason,
    StoredSchedule,
    idempotency_key,
)
from workflows.validation import CARRIED_CONTEXT, configured, read_start_input, settings_view
from workflows.validation import InvalidRequest as InvalidRequest

Pick = Callable[[int], int]


class NoRoomForRuns(InvalidRequest):
    """`trigger`/`backfill` would pass `max_queued_runs` or the state budget."""


class NoLiveSchedule(InvalidRequest):
    """`trigger` with no schedule set, or after `cancel`."""


class ScheduleClosing(InvalidRequest):
    """A message to a schedule that is closing as cancelled: nothing it asks would outlive
    the close, so it is refused (an update) or dropped and counted (a signal)."""


class Closing(StrEnum):
    """Why this run of the schedule is closing (None: it is not)."""

    # The history is long: the run hands over what goes and continues as new; every message
    # is still honoured (carried in the state), but no outcome delivery starts.
    CONTINUE_AS_NEW = "continue_as_new"
    # A cancellation request: the schedule closes as cancelled once every run it started has
    # reported and every outcome it owes is delivered or dead-lettered.
    CANCELLED = "cancelled"


def initial_state(settings: ScheduleInput) -> ScheduleState:
    """The state of a schedule just created with `settings`."""
    return ScheduleState(remaining_runs=settings.remaining_runs)


# How many runs may wait for a slot under each overlap policy (`max_queued_runs` caps all).
OVERLAP_QUEUE_LIMIT = {
    OverlapPolicy.QUEUE: None,
    OverlapPolicy.SKIP: 0,
    OverlapPolicy.BUFFER_ONE: 1,
}


@dataclass(frozen=True)
class Start:
    """What a run of the schedule starts from (see `read_start`)."""

    settings: ScheduleInput
    carried: ScheduleState | None
    # Why the start input is refused (the run fails once with it), None when it is not.
    error: str | None = None
    # A setting only a lax reading accepts (see `workflows.validation`), None when none.
    coerced: str | None = None
    # Why the ID is refused by its characters (empty, blank, spaces around it, control
    # characters), for a run started afresh (a history without the marker keeps its ID).
    bad_id: str | None = None


def read_start(decode: Callable[[], object], workflow_id: str) -> Start:
    """The settings (with `object_id`, by default the workflow ID without `schedule:`), the
    carried state, and the problem that fails the schedule once, if any (then the settings
    are usable defaults). `decode` returns the start input as JSON values, or raises
    ValueError."""
    start, problem, coerced = read_start_input(
        "DurabilitySchedule input", decode, ScheduleWorkflowInput, ScheduleInput, "carried"
    )
    object_id = start.object_id or workflow_id.removeprefix("schedule:")
    bad_id = id_problem("object_id", object_id)
    if bad_id is not None:
        problem = problem or f"invalid DurabilitySchedule input: {bad_id}"
        object_id = object_id[:100]
    # A run continued as new carries its state: its ID was taken when it first started.
    bad_form = id_form_problem("object_id", object_id) if start.carried is None else None
    settings = ScheduleInput.model_validate(
        {**start.model_dump(exclude={"carried"}), "object_id": object_id},
        context=CARRIED_CONTEXT if start.carried is not None else None,
    )
    bad_id = None if bad_form is None else f"invalid DurabilitySchedule input: {bad_form}"
    return Start(settings, start.carried, problem, coerced, bad_id)


# The name `durability.client` reads the start input by.
parse_start = read_start


# Start fields `configure` cannot change, each with why (docs/contract.md 2.2).
FIXED_SETTINGS = {
    "object_id": "it names the schedule, its runs and their idempotency keys",
    "carried": "it is internal: the state a run carries across continue-as-new",
    "continue_as_new_after_events": "it is not part of the wire contract (set at start only)",
}
# Start fields the `settings` query leaves out: not part of the wire contract.
INTERNAL_SETTINGS = frozenset({"continue_as_new_after_events"})


def parse_configure(raw: object, current: ScheduleInput) -> ScheduleInput:
    """Validate a `configure` payload (a partial start input) against the `current`
    settings: the settings it leaves, or InvalidRequest naming the field and the value."""
    return configured("configure", current, raw, FIXED_SETTINGS)


def settings_of(settings: ScheduleInput) -> dict[str, Any]:
    """The `settings` query: the start input's public fields, as in effect."""
    return settings_view(settings, INTERNAL_SETTINGS)


@dataclass(frozen=True)
class Skipped:
    """A tick that was due but not recorded as a run (see `ScheduleCore.room_for`)."""

    scheduled_time: int
    due_at: int
    reason: SkipReason


def failure_note(key: str, error: RunError | None) -> str:
    """The pause note of a run that errored under `pause_on_failure`."""
    shown = "unknown error" if error is None else f"{error.name}: {error.message}"
    if len(shown) > FAILURE_NOTE_ERROR_LENGTH:
        shown = shown[: FAILURE_NOTE_ERROR_LENGTH - 3] + "..."
    return f"paused on failure: run {key} errored: {shown}"[:MAX_PAUSE_NOTE_LENGTH]


def checked_next(next_occurrence: NextOccurrence, expression: str, after_ms: int) -> int | None:
    """S7: call next_occurrence and insist on None or an int strictly after `after_ms`."""
    value: object = next_occurrence(expression, after_ms)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= after_ms:
        raise ValueError(
            f"next_occurrence({expression!r}, {after_ms}) must return None or an integer "
            f"strictly after {after_ms}, got {value!r}"
        )
    return value


class ScheduleCore:
    """The transitions of one object's schedule over a `ScheduleState` it mutates in place,
    under the schedule's `settings` (its bounds and overlap policy)."""

    def __init__(
        self, state: ScheduleState, next_occurrence: NextOccurrence, settings: ScheduleInput
    ) -> None:
        self.state = state
        self.next_occurrence = next_occurrence
        # The stale occurrences the last `tick` skipped while a later one ran (see `tick`).
        self.caught_up: Skipped | None = None
        self._fire_times: tuple[tuple[object, ...], tuple[int, ...]] | None = None
        # Not carried: a run of the schedule that closes is the last of its own life.
        self.closing: Closing | None = None
        if state.counters is None:
            state.counters = ScheduleCounters.carried_from(state)
        self.counters: ScheduleCounters = state.counters
        self.use_settings(settings)

    def use_settings(self, settings: ScheduleInput) -> None:
        """Decide under `settings` from now on (at the start, and on `configure`). Runs and
        the queue are untouched: a lower `max_concurrent_runs` stops nothing (no run starts
        until the running are below it), a lower `max_queued_runs` keeps the queued runs (new
        ticks are skipped while the queue is at it); past a lower `max_dead_letters` the
        oldest letters are dropped and counted."""
        self.settings = settings
        self.max_concurrent_runs = settings.max_concurrent_runs
        overlap = settings.overlap
        max_queued_runs, max_dead_letters = settings.max_queued_runs, settings.max_dead_letters
        limit = OVERLAP_QUEUE_LIMIT[overlap]
        self.max_queued_runs = max_queued_runs if limit is None else min(limit, max_queued_runs)
        self.full_reason = SkipReason.QUEUE_FULL if limit is None else SkipReason.OVERLAP
        self.overlap = overlap
        self.max_dead_letters = max_dead_letters
        self.object_id = settings.object_id or ""
        self.catchup_window_ms = settings.catchup_window_ms
        self.start_at, self.end_at = settings.start_at, settings.end_at
        self.pause_on_failure = settings.pause_on_failure
        self.dst_policy = settings.dst_policy
        self._keep_dead_letters_within_bound()

    def _keep_dead_letters_within_bound(self) -> None:
        """Drop (and count) the oldest dead letters beyond `max_dead_letters`."""
        excess = len(self.state.dead_letters) - self.max_dead_letters
        if excess > 0:
            del self.state.dead_letters[:excess]
            self.state.dead_letters_dropped += excess

    # --- bounds on the schedule's life (start_at, end_at, remaining_runs) ---

    def bounded_next(self, expression: str, after_ms: int) -> int | None:
        """The next tick after `after_ms` within the schedule's life: none before `start_at`,
        None at or after `end_at` or once `remaining_runs` is spent."""
        if self.state.remaining_runs == 0:
            return None
        if self.start_at is not None:
            after_ms = max(after_ms, self.start_at - 1)
        return self._before_end(checked_next(self.next_occurrence, expression, after_ms))

    def _before_end(self, next_at: int | None) -> int | None:
        if next_at is None or (self.end_at is not None and next_at >= self.end_at):
            return None
        return next_at

    def check_configure(self, fields: object) -> ScheduleInput:
        """The settings a `configure` of `fields` (a partial start input) would leave;
        InvalidRequest naming the field and the value when it cannot."""
        return parse_configure(fields, self.settings)

    def configure(self, fields: dict[str, Any], now_ms: int) -> ScheduleInput:
        """`configure` `fields`: decide under the settings they leave from now on
        (`use_settings`, `configure_bounds`); a new `dst_policy` moves the next tick to where
        the new policy finds it, from now. Returns those settings."""
        settings = self.check_configure(fields)
        dst_changed = settings.dst_policy != self.dst_policy
        self.use_settings(settings)
        self.configure_bounds(settings, fields, now_ms)
        if dst_changed:
            self.revise_next_at(lambda expression, _: self.bounded_next(expression, now_ms))
        return settings

    def configure_bounds(
        self, settings: ScheduleInput, changed: Collection[str], now_ms: int
    ) -> None:
        """After `use_settings(settings)` on a `configure` that set the fields `changed`: a
        `remaining_runs` given is the new count (`set_remaining_runs`); a `start_at` or
        `end_at` given moves the next tick into the new bounds (searched from now), or ends
        it. The window and `pause_on_failure` apply from the next tick and the next failure."""
        if "remaining_runs" in changed:
            self.set_remaining_runs(settings.remaining_runs, now_ms)
        stored = self.state.schedule
        moved = "start_at" in changed or "end_at" in changed
        if not moved or stored is None or stored.expression is None:
            return
        if stored.next_at is None or not self._within_bounds(stored.next_at):
            stored.next_at = self.bounded_next(stored.expression, now_ms)

    def _within_bounds(self, next_at: int) -> bool:
        return (self.start_at is None or next_at >= self.start_at) and (
            self.end_at is None or next_at < self.end_at
        )

    def set_remaining_runs(self, remaining: int | None, now_ms: int) -> None:
        """Set how many more ticks may record a run (None: no limit), as `configure` does:
        0 ends ticking; a count given to a schedule that had spent its own ticks from now."""
        self.state.remaining_runs = remaining
        stored = self.state.schedule
        if stored is None or stored.expression is None:
            return
        if remaining == 0:
            stored.next_at = None
        elif stored.next_at is None:
            stored.next_at = self.bounded_next(stored.expression, now_ms)

    # --- bounds (the queue and the carried state) ---

    def room_for(self, count: int, params: dict[str, Any]) -> SkipReason | None:
        """Why `count` more runs with `params` cannot be recorded now, or None: they would
        wait beyond `max_queued_runs` (runs that can start at once do not wait), or take the
        carried state past STATE_BUDGET_BYTES."""
        free = max(self.max_concurrent_runs - self.running_count(), 0)
        if self.queued_count() + count - free > self.max_queued_runs:
            return self.full_reason
        run_bytes = len(json.dumps(params, separators=(",", ":"), default=str)) + 200
        if len(self.state.model_dump_json()) + count * run_bytes > STATE_BUDGET_BYTES:
            return SkipReason.STATE_BUDGET
        return None

    def check_live(self, what: str) -> StoredSchedule:
        """The live schedule; raise NoLiveSchedule when none is set or it was cancelled."""
        stored = self.state.schedule
        if stored is None or stored.expression is None:
            raise NoLiveSchedule(f"{what} needs a live schedule: none is set, or it was cancelled")
        return stored

    def check_room(self, count: int, what: str) -> None:
        """Raise InvalidRequest when `count` more runs of the live version do not fit."""
        stored = self.state.schedule
        reason = self.room_for(count, stored.params if stored is not None else {})
        if reason in (SkipReason.QUEUE_FULL, SkipReason.OVERLAP):
            policy = "" if reason == SkipReason.QUEUE_FULL else f" (overlap '{self.overlap}')"
            raise NoRoomForRuns(
                f"{what} refused: {count} more run(s) would pass max_queued_runs="
                f"{self.max_queued_runs}{policy} ({self.queued_count()} queued, "
                f"{self.running_count()} running of {self.max_concurrent_runs})"
            )
        if reason == SkipReason.STATE_BUDGET:
            raise NoRoomForRuns(
                f"{what} refused: {count} more run(s) would take the schedule's state past "
                f"{STATE_BUDGET_BYTES} bytes"
            )

    def queued_count(self) -> int:
        """Runs waiting for a slot."""
        return sum(1 for run in self.state.runs.values() if run.state == RunStatus.QUEUED)

    # --- schedule (S3-S5) ---

    def set(self, request: SetRequest, now_ms: int, pick: Pick) -> bool:
        """Store `request` if its version is higher than the stored one; return applied."""
        stored = self.state.schedule
        if stored is not None and request.version <= stored.version:
            return False
        if isinstance(request.jitter_ms, JitterRange):
            jitter = pick(request.jitter_ms.max_ms)
            if not 0 <= jitter <= request.jitter_ms.max_ms:
                raise ValueError(f"pick({request.jitter_ms.max_ms}) returned {jitter}")
        else:
            jitter = request.jitter_ms
        self.state.schedule = StoredSchedule(
            version=request.version,
            expression=request.expression,
            next_at=self.bounded_next(request.expression, now_ms),
            jitter_ms=jitter,
            params=request.params,
        )
        return True

    def cancel(self, request: CancelRequest) -> bool:
        """Stop future ticks; return whether a live schedule was cancelled (S5)."""
        stored = self.state.schedule
        live = stored is not None and stored.expression is not None
        if request.version is None:
            if stored is None:
                return False
            self.state.schedule = stored.model_copy(update={"expression": None, "next_at": None})
            return live
        if stored is not None and stored.version > request.version:
            return False
        self.state.schedule = StoredSchedule(
            version=request.version, expression=None, next_at=None, jitter_ms=0
        )
        return live

    def get(self) -> dict[str, Any] | None:
        """The `get` query: the live schedule, or None when none is set or it was cancelled."""
        stored = self.state.schedule
        if stored is None or stored.expression is None:
            return None
        view = stored.model_dump(mode="json")
        if self.closing is Closing.CANCELLED:
            view["closing"] = True  # live until the close, but nothing sent to it now lasts
        return view

    # --- ticks (S6) ---

    def next_wake_at(self) -> int | None:
        """When the next tick fires (`next_at + jitter_ms`), or None."""
        stored = self.state.schedule
        if (
            self.state.paused
            or stored is None
            or stored.expression is None
            or stored.next_at is None
        ):
            return None
        return stored.next_at + stored.jitter_ms

    def revise_next_at(self, revise: Callable[[str, int], int | None]) -> None:
        """Set the live schedule's `next_at` to `revise(expression, next_at)`: the shell's,
        when the rule that found it changed (`workflows.schedule.day_rule`)."""
        stored = self.state.schedule
        if stored is not None and stored.expression is not None and stored.next_at is not None:
            stored.next_at = self._before_end(revise(stored.expression, stored.next_at))

    def pause(self, note: str | None = None) -> bool:
        """Stop ticks until `unpause`; runs already recorded go on. A `note` says why (it
        replaces the note of a schedule already paused). Returns whether it changed."""
        changed = not self.state.paused
        self.state.paused = True
        if note is not None or changed:
            self.state.pause_note = note
        return changed

    def check_unpause(self, now_ms: int) -> None:
        """Raise InvalidRequest when `unpause` at `now_ms` would fail: `next_occurrence` fails
        on the live expression (S7)."""
        stored = self.state.schedule
        if self.state.paused and stored is not None and stored.expression is not None:
            try:
                self.bounded_next(stored.expression, now_ms)  # as `unpause` asks it
            except ValueError as error:
                raise InvalidRequest(f"unpause refused: {error}") from None

    def unpause(self, now_ms: int) -> bool:
        """Resume ticking from now: ticks missed while paused are skipped, not collapsed. The
        pause note is cleared."""
        if not self.state.paused:
            return False
        self.state.paused = False
        self.state.pause_note = None
        stored = self.state.schedule
        if stored is not None and stored.expression is not None:
            stored.next_at = self.bounded_next(stored.expression, now_ms)
        return True

    def trigger(self, now_ms: int, *, distinct: bool = True) -> Run:
        """Record a run at `now_ms` outside the expression (paused or not); it queues like a
        tick. Each trigger records its own run, at its own time (`trigger_time`); with
        `distinct` False (a history without its patch) a trigger merges into a run already
        recorded at `now_ms`.

        Raises NoLiveSchedule when no schedule is live (there are no params to run with)."""
        stored = self.check_live("trigger")
        if not distinct:
            existing = self.state.runs.get(now_ms)
            if existing is not None:
                return existing
        self.check_room(1, "trigger")
        scheduled_time = self.trigger_time(now_ms) if distinct else now_ms
        run = Run(scheduled_time=scheduled_time, due_at=now_ms, params=stored.params)
        self.state.runs[scheduled_time] = run
        if distinct:
            self.state.last_triggered_at = scheduled_time
        return run

    def trigger_time(self, now_ms: int) -> int:
        """The scheduled_time a `trigger` at `now_ms` records its run at: `now_ms`, or the
        first millisecond after it (and after the last trigger's) that no recorded run, no run
        that ended recently and no pending tick (`next_at`) holds. Triggers in one workflow
        task share `now_ms`: each takes its own time (and so its own run and child workflow
        ID) instead of merging into the first."""
        stored = self.state.schedule
        tick_at = None if stored is None else stored.next_at
        last = self.state.last_triggered_at
        scheduled_time = now_ms if last is None else max(now_ms, last + 1)
        ended = {entry.scheduled_time for entry in self.state.recent_runs}
        while (
            scheduled_time in self.state.runs
            or scheduled_time in ended
            or scheduled_time == tick_at
        ):
            scheduled_time += 1
        return scheduled_time

    def trigger_merges(self, now_ms: int) -> bool:
        """Whether a `trigger` at `now_ms` would fall on a time already taken (the shell
        asks, once, whether the history takes distinct times)."""
        return self.trigger_time(now_ms) != now_ms

    def backfill_times(self, start_at: int, end_at: int) -> list[int]:
        """Occurrences of the live expression in [start_at, end_at), at most MAX_BACKFILL_RUNS."""
        expression = self.check_live("backfill").expression
        assert expression is not None  # check_live refuses a cancelled schedule
        # Only occurrences within the schedule's life (`start_at`, `end_at`) are backfilled.
        if self.start_at is not None:
            start_at = max(start_at, self.start_at)
        if self.end_at is not None:
            end_at = min(end_at, self.end_at)
        times: list[int] = []
        cursor = checked_next(self.next_occurrence, expression, start_at - 1)
        while cursor is not None and cursor < end_at:
            if len(times) == MAX_BACKFILL_RUNS:
                raise InvalidRequest(
                    f"backfill [{start_at}, {end_at}) covers more than {MAX_BACKFILL_RUNS} "
                    "occurrences; split it"
                )
            times.append(cursor)
            cursor = checked_next(self.next_occurrence, expression, cursor)
        return times

    def unrecorded_backfill_times(self, start_at: int, end_at: int) -> list[int]:
        """The occurrences in [start_at, end_at) that are not recorded runs already."""
        return [t for t in self.backfill_times(start_at, end_at) if t not in self.state.runs]

    def check_backfill(self, start_at: int, end_at: int) -> None:
        """NoRoomForRuns when the runs a `backfill` of [start_at, end_at) would record do not
        fit."""
        self.check_room(len(self.unrecorded_backfill_times(start_at, end_at)), "backfill")

    def backfill(self, start_at: int, end_at: int) -> list[Run]:
        """Record a queued run for each occurrence in [start_at, end_at) not already recorded.

        A time that already ran and was acknowledged is recorded again here, but its child
        workflow ID rejects the duplicate start, so it still runs at most once (S6)."""
        stored = self.state.schedule
        recorded: list[Run] = []
        times = self.unrecorded_backfill_times(start_at, end_at)
        self.check_room(len(times), "backfill")
        for time in times:
            assert stored is not None
            run = Run(scheduled_time=time, due_at=time + stored.jitter_ms, params=stored.params)
            self.state.runs[time] = run
            recorded.append(run)
        return recorded

    def tick(self, now_ms: int) -> Run | Skipped | None:
        """Fire the tick if due: record its run and advance `next_at` in one step. A tick
        with no room for its run (`room_for`) still advances `next_at`, is counted in
        `skipped_ticks` and returned as `Skipped`: it never runs. A recorded run counts
        `remaining_runs` down.

        With `catchup_window_ms`, missed occurrences that fired more than the window ago are
        skipped as one (`catchup_window`, left in `caught_up` when a later one still runs);
        the earliest missed occurrence inside the window, if any, runs for the rest (S6)."""
        self.caught_up = None
        if self.state.paused:
            return None
        stored = self.state.schedule
        fires_at = self.next_wake_at()
        if stored is None or stored.expression is None or fires_at is None or fires_at > now_ms:
            return None
        scheduled_time = stored.next_at
        assert scheduled_time is not None
        if self.catchup_window_ms is not None and now_ms - fires_at > self.catchup_window_ms:
            stale = Skipped(scheduled_time, fires_at, SkipReason.CATCHUP_WINDOW)
            self._count_skipped(SkipReason.CATCHUP_WINDOW)
            # The first occurrence that fires within the window (at or after now - window).
            recent = self.bounded_next(
                stored.expression, now_ms - stored.jitter_ms - self.catchup_window_ms - 1
            )
            if recent is None or recent <= scheduled_time or recent + stored.jitter_ms > now_ms:
                stored.next_at = self.bounded_next(
                    stored.expression, max(scheduled_time, now_ms - stored.jitter_ms)
                )
                return stale
            self.caught_up = stale
            scheduled_time, fires_at = recent, recent + stored.jitter_ms
        after = max(scheduled_time, now_ms - stored.jitter_ms)
        stored.next_at = self.bounded_next(stored.expression, after)
        if scheduled_time in self.state.runs:
            return None
        reason = self.room_for(1, stored.params)
        if reason is not None:
            self._count_skipped(reason)
            return Skipped(scheduled_time=scheduled_time, due_at=fires_at, reason=reason)
        run = Run(scheduled_time=scheduled_time, due_at=fires_at, params=stored.params)
        self.state.runs[scheduled_time] = run
        if self.state.remaining_runs is not None:
            self.state.remaining_runs = max(self.state.remaining_runs - 1, 0)
            if self.state.remaining_runs == 0:
                stored.next_at = None
        return run

    def _count_skipped(self, reason: SkipReason) -> None:
        """A tick that never runs: in `skipped_ticks` and in the counters, by reason."""
        self.state.skipped_ticks += 1
        skipped = self.counters.ticks_skipped
        skipped[reason.value] = skipped.get(reason.value, 0) + 1

    # --- runs (S8) ---

    def running_count(self) -> int:
        """Runs holding a slot."""
        return sum(1 for run in self.state.runs.values() if run.state == RunStatus.RUNNING)

    def take_startable(self, now_ms: int | None = None) -> list[Run]:
        """Queued runs in scheduled_time order, up to the free slots, now marked running
        (started at `now_ms`, when given)."""
        free = self.max_concurrent_runs - self.running_count()
        queued = sorted(
            (run for run in self.state.runs.values() if run.state == RunStatus.QUEUED),
            key=lambda run: run.scheduled_time,
        )
        started = queued[: max(free, 0)]
        for run in started:
            run.state = RunStatus.RUNNING
            run.attempt = 1
            run.started_at = now_ms
        self.counters.runs_started += len(started)
        return started

    def takes_last_slot(self, started: list[Run]) -> list[bool]:
        """For runs just taken by `take_startable` (in its order): whether each took the last
        free slot. Such a run reports its end by signal as soon as it stops, so a slow
        outcome delivery never holds a slot the next tick may need."""
        running_before = self.running_count() - len(started)
        return [
            running_before + index + 1 >= self.max_concurrent_runs for index in range(len(started))
        ]

    def finish(self, scheduled_time: int, outcome: Outcome, now_ms: int | None = None) -> bool:
        """A running run finished with `outcome` (at `now_ms`, when known): its slot is freed
        and it enters `recent_runs`, its delivery pending. False if unknown or finished."""
        run = self.state.runs.get(scheduled_time)
        if run is None or run.state in (RunStatus.COMPLETE, RunStatus.ERRORED):
            return False
        run.state = RunStatus.COMPLETE if outcome.status == "complete" else RunStatus.ERRORED
        run.error = outcome.error
        if run.state == RunStatus.COMPLETE:
            self.counters.runs_completed += 1
        else:
            self.counters.runs_errored += 1
        self._remember_ended(run, outcome, now_ms)
        if run.state == RunStatus.ERRORED and self.pause_on_failure and not self.state.paused:
            self.pause(failure_note(idempotency_key(self.object_id, scheduled_time), run.error))
        return True

    def finished_by_signal(self, scheduled_time: int, outcome: Outcome, now_ms: int) -> bool:
        """The `run_settled` signal: `finish`, and return whether the main loop must decide
        again: only when a queued run can take the freed slot or the run's failure paused the
        schedule (every wake-up cancels and restarts the tick timer: two more events)."""
        was_paused = self.state.paused
        finished = self.finish(scheduled_time, outcome, now_ms)
        return finished and (self.queued_count() > 0 or self.state.paused != was_paused)

    def new_runs_wait(self) -> bool:
        """Whether a run recorded now waits for a slot (its `due` event says `queued`)."""
        return self.running_count() >= self.max_concurrent_runs

    def drained(self, *, shell_busy: bool) -> bool:
        """Whether the drain before continue-as-new is over: nothing of the shell going
        (`shell_busy`: child starts, redeliveries, lifecycle calls) and every run left is
        queued (it never started) or has its outcome owed (carried, delivered by the next
        run)."""
        waiting = self.queued_count() + len(self.awaiting_delivery())
        return not shell_busy and waiting == len(self.state.runs)

    def stranded_redeliveries(self) -> list[DeadLetter]:
        """The letters the previous run of the schedule was redelivering when it continued as
        new: nothing else would ever clear their mark, so this run starts them again."""
        return [letter for letter in self.state.dead_letters if letter.redelivering]

    # --- what `describe` shows: the ring of ended runs, counters, next fire times ---

    def _remember_ended(self, run: Run, outcome: Outcome | None, now_ms: int | None) -> None:
        """Put an ended run into `recent_runs` (newest last), dropping the oldest past
        RECENT_RUNS_KEPT."""
        shown = None
        if outcome is not None:
            error = outcome.error
            if error is not None:
                error = RunError(
                    name=error.name[:MAX_RECENT_ERROR_NAME],
                    message=error.message[:MAX_RECENT_ERROR_MESSAGE],
                )
            shown = Outcome(status=outcome.status, error=error)
        ring = self.state.recent_runs
        ring[:] = [entry for entry in ring if entry.scheduled_time != run.scheduled_time]
        ring.append(
            RecentRun(
                scheduled_time=run.scheduled_time,
                due_at=run.due_at,
                started_at=run.started_at,
                ended_at=now_ms,
                outcome=shown,
            )
        )
        del ring[: max(0, len(ring) - RECENT_RUNS_KEPT)]

    def _delivery_ended(self, scheduled_time: int, delivery: Delivery) -> None:
        """Count an ended run's delivery and show it on its `recent_runs` entry (if still
        there)."""
        if delivery == Delivery.DELIVERED:
            self.counters.outcomes_delivered += 1
        elif delivery == Delivery.DEAD_LETTERED:
            self.counters.outcomes_dead_lettered += 1
        elif delivery == Delivery.REDELIVERED:
            self.counters.outcomes_redelivered += 1
        for entry in self.state.recent_runs:
            if entry.scheduled_time == scheduled_time:
                entry.delivery = delivery

    def recent_runs(self, count: int = RECENT_RUNS_KEPT) -> list[dict[str, Any]]:
        """The last `count` runs that ended, newest first."""
        newest_first = self.state.recent_runs[::-1][:count]
        return [entry.model_dump(mode="json", exclude_none=True) for entry in newest_first]

    def next_fire_times(self, count: int) -> list[int]:
        """When the next `count` ticks fire, as the tick timer waits for them: each
        occurrence of the live expression from `next_at` on within the schedule's life
        (`bounded_next`: none before `start_at`, none at or after `end_at`, at most
        `remaining_runs`), plus the stored jitter. None while paused or with no live
        schedule; fewer when the expression or the schedule's life ends."""
        stored = self.state.schedule
        if self.state.paused or stored is None or stored.expression is None:
            return []
        remaining = self.state.remaining_runs
        if remaining is not None:
            count = min(count, remaining)
        # The shell asks on every step for the UI's details: compute again only when what
        # the times depend on changed (a tick, a `set`, a bound), not on every step.
        key = (
            stored.expression,
            stored.next_at,
            stored.jitter_ms,
            count,
            self.start_at,
            self.end_at,
        )
        if self._fire_times is not None and self._fire_times[0] == key:
            return list(self._fire_times[1])
        times = self._compute_fire_times(stored, count)
        self._fire_times = (key, tuple(times))
        return times

    def _compute_fire_times(self, stored: StoredSchedule, count: int) -> list[int]:
        assert stored.expression is not None
        times: list[int] = []
        cursor = stored.next_at
        while cursor is not None and len(times) < count:
            times.append(cursor + stored.jitter_ms)
            try:
                cursor = self.bounded_next(stored.expression, cursor)
            except ValueError:  # a deployment's next_occurrence: the tick would fail too
                break
        return times

    def describe(self, query: DescribeQuery) -> dict[str, Any]:
        """The `describe` query: the live schedule (as `get`), `paused` and its note, the
        last runs that ended, the next fire times and the counters."""
        return {
            "schedule": self.get(),
            "paused": self.state.paused,
            # Closing as cancelled: every message is refused, and the schedule ends once its
            # runs reported and their outcomes were delivered.
            "closing": self.closing is Closing.CANCELLED,
            "pause_note": self.state.pause_note,
            "dst_policy": self.dst_policy.model_dump(mode="json"),
            # The live count of `remaining_runs` (null: no limit); `settings` shows the field.
            "remaining_runs": self.state.remaining_runs,
            "recent_runs": self.recent_runs(query.runs),
            "next_fire_times": self.next_fire_times(query.next),
            "counters": {
                **self.counters.model_dump(mode="json"),
                "ticks_skipped_total": self.state.skipped_ticks,
            },
        }

    # --- outcomes the schedule delivers (S11) ---

    def finished_to_deliver(
        self, scheduled_time: int, outcome: Outcome, now_ms: int | None = None
    ) -> bool:
        """A run finished with `outcome` and its child ended: its slot is freed, its outcome is
        the schedule's to deliver. Returns whether the main loop must decide again: a queued
        run can take the freed slot, or the run's failure paused the schedule."""
        run = self.state.runs.get(scheduled_time)
        if run is None:
            return False
        freed, was_paused = run.state == RunStatus.RUNNING, self.state.paused
        self.finish(scheduled_time, outcome, now_ms)
        run.outcome_pending = True
        return (freed and self.queued_count() > 0) or self.state.paused != was_paused

    def awaiting_delivery(self) -> list[Run]:
        """The runs whose outcome the schedule is to deliver, oldest first."""
        pending = (run for run in self.state.runs.values() if run.outcome_pending)
        return sorted(pending, key=lambda run: run.scheduled_time)

    def deliveries_to_start(self, going: Collection[int], limit: int) -> list[Run]:
        """The outcome deliveries to start now, oldest first: those owed and not `going`,
        within `limit` going at once; none while the run closes for continue-as-new (the
        next run delivers them). A cancellation lifts that stop: the schedule closes only once
        every outcome it owes is delivered, so it must deliver them itself."""
        if self.deliveries_stopped():
            return []
        room = limit - len(going)
        owed = [run for run in self.awaiting_delivery() if run.scheduled_time not in going]
        return owed[: max(room, 0)]

    def deliveries_stopped(self) -> bool:
        """Whether the outcome deliveries going are to be cancelled and none started (the run
        closes for continue-as-new; the undelivered are carried)."""
        return self.closing is Closing.CONTINUE_AS_NEW

    # --- closing (continue-as-new, or a cancellation request) ---

    def begin_continue_as_new(self) -> None:
        """The run hands over what it has going to continue as new: deliveries stop (a
        cancellation already asked for keeps them going)."""
        if self.closing is None:
            self.closing = Closing.CONTINUE_AS_NEW

    def begin_cancellation(self) -> None:
        """A cancellation request: the run closes as cancelled, not as new; from now on every
        message is refused (`check_open`) and the outcomes owed are delivered by this run."""
        self.closing = Closing.CANCELLED

    def check_open(self, what: str) -> None:
        """Raise ScheduleClosing when the schedule is closing as cancelled: `what` would be
        applied and then lost with the close."""
        if self.closing is Closing.CANCELLED:
            raise ScheduleClosing(
                f"{what} refused: the schedule is closing (cancellation requested); it starts "
                "no run and closes once its runs reported"
            )

    def may_close_cancelled(self, *, deliveries_going: int, others_busy: bool) -> bool:
        """Whether a schedule closing as cancelled may close now: no outcome owed (none
        awaiting delivery, none being delivered) and nothing else of the shell going (child
        starts and watches, redeliveries, lifecycle calls, handlers)."""
        return not others_busy and deliveries_going == 0 and not self.awaiting_delivery()

    def delivered(self, scheduled_time: int, idempotency_key: str, error: RunError | None) -> None:
        """The schedule's delivery of a run's outcome ended: delivered (None), or given up
        with `error` (a dead letter is kept). Either way the run is forgotten."""
        run = self.state.runs.get(scheduled_time)
        if run is None:
            return
        if error is not None:
            self.record_dead_letter(scheduled_time, idempotency_key, run.outcome(), error)
        self._delivery_ended(
            scheduled_time, Delivery.DELIVERED if error is None else Delivery.DEAD_LETTERED
        )
        self.forget(scheduled_time)

    def delivery_interrupted(self, scheduled_time: int, begun: int, max_attempts: int) -> None:
        """A continue-as-new cancelled the delivery after `begun` attempts (a lower bound):
        the next run of the schedule delivers again with the attempts left, at least one."""
        run = self.state.runs.get(scheduled_time)
        if run is None:
            return
        left = max_attempts if run.delivery_attempts_left is None else run.delivery_attempts_left
        run.delivery_attempts_left = max(1, left - begun)

    # --- dead letters (beyond the rules: S11's dead-lettered outcomes, seen and re-driven) ---

    def record_dead_letter(
        self, scheduled_time: int, idempotency_key: str, outcome: Outcome, error: RunError
    ) -> None:
        """Keep a dead-lettered outcome (call before `forget`); the oldest beyond
        `max_dead_letters` is dropped and counted."""
        run = self.state.runs.get(scheduled_time)
        if run is None or self.max_dead_letters == 0:
            self.state.dead_letters_dropped += 1
            return
        self.state.dead_letters = [
            d for d in self.state.dead_letters if d.scheduled_time != scheduled_time
        ]
        self.state.dead_letters.append(
            DeadLetter(
                scheduled_time=scheduled_time,
                due_at=run.due_at,
                idempotency_key=idempotency_key,
                params=run.params,
                outcome=outcome,
                error=error,
            )
        )
        self._keep_dead_letters_within_bound()

    def redeliverable(self, idempotency_key: str) -> DeadLetter:
        """The dead letter to deliver again; InvalidRequest naming the key when there is
        none or its redelivery is already going on."""
        for letter in self.state.dead_letters:
            if letter.idempotency_key == idempotency_key:
                if letter.redelivering:
                    raise InvalidRequest(
                        f"redeliver.idempotency_key {idempotency_key[:200]!r} is already "
                        "being redelivered"
                    )
                return letter
        raise InvalidRequest(
            f"redeliver.idempotency_key has no dead letter, got {idempotency_key[:200]!r}"
        )

    def begin_redelivery(self, idempotency_key: str) -> DeadLetter:
        """Mark the dead letter as being redelivered and return it; InvalidRequest as
        `redeliverable` when it cannot be."""
        letter = self.redeliverable(idempotency_key)
        letter.redelivering = True
        return letter

    def count_dropped_signal(self) -> int:
        """A signal could not be applied and was dropped (S2); returns the count so far."""
        self.state.dropped_signals += 1
        return self.state.dropped_signals

    def redelivered(self, idempotency_key: str, error: RunError | None) -> None:
        """A redelivery ended: delivered (None) leaves the list; failed keeps it, with the
        new error, ready to be redelivered again."""
        for letter in list(self.state.dead_letters):
            if letter.idempotency_key == idempotency_key:
                if error is None:
                    self.state.dead_letters.remove(letter)
                    self._delivery_ended(letter.scheduled_time, Delivery.REDELIVERED)
                else:
                    letter.redelivering, letter.error = False, error

    def acknowledged(
        self,
        scheduled_time: int,
        idempotency_key: str,
        outcome: Outcome | None,
        dead_letter_error: RunError | None = None,
        *,
        delivered: bool = True,
        now_ms: int | None = None,
    ) -> bool:
        """A run reported its end and its outcome's delivery (by completing, or by the
        `run_acknowledged` signal, whose `outcome` is None unless dead-lettered): finish it if
        its end was not signalled, keep a dead letter, forget it. `delivered` is False for a
        run whose workflow ended without delivering (and without a dead letter). Returns
        whether this freed a slot that a queued run can take now, or the run's failure paused
        the schedule (either way the main loop must decide again)."""
        was_paused = self.state.paused
        freed = outcome is not None and self.finish(scheduled_time, outcome, now_ms)
        run = self.state.runs.get(scheduled_time)
        freed = freed or (run is not None and run.state == RunStatus.RUNNING)
        if run is not None and run.state in (RunStatus.QUEUED, RunStatus.RUNNING):
            # Its end came without its outcome: it ended all the same.
            self._remember_ended(run, None, now_ms)
        if outcome is not None and dead_letter_error is not None:
            self.record_dead_letter(scheduled_time, idempotency_key, outcome, dead_letter_error)
        if run is not None:
            if outcome is not None and dead_letter_error is not None:
                delivery = Delivery.DEAD_LETTERED
            else:
                delivery = Delivery.DELIVERED if delivered else Delivery.UNDELIVERED
            self._delivery_ended(scheduled_time, delivery)
        self.forget(scheduled_time)
        return (freed and self.queued_count() > 0) or self.state.paused != was_paused

    def forget(self, scheduled_time: int) -> bool:
        """The run's outcome was acknowledged or dead-lettered: drop it."""
        return self.state.runs.pop(scheduled_time, None) is not None

    def next_run_input(self) -> dict[str, Any]:
        """The start input of the next run of the schedule (continue-as-new): the settings in
        effect and the carried state, as JSON."""
        next_input = ScheduleWorkflowInput.model_validate(
            {**self.settings.model_dump(), "carried": self.state}, context=CARRIED_CONTEXT
        )
        data: dict[str, Any] = next_input.model_dump(mode="json")
        return data

    # --- the queries' answers (with `get`, `describe` above)

    def runs(self) -> list[dict[str, Any]]:
        """The `runs` query: every run not yet forgotten, in scheduled_time order."""
        return [self.state.runs[key].wire() for key in sorted(self.state.runs)]

    def paused(self) -> bool:
        """The `paused` query."""
        return self.state.paused

    def pause_note(self) -> str | None:
        """The `pause_note` query."""
        return self.state.pause_note

    def skipped_ticks(self) -> int:
        """The `skipped_ticks` query."""
        return self.state.skipped_ticks

    def dropped_signals(self) -> int:
        """The `dropped_signals` query."""
        return self.state.dropped_signals

    def dead_letters(self) -> list[dict[str, Any]]:
        """The `dead_letters` query: oldest first."""
        return [letter.wire() for letter in self.state.dead_letters]

    def settings_view(self) -> dict[str, Any]:
        """The `settings` query: the start settings in effect (as changed by `configure`)."""
        return settings_of(self.settings)


def attempts_begun(retries: OutcomeRetries, timeout_ms: int, elapsed_ms: int, allowed: int) -> int:
    """How many attempts of an outcome activity certainly began within `elapsed_ms` of its
    start (none had delivered): the first at once, and each next one at the latest
    `timeout_ms` (the attempt's own bound) plus the retry interval after the one before. A
    lower bound, at least 1 and at most `allowed`, assuming a worker takes each attempt as
    soon as it is due."""
    begun, at, interval = 1, 0, float(retries.initial_interval_ms)
    maximum = retries.maximum_interval_ms
    # The intervals grow until they reach the maximum (a few dozen steps at most) ...
    while begun < allowed and interval < maximum and retries.backoff_coefficient > 1.0:
        at += timeout_ms + math.ceil(interval)
        if at > elapsed_ms:
            return begun
        begun += 1
        interval = min(interval * retries.backoff_coefficient, maximum)
    # ... then every step is the same: count the rest without a loop.
    step = timeout_ms + math.ceil(min(interval, maximum))
    more = max(0, (elapsed_ms - at) // step)
    return min(allowed, begun + more)
