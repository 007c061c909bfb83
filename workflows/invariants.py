"""The seeds' promises as executable predicates over a core's state and the effects it asked for.

Pure (no Temporal import). Each check returns the violations it finds (an empty list when the
rule holds), each naming its rule (S1-S14, L1-L14). The simulations in `tests/simulation/`
call them after every transition; anything else that holds a core's state may call them too.
A new promise is a new predicate here, listed in its capability's `*_CHECKS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from workflows.ledger.models import LedgerConfig, LedgerState, RequestRecord


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

# What the ledger's shell did in one step, as the simulation (or any driver) records it: each
# start of work the core decided, with what held at that moment.
LedgerEffectKind = Literal["compile", "launch", "grant", "stop_query"]


@dataclass(frozen=True)
class LedgerEffect:
    """One start of work (a compile, a request loop launched, a retry granted, a final query),
    with the ledger as it was when it started: `held`/`stopped` before the start, the
    attempts in progress after it (`in_progress`, `by_type`), the settings then in effect,
    the request's protocol version, whether every dependency was resolved, whether an
    earlier attempt of the same request was still running at the far side, and the body the
    attempt carries (None for a compile)."""

    kind: LedgerEffectKind
    target: str
    operation_type: str
    held: bool = False
    stopped: bool = False
    in_progress: int = 0
    by_type: Mapping[str, int] = field(default_factory=dict)
    concurrency: int = 1
    lanes: Mapping[str, int] = field(default_factory=dict)
    protocol_version: Any = None
    supported_protocol_versions: Sequence[int] = ()
    dependencies_resolved: bool = True
    earlier_attempt_running: bool = False
    body: Mapping[str, Any] | None = None
    frozen_body: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class LedgerObservation:
    """The ledger after one step: its state, its settings, the starts of work the step made,
    the frozen body of every request as first recorded, and its final result once it
    completed (None before)."""

    state: LedgerState
    config: LedgerConfig
    effects: Sequence[LedgerEffect] = ()
    frozen_bodies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    final_result: Mapping[str, Any] | None = None


LedgerCheck = Callable[[LedgerObservation], list[Violation]]
_LAUNCHES = ("compile", "launch", "grant")


def launched_only_when_free(seen: LedgerObservation) -> list[Violation]:
    """L12: nothing is launched (no compile, relaunch or grant) while a hold is outstanding
    or once the ledger is stopped; only `stop`'s own final queries run then."""
    return [
        Violation("L12", f"{e.kind} of {e.target} while {'held' if e.held else 'stopped'}")
        for e in seen.effects
        if e.kind in _LAUNCHES and (e.held or e.stopped)
    ]


def within_slots(seen: LedgerObservation) -> list[Violation]:
    """L4: a start never takes the attempts in progress past `concurrency`, nor its type's
    past its lane; `stop`'s final queries included (each is a query at the far side)."""
    found: list[Violation] = []
    for e in seen.effects:
        if e.kind not in (*_LAUNCHES, "stop_query"):
            continue
        if e.in_progress > e.concurrency:
            found.append(
                Violation("L4", f"{e.kind} of {e.target}: {e.in_progress} > {e.concurrency}")
            )
        lane = e.lanes.get(e.operation_type)
        if lane is not None and e.by_type.get(e.operation_type, 0) > lane:
            found.append(
                Violation(
                    "L4",
                    f"{e.kind} of {e.target}: {e.by_type.get(e.operation_type)} "
                    f"{e.operation_type} in progress > lane {lane}",
                )
            )
    return found


def only_supported_protocols_sent(seen: LedgerObservation) -> list[Violation]:
    """L11: no request of a protocol version the ledger does not support (now) is sent: not
    launched, granted, nor asked at stop."""
    return [
        Violation("L11", f"{e.kind} of {e.target}: protocol {e.protocol_version!r} unsupported")
        for e in seen.effects
        if e.kind != "compile" and e.protocol_version not in e.supported_protocol_versions
    ]


def dependencies_before_dispatch(seen: LedgerObservation) -> list[Violation]:
    """L3: an operation is compiled only once every dependency is resolved."""
    return [
        Violation("L3", f"{e.target} compiled before its dependencies resolved")
        for e in seen.effects
        if e.kind == "compile" and not e.dependencies_resolved
    ]


def sends_carry_the_frozen_body(seen: LedgerObservation) -> list[Violation]:
    """L6/L7: every attempt carries the body frozen at compile, whole and unchanged."""
    return [
        Violation("L7", f"{e.kind} of {e.target} carries a body other than the frozen one")
        for e in seen.effects
        if e.kind != "compile" and (not e.body or e.body != e.frozen_body)
    ]


def final_query_after_the_attempt_ended(seen: LedgerObservation) -> list[Violation]:
    """3.10: `stop`'s final query of a request is asked only once every earlier attempt of
    it has really ended at the far side (a submit still running could land after)."""
    return [
        Violation("L13", f"final query of {e.target} while an earlier attempt still runs")
        for e in seen.effects
        if e.kind == "stop_query" and e.earlier_attempt_running
    ]


