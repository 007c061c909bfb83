"""The ledger's messages as its core reads and applies them (pure): each payload parsed and
checked against the state before anything is recorded (`InvalidRequest` or `LedgerStopped`
naming the field and the value), then applied.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from workflows.budget import STATE_BUDGET_BYTES
from workflows.ledger.models import (
    MAX_BATCH_BYTES,
    MAX_PAYLOAD_BYTES,
    EmptyInput,
    EnqueueInput,
    EnqueueResult,
    HoldInput,
    LedgerConfig,
    LedgerState,
    OperationIntent,
    OperationPhase,
    OperationRecord,
    ReleaseInput,
    RequestPhase,
    RequestReport,
    SkipInput,
    SnapshotQuery,
    StopInput,
)
from workflows.ledger.records import (
    MISSING_PARTICIPANTS,
    PERMANENT_BLOCKERS,
    SKIPPED,
    block_operation,
    bump,
    canvases_of,
    check_running,
    compact,
    counters_of,
    is_known,
    json_size,
    release_claims,
)
from workflows.limits import MAX_JSON_DEPTH, json_depth
from workflows.validation import InvalidRequest as InvalidRequest
from workflows.validation import (
    configured,
    format_validation_error,
)


def parse_enqueue(raw: Any) -> EnqueueInput:
    """Parse an `enqueue` payload; an `InvalidRequest` names the bad field and value."""
    if not isinstance(raw, dict):
        raise InvalidRequest(
            f'invalid enqueue input: expected {{"operations": [...]}}, got {raw!r:.80}'
        )
    try:
        batch = EnqueueInput.model_validate(raw)
    except ValidationError as error:
        raise InvalidRequest(format_validation_error("enqueue input", error)) from None
    total = 0
    for index, intent in enumerate(batch.operations):
        size = len(json.dumps(intent.payload, separators=(",", ":")))
        if size > MAX_PAYLOAD_BYTES:
            raise InvalidRequest(
                f"invalid enqueue input: operations.{index}.payload is {size} bytes as JSON, "
                f"more than the limit of {MAX_PAYLOAD_BYTES}"
            )
        depth = json_depth(intent.payload)
        if depth > MAX_JSON_DEPTH:
            raise InvalidRequest(
                f"invalid enqueue input: operations.{index}.payload nests {depth} levels deep, "
                f"more than {MAX_JSON_DEPTH}"
            )
        total += json_size(intent)
    if total > MAX_BATCH_BYTES:
        raise InvalidRequest(
            f"invalid enqueue input: the batch is {total} bytes as JSON, more than the limit "
            f"of {MAX_BATCH_BYTES}: split it"
        )
    return batch


def check_budget(state: LedgerState, batch: EnqueueInput) -> None:
    """Refuse a batch that would take the carried state past STATE_BUDGET_BYTES. Each new
    intent is counted twice: its frozen body, later, is about its size (see `freeze`)."""
    new = [i for i in batch.operations if not is_known(state, i.id)]
    if not new:
        return
    current = json_size(state)
    added = 2 * sum(json_size(intent) for intent in new)
    if current + added > STATE_BUDGET_BYTES:
        raise InvalidRequest(
            f"ledger is full: its state is {current} bytes and these {len(new)} operations "
            f"need about {added} more, over the budget of {STATE_BUDGET_BYTES}; enqueue again "
            "once operations resolve"
        )


def check_enqueue(state: LedgerState, batch: EnqueueInput) -> None:
    """Reject an ID repeated in the batch and a dependency cycle (batch plus known operations)."""
    first_index: dict[str, int] = {}
    for index, intent in enumerate(batch.operations):
        if intent.id in first_index:
            raise InvalidRequest(
                f"invalid enqueue input: operations.{index}.id {intent.id!r} repeats "
                f"operations.{first_index[intent.id]}.id in the same batch"
            )
        first_index[intent.id] = index
    new = {i.id: i for i in batch.operations if not is_known(state, i.id)}
    cycle = _find_cycle(state, new)
    if cycle:
        raise InvalidRequest(
            "invalid enqueue input: dependency cycle " + " -> ".join(repr(c) for c in cycle)
        )


def _find_cycle(state: LedgerState, new: dict[str, OperationIntent]) -> list[str] | None:
    def deps(op_id: str) -> list[str]:
        if op_id in new:
            return new[op_id].dependencies
        known = state.operations.get(op_id)
        return known.intent.dependencies if known else []

    done: set[str] = set()
    for root in new:
        if root in done:
            continue
        path: list[str] = []
        on_path: set[str] = set()
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            node, child = stack.pop()
            if child == 0:
                if node in on_path:
                    return [*path[path.index(node) :], node]
                if node in done:
                    continue
                path.append(node)
                on_path.add(node)
            children = deps(node)
            if child < len(children):
                stack.append((node, child + 1))
                nxt = children[child]
                if nxt in on_path:
                    return [*path[path.index(nxt) :], nxt]
                if nxt not in done:
                    stack.append((nxt, 0))
            else:
                path.pop()
                on_path.discard(node)
                done.add(node)
    return None


# Each message's payload is parsed by one function below (`validate_*` when the state can refuse
# it too), before anything is recorded: `InvalidRequest` (or `LedgerStopped`) names what is
# wrong. The shell turns it into the update's rejection, typed by the error's class name, or
# drops the signal of the same name.


def validate_enqueue(
    state: LedgerState,
    raw: Any,
    config: LedgerConfig | None = None,
    refuse: Callable[[], bool] = lambda: True,
) -> EnqueueInput:
    """Everything the `enqueue` update validator checks; raises `InvalidRequest`. With the
    ledger's `config`, an operation that could never dispatch (no participants, a type that
    is not participant-free, L5) is refused too, naming it: the validator and the signal
    pass it; the update's handler does not (it applies what its validator accepted).
    `refuse()` is asked only when such an operation is found (a signal handler's patch)."""
    if state.stopped:
        raise InvalidRequest("ledger is stopped: enqueue refused")
    batch = parse_enqueue(raw)
    if config is not None:
        check_participants(batch, config, refuse)
    check_enqueue(state, batch)
    check_budget(state, batch)
    return batch


def check_update(name: str, state: LedgerState, config: LedgerConfig, payload: Any) -> None:
    """What the validator of update `name` checks of its `payload` (JSON values) against the
    state and the settings; InvalidRequest (or LedgerStopped) naming the field and value."""
    checks: dict[str, Callable[[], object]] = {
        "enqueue": lambda: validate_enqueue(state, payload, config),
        "hold": lambda: validate_hold(state, payload),
        "release": lambda: validate_release(state, payload),
        "settle": lambda: validate_empty(state, "settle", payload),
        "resume": lambda: validate_empty(state, "resume", payload),
        "skip": lambda: validate_skip(state, payload),
        "configure": lambda: validate_configure(state, payload, config),
        "stop": lambda: validate_stop(state, payload),
    }
    checks[name]()


def check_participants(
    batch: EnqueueInput, config: LedgerConfig, refuse: Callable[[], bool] = lambda: True
) -> None:
    """Refuse an operation with no participants whose type is not participant-free (L5): it
    would only ever be blocked (`missing_participants`)."""
    for index, intent in enumerate(batch.operations):
        if (
            not canvases_of(intent)
            and intent.operation_type not in config.participant_free_types
            and refuse()
        ):
            raise InvalidRequest(
                f"invalid enqueue input: operations.{index}.participants is empty and "
                f"operation_type {intent.operation_type!r:.80} is not participant-free "
                f"(participant_free_types: {config.participant_free_types!r:.200})"
            )


def enqueue(
    state: LedgerState, batch: EnqueueInput, config: LedgerConfig | None = None
) -> EnqueueResult:
    """Record new intents in arrival order (their sequence); known IDs are duplicates (L2),
    or conflicts when sent with another intent (`intent_conflicts`): neither is recorded.
    An operation with no participants is blocked at once unless its type is participant-free
    (L5): in the handler, so no later step changes state without a command."""
    free_types = (config or LedgerConfig()).participant_free_types
    counters = counters_of(state)  # before the sequence moves (it seeds from it)
    accepted: list[str] = []
    duplicates: list[str] = []
    conflicts: list[str] = []
    for intent in batch.operations:
        if is_known(state, intent.id):
            (conflicts if intent_conflicts(state, intent) else duplicates).append(intent.id)
            continue
        record = OperationRecord(intent=intent, sequence=state.next_sequence)
        if not canvases_of(intent) and intent.operation_type not in free_types:
            block_operation(record, [MISSING_PARTICIPANTS], "operation has no participants")
        state.operations[intent.id] = record
        state.next_sequence += 1
        accepted.append(intent.id)
    counters.operations_enqueued += len(accepted)
    return EnqueueResult(accepted=accepted, duplicates=duplicates, conflicts=conflicts)


def canonical_intent(intent: OperationIntent) -> str:
    """An intent as canonical JSON: every field, object keys sorted (their order does not
    count; the order of lists, participants and dependencies included, does)."""
    return json.dumps(intent.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def intent_conflicts(state: LedgerState, intent: OperationIntent) -> bool:
    """A known ID sent with an intent other than the one recorded for it, compared as
    `canonical_intent`. A resolved operation keeps only its ID and type for sure (`compact`
    drops the rest, now or later), so only another `operation_type` is a conflict. An ID
    remembered only (`forgotten`) keeps no intent: never a conflict."""
    record = state.operations.get(intent.id)
    if record is None:
        return False
    if record.phase == "resolved":
        return intent.operation_type != record.intent.operation_type
    return canonical_intent(intent) != canonical_intent(record.intent)


def count_signal_conflicts(state: LedgerState, conflicts: list[str]) -> str:
    """An `enqueue` signal named known IDs with other intents: counted; returns what to log."""
    state.signal_conflicts += len(conflicts)
    shown = ", ".join(repr(c) for c in conflicts[:10]) + (" ..." if len(conflicts) > 10 else "")
    return (
        f"enqueue signal: {len(conflicts)} known IDs sent with another intent, not recorded "
        f"({state.signal_conflicts} so far): {shown}"
    )


def resume(state: LedgerState, config: LedgerConfig) -> list[str]:
    """L13: blocked requests (supported protocol) become frozen to be relaunched with their
    recorded action; operations blocked at compile go back to pending. Returns touched IDs."""
    touched: list[str] = []
    for request in state.requests.values():
        if request.phase != "blocked":
            continue
        if request.body.get("protocol_version") not in config.supported_protocol_versions:
            continue
        request.phase = RequestPhase.FROZEN
        request.blocker = None
        touched.append(request.id)
    for record in state.operations.values():
        if record.phase != "blocked" or record.request_id is not None:
            continue
        if any(b in PERMANENT_BLOCKERS for b in record.blockers):
            continue
        record.phase = OperationPhase.PENDING
        record.blockers = []
        record.error = None
        touched.append(record.intent.id)
    return touched


def validate_empty(state: LedgerState, message: str, raw: Any) -> EmptyInput:
    """`resume` / `settle` / `stop`: `{}` (or nothing) on a running ledger."""
    check_running(state)
    try:
        return EmptyInput.model_validate({} if raw is None else raw)
    except ValidationError as error:
        raise InvalidRequest(format_validation_error(f"{message} input", error)) from None


def parse_release(raw: Any) -> ReleaseInput:
    """`release`: `{"token": str}`. As a signal, a token not held is dropped when released."""
    try:
        return ReleaseInput.model_validate(raw)
    except ValidationError as error:
        raise InvalidRequest(format_validation_error("release input", error)) from None


def validate_release(state: LedgerState, raw: Any) -> ReleaseInput:
    """`release` as an update: the token must be one currently held."""
    release = parse_release(raw)
    if release.token not in state.holds:
        raise InvalidRequest(f"invalid release input: token {release.token!r:.80} is not held")
    return release


def validate_skip(state: LedgerState, raw: Any) -> SkipInput:
    """`skip`: `{"operation_id", "reason"?}` naming an operation `check_skip` allows."""
    try:
        parsed = SkipInput.model_validate(raw)
    except ValidationError as error:
        raise InvalidRequest(format_validation_error("skip input", error)) from None
    check_skip(state, parsed.operation_id)
    return parsed


def parse_report(raw: Any) -> RequestReport:
    """A `FrozenRequest`'s report (its `request_progress` / `request_finished`, its result)."""
    try:
        return RequestReport.model_validate(raw)
    except ValidationError as error:
        raise InvalidRequest(format_validation_error("request report", error)) from None


def check_skip(state: LedgerState, op_id: str) -> OperationRecord:
    """A skip is allowed for a known operation that is pending or blocked and not in flight,
    on a ledger that is not stopping (its final queries may be asking about it)."""
    check_running(state)
    record = state.operations.get(op_id)
    if record is None and op_id in state.forgotten:
        raise InvalidRequest(f"invalid skip input: operation {op_id!r} is already resolved")
    if record is None:
        raise InvalidRequest(f"invalid skip input: operation_id {op_id!r} is not known")
    if record.phase == "resolved":
        raise InvalidRequest(f"invalid skip input: operation {op_id!r} is already resolved")
    if op_id in state.compiling:
        raise InvalidRequest(f"invalid skip input: operation {op_id!r} is compiling")
    request = state.requests.get(record.request_id or "")
    if request is not None and request.phase == "in_flight":
        raise InvalidRequest(
            f"invalid skip input: operation {op_id!r} has request {request.id!r} in flight"
        )
    return record


def skip_and_compact(state: LedgerState, config: LedgerConfig, op_id: str, reason: str) -> None:
    """`skip`, then `compact`: the shell's transition for the `skip` message."""
    skip(state, op_id, reason)
    compact(state, config)


def skip(state: LedgerState, op_id: str, reason: str) -> None:
    """Resolve a stuck operation as `skipped` (see module docstring), releasing its canvases."""
    record = check_skip(state, op_id)
    request = state.requests.get(record.request_id or "")
    if request is not None:
        request.phase = RequestPhase.RESOLVED
        request.blocker = None
        request.last_status = {"outcome": SKIPPED, "error": reason}
        release_claims(state, request.id)
    record.phase = OperationPhase.RESOLVED
    record.outcome = SKIPPED
    state.resolved_total += 1
    bump(counters_of(state).operations_resolved, SKIPPED)
    record.error = reason
    record.blockers = []


def stop(state: LedgerState) -> None:
    """Stop dispatching for good: nothing is launched from now on."""
    state.stopped = True


def parse_stop(raw: Any) -> StopInput:
    """`stop`: `{}` or `{"query_limit"?, "query_deadline_ms"?}` (see `StopInput`)."""
    try:
        return StopInput.model_validate({} if raw is None else raw)
    except ValidationError as error:
        raise InvalidRequest(format_validation_error("stop input", error)) from None


def validate_stop(state: LedgerState, raw: Any) -> StopInput:
    """`stop` as its validator checks it: once, on a running ledger, with a valid payload."""
    check_running(state)
    return parse_stop(raw)


def begin_stop(state: LedgerState, raw: Any) -> StopInput:
    """`stop`'s handler: stop (`stop`), and the bound its final queries keep. A payload the
    validator let through always parses; one that does not (a history may hold one `stop`
    once ignored) takes the defaults, so it replays."""
    stop(state)
    try:
        return parse_stop(raw)
    except InvalidRequest:
        return StopInput()


def count_dropped_signal(state: LedgerState) -> int:
    """A signal could not be applied and was dropped; returns the count so far."""
    state.dropped_signals += 1
    return state.dropped_signals


# At most this many hold tokens are outstanding at once (each is carried in the state).
MAX_HOLDS = 64


def parse_hold(raw: Any) -> HoldInput:
    """`hold`: `{}` (or nothing), or `{"token": str}`, the caller's own token."""
    try:
        return HoldInput.model_validate({} if raw is None else raw)
    except ValidationError as error:
        raise InvalidRequest(format_validation_error("hold input", error)) from None


def hold_token(raw: Any, generated: str) -> str:
    """The token a `hold` its validator accepted takes: the caller's, else `generated` (also for
    a payload that does not parse, which a history may hold from when `hold` ignored it)."""
    try:
        return parse_hold(raw).token or generated
    except InvalidRequest:
        return generated


def validate_hold(state: LedgerState, raw: Any) -> HoldInput:
    """`hold` on a running ledger: a token already held is taken again (nothing changes);
    a new one is refused past MAX_HOLDS outstanding."""
    check_running(state)
    parsed = parse_hold(raw)
    if parsed.token not in state.holds and len(state.holds) >= MAX_HOLDS:
        raise InvalidRequest(
            f"invalid hold input: {len(state.holds)} hold tokens are outstanding, the most "
            f"a ledger keeps: release one (the snapshot's hold_tokens lists them)"
        )
    return parsed


def hold(state: LedgerState, token: str) -> str:
    """L12: no new launch until every token is released. Idempotent: a token already held
    changes nothing. Returns the token."""
    if token not in state.holds:
        state.holds.append(token)
    return token


def release(state: LedgerState, token: str) -> bool:
    """Release one hold token; False when it was not held."""
    if token not in state.holds:
        return False
    state.holds.remove(token)
    return True


# Start fields `configure` cannot change, each with why (docs/contract.md 3.3).
FIXED_SETTINGS = {
    "ledger_id": "it names the ledger and its requests' workflow IDs",
    "carried_state": "it is internal: the state a run carries across continue-as-new",
    "continue_as_new_after_events": "it is not part of the wire contract (set at start only)",
    "local_compile": "it is not part of the wire contract (set at start only)",
    "own_retry_timers": "it is not part of the wire contract (set at start only)",
}


def parse_configure(raw: Any, current: LedgerConfig) -> LedgerConfig:
    """Validate a `configure` payload (a partial start input) against the `current`
    settings: the settings it leaves, or InvalidRequest naming the field and the value."""
    return configured("configure", current, raw, FIXED_SETTINGS)


def validate_configure(state: LedgerState, raw: Any, current: LedgerConfig) -> LedgerConfig:
    """`parse_configure` on a running ledger (a stopped one takes no `configure`), refusing
    `participant_free_types` without the type of an operation with no participants that has
    no frozen request yet (it could then never dispatch, L5)."""
    check_running(state)
    config = parse_configure(raw, current)
    for record in state.operations.values():
        intent = record.intent
        if (
            record.phase != "resolved"
            and record.request_id not in state.requests  # not frozen yet: may dispatch again
            and not canvases_of(intent)
            and intent.operation_type not in config.participant_free_types
        ):
            raise InvalidRequest(
                f"invalid configure: participant_free_types {config.participant_free_types!r:.200} "
                f"leaves out {intent.operation_type!r:.80}, the type of operation "
                f"{intent.id!r:.80}, which has no participants and is not resolved"
            )
    return config


def parse_snapshot_query(raw: Any) -> SnapshotQuery:
    try:
        return SnapshotQuery.model_validate(raw or {})
    except ValidationError as error:
        raise InvalidRequest(format_validation_error("snapshot query", error)) from None
