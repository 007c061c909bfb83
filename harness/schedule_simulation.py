"""A deterministic model of `DurabilitySchedule`: its core driven through the transitions its
shell makes, with what Temporal can do between them chosen by a seeded random source.

The model is the shell's behaviour written without Temporal: `step` is the main loop's
`_step`, `pump` is `Deliveries.pump`, `_message` is a handler with its validator, the
phases are the drain, the close for continue-as-new and the close on cancellation. Between
any two transitions Temporal may: deliver any message (signal or update, valid or not, a
burst of `trigger`s in one workflow task), end a run's child (complete, error, time out, be
interrupted, or be terminated from outside), end an outcome delivery (delivered, given up,
or, once asked to stop, still delivered or really stopped: a stop request does not end a
running attempt), end a redelivery, advance the clock, make the history long, spend the
drain's allowance (the runs still going are handed over and report by signal), close for
continue-as-new (state carried and the core rebuilt from it), restart the worker (the core
rebuilt by replay), and request cancellation. Every schedule invariant
(`workflows.invariants.SCHEDULE_CHECKS`) is checked after every transition; at the end the
model runs everything in flight to its end and checks the schedule could close.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workflows.invariants import ScheduleStep, Violation, schedule_violations
from workflows.schedule.core import Closing, InvalidRequest, ScheduleCore
from workflows.schedule.messages import read_payload
from workflows.schedule.models import (
    Outcome,
    RunError,
    ScheduleInput,
    ScheduleState,
    idempotency_key,
)

OBJECT_ID = "sim"
# Outcome deliveries going at once (the shell's is 500: small here, so the room binds).
DELIVERY_LIMIT = 2
START_MS = 1_700_000_000_000


def next_occurrence(expression: str, after_ms: int) -> int | None:
    """`every:<ms>` fires on multiples of <ms>; `never` never fires; anything else is refused
    (a deployment's own rule, as the shell's `next_occurrence` may be)."""
    if expression == "never":
        return None
    if not expression.startswith("every:"):
        raise ValueError(f"unknown expression {expression!r}")
    period = int(expression.removeprefix("every:"))
    if period <= 0:
        raise ValueError("period must be positive")
    return (after_ms // period + 1) * period


class SimulationFailure(AssertionError):
    """A broken promise, with the seed and the steps that led to it."""


@dataclass
class Child:
    """A run's `ScheduledRun` child: watched by this run of the schedule, or handed over
    (it then reports by signal: `run_settled`, then delivers itself and `run_acknowledged`)."""

    handed_over: bool = False
    settled: Outcome | None = None


@dataclass
class ScheduleSimulation:
    """One seeded interleaving."""

    seed: int
    steps: int = 80
    rng: random.Random = field(init=False)
    settings: ScheduleInput = field(init=False)
    core: ScheduleCore = field(init=False)
    now: int = START_MS
    # ticking, draining, closing (for continue-as-new), cancelling, closed
    phase: str = "ticking"
    allowance_spent: bool = False
    children: dict[int, Child] = field(default_factory=dict)
    # Deliveries going: scheduled_time -> asked to stop.
    deliveries: dict[int, bool] = field(default_factory=dict)
    # Redeliveries going: idempotency key -> scheduled_time.
    redeliveries: dict[str, int] = field(default_factory=dict)
    history_children: Counter[int] = field(default_factory=Counter)
    history_owed: set[int] = field(default_factory=set)
    history_delivered: set[int] = field(default_factory=set)
    log: list[str] = field(default_factory=list)
    # Effects of the transition being made.
    _started: list[int] = field(default_factory=list)
    _delivered_started: list[int] = field(default_factory=list)
    _triggered: list[int] = field(default_factory=list)
    _ticked_at: int | None = None
    _carried: dict[str, Any] | None = None
    _applied: bool = False
    _ended: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.settings = ScheduleInput(
            object_id=OBJECT_ID,
            max_concurrent_runs=self.rng.randint(1, 3),
            max_queued_runs=self.rng.randint(0, 4),
            max_dead_letters=self.rng.randint(0, 3),
        )
        self.core = ScheduleCore(ScheduleState(), next_occurrence, self.settings)

    # --- the run: random transitions, each checked ---

    def run(self) -> None:
        """Make `steps` random transitions, then end everything in flight."""
        actions: list[tuple[int, Callable[[], None]]] = [
            (6, self.advance_clock),
            (8, self.message),
            (2, self.trigger_burst),
            (5, self.end_child),
            (5, self.end_delivery),
            (1, self.end_redelivery),
            (1, self.history_long),
            (1, self.spend_allowance),
            (2, self.close_for_continue_as_new),
            (1, self.restart_worker),
            (1, self.request_cancellation),
        ]
        weights = [weight for weight, _ in actions]
        self.transition("start", lambda: None)
        for _ in range(self.steps):
            if self.phase == "closed":
                break
            [(_, action)] = self.rng.choices(actions, weights)
            action()
        self.finish()

    def transition(self, label: str, apply: Callable[[], None]) -> None:
        """Apply one transition and check every invariant on it."""
        before = self.core.state.model_dump(mode="json")
        going_before = frozenset(self.deliveries)
        self._started, self._delivered_started, self._triggered = [], [], []
        self._ticked_at, self._carried, self._applied = None, None, False
        apply()
        self.log.append(label)
        step = ScheduleStep(
            before=before,
            after=self.core.state.model_dump(mode="json"),
            max_concurrent_runs=self.core.max_concurrent_runs,
            max_dead_letters=self.core.max_dead_letters,
            closing=None if self.core.closing is None else self.core.closing.value,
            label=label,
            children_started=tuple(self._started),
            deliveries_started=tuple(self._delivered_started),
            deliveries_going_before=going_before - {t for t in going_before if t in self._ended},
            triggered=tuple(self._triggered),
            ticked_at=self._ticked_at,
            carried=self._carried,
            message_applied=self._applied,
            history_children=dict(self.history_children),
            history_owed=frozenset(self.history_owed),
            history_delivered=frozenset(self.history_delivered),
            deliveries_going_after=frozenset(self.deliveries),
            delivery_limit=DELIVERY_LIMIT,
            deliveries_stopped=self.core.deliveries_stopped(),
        )
        self.check(schedule_violations(step))
        self._ended = set()

    def check(self, violations: list[Violation]) -> None:
        if violations:
            raise SimulationFailure(self.report(violations))

    def report(self, violations: list[Violation]) -> str:
        lines = [f"schedule simulation seed {self.seed}: {len(violations)} violation(s)"]
        lines += [f"  {violation}" for violation in violations]
        lines.append(f"  after {len(self.log)} transitions: {' > '.join(self.log[-25:])}")
        lines.append(
            f"  replay: DURABILITY_SIM_SEED={self.seed} .venv/bin/python -m pytest "
            "tests/simulation/test_schedule_simulation.py"
        )
        return "\n".join(lines)

    # --- the main loop (the shell's `_step`) ---

    def step(self) -> None:
        """Tick if due, then start what the free slots allow (none once draining or
        closing); a cancelled schedule's main loop runs no more."""
        if self.phase not in ("ticking", "draining"):
            return
        due = self.core.tick(self.now)
        if due is not None:
            self._ticked_at = due.scheduled_time
        if self.phase != "ticking":
            return
        for run in self.core.take_startable(self.now):
            if self.history_children[run.scheduled_time]:
                # `start_run`: the child's ID is taken (the time already ran), so it is not
                # started again (S6); the run is forgotten.
                self.core.forget(run.scheduled_time)
                continue
            self.children[run.scheduled_time] = Child()
            self.history_children[run.scheduled_time] += 1
            self._started.append(run.scheduled_time)

    def pump(self, ending: int | None = None) -> None:
        """`Deliveries.pump`: start the deliveries the core says to start."""
        going = {t for t in self.deliveries if t != ending}
        for run in self.core.deliveries_to_start(going, DELIVERY_LIMIT):
            self.deliveries[run.scheduled_time] = False
            self._delivered_started.append(run.scheduled_time)

    # --- what Temporal may do ---

    def advance_clock(self) -> None:
        self.now += self.rng.choice([1, 10, 300, 1000, 2500, 7000])
        self.transition(f"clock+{self.now - START_MS}", self.step)

    def message(self) -> None:
        name = self.rng.choice(
            ["set", "set", "cancel", "pause", "unpause", "trigger", "backfill", "configure",
             "redeliver"]
        )  # fmt: skip
        as_signal = name in ("set", "cancel", "pause", "unpause", "configure") and (
            self.rng.random() < 0.4
        )
        raw = self.payload(name)
        kind = "signal" if as_signal else "update"
        self.transition(f"{kind}:{name}", lambda: self._message(name, raw, as_signal))

    def payload(self, name: str) -> Any:
        rng = self.rng
        if rng.random() < 0.1:
            return rng.choice([{"bogus": 1}, "text", [1], {"version": -1}])
        version = rng.randint(0, 6)
        if name == "set":
            expression = rng.choice(["every:1000", "every:5000", "every:60000", "never", "bad"])
            jitter: Any = rng.choice([0, 0, 200, {"max_ms": 500}])
            return {"expression": expression, "version": version, "jitter_ms": jitter,
                    "params": {"v": version}}  # fmt: skip
        if name == "cancel":
            return rng.choice([{}, {"version": version}])
        if name == "pause":
            return rng.choice([{}, {"note": "why"}])
        if name == "backfill":
            span = rng.choice([1000, 5000, 20_000])
            return {"start_at": self.now - span - rng.randint(0, 5000), "end_at": self.now - 1}
        if name == "configure":
            return rng.choice(
                [{"max_concurrent_runs": rng.randint(1, 4)},
                 {"max_queued_runs": rng.randint(0, 5)},
                 {"max_dead_letters": rng.randint(0, 3)},
                 {"overlap": rng.choice(["queue", "skip", "buffer_one"])},
                 {"remaining_runs": rng.choice([None, 0, 2])}]
            )  # fmt: skip
        if name == "redeliver":
            letters = self.core.state.dead_letters
            if letters and rng.random() < 0.8:
                return {"idempotency_key": rng.choice(letters).idempotency_key}
            return {"idempotency_key": "nope"}
        return {}

    def _message(self, name: str, raw: Any, as_signal: bool) -> None:
        """A handler with its validator, as the shell runs it: refused (an update) or dropped
        and counted (a signal), or applied; the main loop then decides again."""
        try:
            self.core.check_open(name)
            self._apply(name, raw)
        except InvalidRequest:
            if as_signal:
                self.core.count_dropped_signal()
            return
        self._applied = True
        self.step()

    def _apply(self, name: str, raw: Any) -> None:
        core, now = self.core, self.now
        if name == "set":
            request = read_payload("set", raw, now, next_occurrence)
            core.set(request, now, lambda top: self.rng.randint(0, top))
        elif name == "cancel":
            core.cancel(read_payload("cancel", raw))
        elif name == "pause":
            core.pause(read_payload("pause", raw).note)
        elif name == "unpause":
            core.check_unpause(now)
            core.unpause(now)
        elif name == "trigger":
            core.check_live("trigger")
            core.check_room(1, "trigger")
            self._triggered.append(core.trigger(now).scheduled_time)
        elif name == "backfill":
            backfill = read_payload("backfill", raw, now)
            core.check_backfill(backfill.start_at, backfill.end_at)
            core.backfill(backfill.start_at, backfill.end_at)
        elif name == "configure":
            self.settings = core.configure(raw, now)
        elif name == "redeliver":
            letter = core.begin_redelivery(read_payload("redeliver", raw).idempotency_key)
            self.redeliveries[letter.idempotency_key] = letter.scheduled_time

    def trigger_burst(self) -> None:
        """Several `trigger` updates in one workflow task: one `now` for all."""
        count = self.rng.randint(2, 4)

        def burst() -> None:
            for _ in range(count):
                try:
                    self.core.check_open("trigger")
                    self.core.check_live("trigger")
                    self.core.check_room(1, "trigger")
                except InvalidRequest:
                    continue
                self._triggered.append(self.core.trigger(self.now).scheduled_time)
                self._applied = True
            self.step()

        self.transition(f"triggerx{count}", burst)

    def end_child(self) -> None:
        if not self.children:
            return
        scheduled_time = self.rng.choice(sorted(self.children))
        child = self.children[scheduled_time]
        outcome = self.rng.choice(
            [Outcome(status="complete"),
             Outcome(status="errored", error=RunError(name="Boom", message="failed")),
             Outcome(status="errored",
                     error=RunError(name="ScheduledRunTimeoutError", message="timeout")),
             Outcome(status="errored",
                     error=RunError(name="ScheduledRunInterruptedError", message="killed"))]
        )  # fmt: skip
        if child.handed_over:
            self.transition(f"child-signals:{scheduled_time}", lambda: self._child_reports(
                scheduled_time, child, outcome))  # fmt: skip
            return
        terminated = self.rng.random() < 0.05

        def ended() -> None:
            del self.children[scheduled_time]
            if terminated:  # `report_of`: it never reports, its outcome undelivered
                key = idempotency_key(OBJECT_ID, scheduled_time)
                self.core.acknowledged(scheduled_time, key, outcome, None, delivered=False)
                return
            self.core.finished_to_deliver(scheduled_time, outcome, self.now)
            self.history_owed.add(scheduled_time)
            self.pump()
            self.step()

        self.transition(f"child-ends:{scheduled_time}", ended)

    def _child_reports(self, scheduled_time: int, child: Child, outcome: Outcome) -> None:
        """A handed-over child: `run_settled` first, then (it delivered its outcome itself, or
        gave up) `run_acknowledged`."""
        key = idempotency_key(OBJECT_ID, scheduled_time)
        if child.settled is None:
            child.settled = outcome
            self.core.finished_by_signal(scheduled_time, outcome, self.now)
        else:
            del self.children[scheduled_time]
            if self.rng.random() < 0.3:
                error = RunError(name="Refused", message="gave up")
                self.core.acknowledged(scheduled_time, key, child.settled, error)
            else:
                self.core.acknowledged(scheduled_time, key, None)
        self.step()

    def end_delivery(self) -> None:
        if not self.deliveries:
            return
        scheduled_time = self.rng.choice(sorted(self.deliveries))
        asked_to_stop = self.deliveries[scheduled_time]
        ends = ["delivered", "delivered", "dead_lettered"] + ["interrupted"] * 3 * asked_to_stop
        end = self.rng.choice(ends)
        self.transition(f"delivery-{end}:{scheduled_time}", lambda: self._delivery_ends(
            scheduled_time, end))  # fmt: skip

    def _delivery_ends(self, scheduled_time: int, end: str) -> None:
        del self.deliveries[scheduled_time]
        self._ended.add(scheduled_time)
        key = idempotency_key(OBJECT_ID, scheduled_time)
        if end == "interrupted":
            retries = self.settings.outcome_retries
            self.core.delivery_interrupted(
                scheduled_time, self.rng.randint(0, 2), retries.max_attempts
            )
        elif end == "delivered":
            self.core.delivered(scheduled_time, key, None)
            self.history_delivered.add(scheduled_time)
        else:
            self.core.delivered(scheduled_time, key, RunError(name="Refused", message="no"))
        self.pump(ending=scheduled_time)
        self.step()

    def end_redelivery(self) -> None:
        if not self.redeliveries:
            return
        key = self.rng.choice(sorted(self.redeliveries))
        error = None if self.rng.random() < 0.7 else RunError(name="Refused", message="again")

        def ended() -> None:
            scheduled_time = self.redeliveries.pop(key)
            self.core.redelivered(key, error)
            if error is None:
                self.history_delivered.add(scheduled_time)

        self.transition(f"redelivery-ends:{key[-6:]}", ended)

    def history_long(self) -> None:
        if self.phase == "ticking":
            self.transition("history-long", self._begin_drain)

    def _begin_drain(self) -> None:
        self.phase = "draining"
        self.allowance_spent = False

    def spend_allowance(self) -> None:
        """The drain's allowance of events is spent: the runs still going are handed over."""
        if self.phase == "draining":
            self.transition("drain-allowance-spent", self._spend)

    def _spend(self) -> None:
        self.allowance_spent = True
        for child in self.children.values():
            child.handed_over = True

    def _drain_over(self) -> bool:
        return self.allowance_spent or self.core.drained(shell_busy=bool(self.redeliveries))

    def close_for_continue_as_new(self) -> None:
        """The drain is over: stop the deliveries (those going are asked to stop), and once
        none goes, continue as new: the state is carried and a new core built from it."""
        if self.phase == "draining" and self._drain_over():
            self.transition("close-begins", self._begin_close)
        elif self.phase == "closing" and not self.deliveries:
            self.transition("continue-as-new", self._continue_as_new)

    def _begin_close(self) -> None:
        self.phase = "closing"
        for child in self.children.values():
            child.handed_over = True
        self.core.begin_continue_as_new()
        if self.core.deliveries_stopped():
            for scheduled_time in self.deliveries:
                self.deliveries[scheduled_time] = True

    def _continue_as_new(self) -> None:
        carried = json.loads(self.core.state.model_dump_json())
        self._carried = ScheduleState.model_validate(carried).model_dump(mode="json")
        state = ScheduleState.model_validate(carried)
        self.core = ScheduleCore(state, next_occurrence, self.settings)
        self.phase = "ticking"
        self.pump()  # first in the new run: `Deliveries.resume`
        self.step()

    def restart_worker(self) -> None:
        """A worker restart: the run's state is rebuilt by replay (here, from its JSON, with
        what replay also rebuilds: the close under way)."""

        def restart() -> None:
            closing = self.core.closing
            state = ScheduleState.model_validate_json(self.core.state.model_dump_json())
            self._carried = state.model_dump(mode="json")
            self.core = ScheduleCore(state, next_occurrence, self.settings)
            self.core.closing = closing

        self.transition("worker-restart", restart)

    def request_cancellation(self) -> None:
        if self.phase in ("cancelling", "closed"):
            return
        self.transition("cancel-requested", self._cancel)

    def _cancel(self) -> None:
        """The shell's cancellation path: the core closes as cancelled; the deliveries it then
        says to start are started; the main loop runs no more."""
        self.phase = "cancelling"
        self.core.begin_cancellation()
        self.pump()
        self._close_if_cancelled()

    def _close_if_cancelled(self) -> None:
        if self.phase != "cancelling":
            return
        watched = any(not child.handed_over for child in self.children.values())
        if self.core.may_close_cancelled(
            deliveries_going=len(self.deliveries), others_busy=watched or bool(self.redeliveries)
        ):
            self.phase = "closed"

    # --- the end: everything in flight ends; the schedule must be able to close ---

    def finish(self) -> None:
        """Run what is in flight to its end (deliveries succeed, children complete) and check
        that a schedule asked to cancel closes, and one closing for continue-as-new does."""
        for _ in range(500):
            if self.phase == "cancelling":
                self._close_if_cancelled()
                if self.phase == "closed":
                    break
            if self.deliveries:
                self._deliver_oldest()
            elif self.children:
                self.end_child()
            elif self.redeliveries:
                self.end_redelivery()
            elif self.phase == "draining":
                self.transition("drain-allowance-spent", self._spend)
                self.close_for_continue_as_new()
            elif self.phase == "closing":
                self.close_for_continue_as_new()
            else:
                break
        if self.phase == "cancelling":
            owed = [run.scheduled_time for run in self.core.awaiting_delivery()]
            self.check(
                [
                    Violation(
                        "S11", f"asked to cancel, never closes; outcomes {owed} never delivered"
                    )
                ]
            )

    def _deliver_oldest(self) -> None:
        scheduled_time = min(self.deliveries)
        self.transition(
            f"delivered:{scheduled_time}", lambda: self._delivery_ends(scheduled_time, "delivered")
        )


def simulate(seed: int, steps: int = 80) -> ScheduleSimulation:
    """Run the interleaving of `seed`; raises SimulationFailure naming the seed on a broken
    promise."""
    simulation = ScheduleSimulation(seed, steps)
    simulation.run()
    return simulation


__all__ = ["Closing", "ScheduleSimulation", "SimulationFailure", "simulate"]