def frozen_bodies_never_change(seen: LedgerObservation) -> list[Violation]:
    """L6: an unresolved request keeps the body it was frozen with, whole."""
    found: list[Violation] = []
    for request in seen.state.requests.values():
        first = seen.frozen_bodies.get(request.id)
        if request.phase != "resolved" and first is not None and request.body != first:
            found.append(Violation("L6", f"body of unresolved {request.id} changed"))
    return found


def one_claim_per_canvas(seen: LedgerObservation) -> list[Violation]:
    """L5/L9/L14: no two unresolved requests claim one canvas; every unresolved request holds
    its canvases; a claim belongs to an unresolved request or a compile's reservation."""
    state = seen.state
    found: list[Violation] = []
    owner: dict[str, str] = {}
    for request in state.requests.values():
        if request.phase == "resolved":
            continue
        for canvas in request.canvas_ids:
            if canvas in owner and owner[canvas] != request.id:
                found.append(
                    Violation("L5", f"{canvas} claimed by {owner[canvas]} and {request.id}")
                )
            owner[canvas] = request.id
            if state.claims.get(canvas) != request.id:
                found.append(Violation("L5", f"{request.id} does not hold its canvas {canvas}"))
    reserved = set(state.compiling.values())
    for canvas, holder in state.claims.items():
        claimant = state.requests.get(holder)
        if holder in reserved:
            continue
        if claimant is None or claimant.phase == "resolved":
            found.append(Violation("L9", f"{canvas} held by {holder}, not unresolved"))
    return found


def sequence_order(seen: LedgerObservation) -> list[Violation]:
    """L2/L3: operations keep distinct sequences in arrival order, below `next_sequence`; the
    compiles one step starts go in sequence order."""
    state = seen.state
    sequences = [r.sequence for r in state.operations.values()]
    found: list[Violation] = []
    if sequences != sorted(set(sequences)) or (sequences and sequences[-1] >= state.next_sequence):
        found.append(Violation("L2", f"sequences {sequences[:20]} out of order"))
    compiled = [
        state.operations[e.target].sequence
        for e in seen.effects
        if e.kind == "compile" and e.target in state.operations
    ]
    if compiled != sorted(compiled):
        found.append(Violation("L3", f"compiles started out of sequence order: {compiled}"))
    return found


def held_and_stopped_agree(seen: LedgerObservation) -> list[Violation]:
    """L12: hold tokens are distinct; a stopped ledger's final result says what it holds."""
    holds = seen.state.holds
    found: list[Violation] = []
    if len(holds) != len(set(holds)):
        found.append(Violation("L12", f"a hold token is held twice: {holds}"))
    if seen.final_result is not None and not seen.state.stopped:
        found.append(Violation("L12", "completed without being stopped"))
    return found


def stop_forgets_nothing(seen: LedgerObservation) -> list[Violation]:
    """3.10: once stopped and completed, nothing is in flight and every unresolved request
    whose submit may have reached the far side is listed in `unknown` with its whole frozen
    body (or marked `request_left_out` past the size bound)."""
    result = seen.final_result
    if result is None:
        return []
    state = seen.state
    found: list[Violation] = []
    listed = {e["request_id"]: e for e in result.get("unknown", [])}
    for request in state.requests.values():
        if request.phase == "in_flight":
            found.append(Violation("L13", f"{request.id} still in flight at completion"))
        if request.phase == "resolved" or not _may_have_been_sent(request):
            continue
        entry = listed.get(request.id)
        if entry is None:
            found.append(Violation("L13", f"unresolved {request.id} not listed at stop"))
        elif not entry.get("request_left_out") and (
            not entry.get("request") or entry["request"] != seen.frozen_bodies.get(request.id)
        ):
            found.append(Violation("L13", f"{request.id} listed without its whole body"))
    for request_id in listed:
        known = state.requests.get(request_id)
        if known is None or known.phase == "resolved":
            found.append(Violation("L13", f"{request_id} listed unknown but resolved"))
    return found


def _may_have_been_sent(request: RequestRecord) -> bool:
    return request.launch != 0 and not (
        request.attempt == 0
        and request.blocker == "request_interpreter_unavailable"
        and request.retry_action == "submit"
    )


LEDGER_CHECKS: tuple[LedgerCheck, ...] = (
    launched_only_when_free,
    within_slots,
    only_supported_protocols_sent,
    dependencies_before_dispatch,
    sends_carry_the_frozen_body,
    final_query_after_the_attempt_ended,
    frozen_bodies_never_change,
    one_claim_per_canvas,
    sequence_order,
    held_and_stopped_agree,
    stop_forgets_nothing,
)


def check_ledger(seen: LedgerObservation) -> list[Violation]:
    """Every ledger promise over one observation."""
    return [violation for check in LEDGER_CHECKS for violation in check(seen)]
