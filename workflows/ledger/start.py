"""A run's start (pure): its input read (`read_start`), its carried state recovered (L14), its
settings as the `settings` query shows them, and the input of the run that continues it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workflows.ledger import LEDGER_ID_PREFIX
from workflows.ledger.models import (
    LedgerConfig,
    LedgerInput,
    LedgerState,
    OperationPhase,
)
from workflows.ledger.records import RecoveryConflictError, compact, counters_of
from workflows.limits import id_form_problem, id_problem
from workflows.validation import (
    CARRIED_CONTEXT,
    read_start_input,
    settings_view,
)
from workflows.validation import InvalidRequest as InvalidRequest


def recover(state: LedgerState) -> None:
    """L14, before anything is sent: drop compile reservations (nothing was recorded for
    them) and rebuild claims from unresolved requests, refusing two claims on one canvas."""
    for op_id in list(state.compiling):
        record = state.operations[op_id]
        record.phase = OperationPhase.PENDING
        record.request_id = None
    state.compiling = {}
    claims: dict[str, str] = {}
    for request in state.requests.values():
        if request.phase == "resolved":
            continue
        for canvas in request.canvas_ids:
            holder = claims.get(canvas)
            if holder is not None and holder != request.id:
                raise RecoveryConflictError(
                    f"recovery_claim_conflict: canvas {canvas!r} is claimed by unresolved "
                    f"requests {holder!r} and {request.id!r}"
                )
            claims[canvas] = request.id
    state.claims = claims


@dataclass(frozen=True)
class Start:
    """What a run of the ledger starts from (see `read_start`)."""

    config: LedgerConfig
    ledger_id: str
    state: LedgerState
    # Why the start input is refused (the run fails once with it), None when it is not.
    error: str | None = None
    # A setting only a lax reading accepts (see `workflows.validation`), None when none.
    coerced: str | None = None
    # Why the ID is refused by its characters (empty, blank, spaces around it, control
    # characters), for a run started afresh; runs recorded before keep it.
    bad_id: str | None = None


def read_start(read: Callable[[], Any], workflow_id: str) -> Start:
    """The start input as `read()` decodes it (ValueError when it cannot be decoded). A bad
    input still gives settings, an ID and a state (defaults) with the `error` that names the
    field. The ledger ID defaults to the workflow ID's (`ledger:<ledger_id>`)."""
    start, error, coerced = read_start_input(
        "OperationLedger input", read, LedgerInput, LedgerConfig, "carried_state"
    )
    config = LedgerConfig.model_validate(
        {**start.model_dump(exclude={"carried_state"}), "ledger_id": start.ledger_id},
        context=CARRIED_CONTEXT if start.carried_state is not None else None,
    )
    ledger_id = start.ledger_id or workflow_id.removeprefix(LEDGER_ID_PREFIX)
    problem = id_problem("ledger_id", ledger_id)
    if problem is not None:
        error = error or f"invalid OperationLedger input: {problem}"
        ledger_id = ledger_id[:100]
    # A run continued as new carries its state: its ID was taken when it first started.
    bad_form = None if start.carried_state else id_form_problem("ledger_id", ledger_id)
    bad_id = None if bad_form is None else f"invalid OperationLedger input: {bad_form}"
    state = start.carried_state or LedgerState(ledger_id=ledger_id)
    counters_of(state)  # seeded now, from the state as it came
    return Start(config, ledger_id, state, error, coerced, bad_id)


# Start fields the `settings` query leaves out: not part of the wire contract.
INTERNAL_SETTINGS = frozenset({"continue_as_new_after_events", "local_compile", "own_retry_timers"})


def settings_of(config: LedgerConfig, ledger_id: str) -> dict[str, Any]:
    """The `settings` query: the start input's public fields, as in effect (`ledger_id` the
    ledger's, also when it came from the workflow ID)."""
    return {**settings_view(config, INTERNAL_SETTINGS), "ledger_id": ledger_id}


def next_run_input(state: LedgerState, config: LedgerConfig, ledger_id: str) -> LedgerInput:
    """The input of the run that continues this one: its settings, ID and whole state,
    compacted first.

    `local_compile` and `own_retry_timers` while off and `complete_activity` while null are
    left out (the next run re-applies their defaults), so a run continued by an upgraded worker
    still starts on a worker that does not know them yet (a rolling upgrade).
    """
    compact(state, config)
    left_out = {"ledger_id"}
    if not config.local_compile:
        left_out.add("local_compile")
    if config.complete_activity is None:
        left_out.add("complete_activity")
    if not config.own_retry_timers:
        left_out.add("own_retry_timers")
    return LedgerInput.model_validate(
        {**config.model_dump(exclude=left_out), "ledger_id": ledger_id, "carried_state": state},
        context=CARRIED_CONTEXT,
    )
