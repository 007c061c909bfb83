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
    past its lane."""
    found: list[Violation] = []
    for e in seen.effects:
        if e.kind not in _LAUNCHES:
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
