"""The stop protocol (pure): `stop` cancels what is in flight, then asks the far side once (a
query with the frozen body and its key) about each request whose submit may have reached it,
within a bound: at most `query_limit` (<= MAX_STOP_QUERIES) requests, oldest operation
first, within `concurrency` and the lanes (L4), each with the activity timeout, all within
`query_deadline_ms` (<= MAX_STOP_QUERY_DEADLINE_MS). `applied`/`rejected` resolves the
request; whatever stays unknown is listed in the final result's `unknown` with its frozen
body.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from typing import Any

from workflows.ledger.dispatch import protocol_supported, request_input
from workflows.ledger.models import (
    FrozenRequestInput,
    LedgerConfig,
    LedgerState,
    RequestAction,
    RequestPhase,
    RequestRecord,
    RequestReport,
    StopInput,
)
from workflows.ledger.records import (
    INTERPRETER_UNAVAILABLE,
    NEVER_LAUNCHED,
    bounded_status,
    fits,
    is_stale,
    request_sequence,
)
from workflows.ledger.reports import record_finished
from workflows.ledger.request_step import normalize_status
from workflows.ledger.views import snapshot
from workflows.validation import InvalidRequest as InvalidRequest

# ---------------------------------------------------------------- stop: forget nothing
#
# `stop` cancels what is in flight, then asks the far side once (a query with the frozen body
# and its key) about each request whose submit may have reached it, within a bound: at most
# `query_limit` (<= MAX_STOP_QUERIES) requests, oldest operation first, within
# `concurrency` and the lanes, each with the activity timeout, all within `query_deadline_ms`
# (<= MAX_STOP_QUERY_DEADLINE_MS). `applied`/`rejected` resolves the request; whatever stays
# unknown is listed in the final result's `unknown` with its frozen body.

# Stop answers that are not outcomes: the query ended without an answer (transport error,
# timeout, its workflow failed, the deadline), or the far side answered `blocked`.
NO_ANSWER = "no_answer"
NOT_ASKED = "not_asked"
# The final result's `unknown` list carries each request's frozen body and last status while
# the list stays under this many bytes as JSON; past it, entries name the request, its
# operations, attempt and next action only (`request_left_out`): the body is then read from
# the start input of the request's workflow (`request:<ledger_id>:<request_id>`). With the
# snapshot page (at most 200 operations and their requests) the final result stays well under
# 2 MB (tests/ledger/test_ledger_stop_core.py measures the worst cases).
MAX_UNKNOWN_BYTES = 384 * 1024


def may_have_reached_far_side(request: RequestRecord) -> bool:
    """Whether a request's submit may have reached the far side, so its outcome is unknown
    until asked: every unresolved request but one blocked at freeze because its protocol
    version is unsupported (`request_interpreter_unavailable` with no attempt), whose body
    was never handed to a request workflow. A request in flight at stop counts, mid-submit
    included (its first attempt may have been sent without a report yet), and so does one
    blocked (a `blocked` answer, or its workflow failed) or frozen by a resume. Operations
    pending, held, compiling or blocked at compile have no request at all: never asked."""
    if request.phase == "resolved" or request.launch == NEVER_LAUNCHED:
        return False
    # Blocked at freeze: no attempt, and nothing since made its next action a query (a loop
    # interrupted mid-attempt, `request_interrupted`, would have).
    return not (
        request.attempt == 0
        and request.blocker == INTERPRETER_UNAVAILABLE
        and request.retry_action == RequestAction.SUBMIT
    )


def unknown_candidates(state: LedgerState) -> list[str]:
    """The requests `may_have_reached_far_side`, oldest operation first."""
    candidates = [q for q in state.requests.values() if may_have_reached_far_side(q)]
    candidates.sort(key=lambda q: request_sequence(state, q))
    return [q.id for q in candidates]


def plan_stop_queries(
    state: LedgerState, bound: StopInput, config: LedgerConfig | None = None
) -> list[str]:
    """The requests `stop` asks, in order: the first `query_limit` candidates (none when
    the deadline is 0), leaving out those of a protocol version `config` no longer
    supports (L11: never sent; listed `not_asked`). Called once nothing is in flight."""
    if bound.query_deadline_ms == 0:
        return []
    candidates = unknown_candidates(state)
    if config is not None:
        candidates = [r for r in candidates if protocol_supported(config, state.requests[r])]
    return candidates[: bound.query_limit]


def stop_queries_to_start(
    state: LedgerState,
    queue: list[str],
    asking: Collection[str],
    config: LedgerConfig,
    deadline_passed: bool,
    lanes_apply: Callable[[], bool] = lambda: True,
) -> list[str]:
    """Which of the planned final queries start now, in `queue` order: none once the
    deadline passed, else those that `concurrency` and their type's lane admit, counting the
    final queries `asking` (L4: a final query is an attempt in progress at the far side). One
    its lane refuses stays queued and the next may go. Removes the chosen from `queue`.
    `lanes_apply()` is asked only when a lane holds one back (a shell's patch: a history
    recorded before lanes bounded final queries starts them as it did)."""
    if deadline_passed:
        return []
    by_type: Counter[str] = Counter(_type_of(state, r) for r in asking)
    total = len(asking)
    chosen: list[str] = []
    for request_id in queue:
        if total >= config.concurrency:
            break
        operation_type = _type_of(state, request_id)
        if not fits(config, total, by_type, operation_type) and lanes_apply():
            continue
        chosen.append(request_id)
        by_type[operation_type] += 1
        total += 1
    queue[:] = [r for r in queue if r not in chosen]
    return chosen


def _type_of(state: LedgerState, request_id: str) -> str:
    request = state.requests.get(request_id)
    return request.operation_type if request is not None else ""


def cancel_at_stop(state: LedgerState, running_here: Iterable[str]) -> list[str]:
    """Requests in flight at `stop` that this run of the ledger did not start (an earlier run,
    before continue-as-new): the shell cancels them by workflow ID and records each frozen
    (`request_interrupted`) once its last report arrived (`awaiting_final_reports`; a cancel
    only asks, the request may still be sending) or the wait for it timed out."""
    local = set(running_here)
    chosen = [r.id for r in state.requests.values() if r.phase == "in_flight" and r.id not in local]
    state.awaiting_final_reports = sorted(set(state.awaiting_final_reports) | set(chosen))
    return chosen


def cancel_by_id(state: LedgerState, request_id: str) -> None:
    """The shell cancels a request an earlier run launched (no handle: by workflow ID, when
    the core blocked it): a `stop` from now on waits for its last report too."""
    if request_id not in state.awaiting_final_reports:
        state.awaiting_final_reports.append(request_id)


def final_report_arrived(state: LedgerState, request_id: str) -> bool:
    """A request's last report arrived (`request_ended`: a cancelled request sends it after
    any other report, a `request_finished` included), or its workflow was found closed:
    `stop` no longer waits for it. False when it was not awaited."""
    if request_id not in state.awaiting_final_reports:
        return False
    state.awaiting_final_reports.remove(request_id)
    return True


def stop_waits_for_reports(state: LedgerState) -> bool:
    """Whether `stop` still waits for the last report of a request it cancelled by ID."""
    return bool(state.awaiting_final_reports)


def final_reports_given_up(state: LedgerState) -> list[str]:
    """`stop`'s wait for last reports timed out (a request terminated from outside never
    reports): those still awaited are given up, and returned."""
    given_up, state.awaiting_final_reports = state.awaiting_final_reports, []
    return given_up


def begin_stop_query(state: LedgerState, request_id: str) -> bool:
    """The request's final query starts: it is in flight (so `skip` refuses it) under a new
    launch (a late report of the loop `stop` cancelled is stale), and what comes next for it
    is a query, asked now. False (nothing changes, nothing is to be asked) when the request
    is no longer one whose outcome is unknown (resolved, or gone)."""
    request = state.requests.get(request_id)
    if request is None or request.phase == "in_flight" or not may_have_reached_far_side(request):
        return False
    request.phase = RequestPhase.IN_FLIGHT
    request.launch += 1
    request.retry_at = None
    request.retry_action = RequestAction.QUERY
    return True


def stop_query_input(
    state: LedgerState, config: LedgerConfig, ledger_id: str, request_id: str
) -> FrozenRequestInput:
    """The start input of a request's final query: its `FrozenRequest` in `final_query`
    mode (one query with the frozen body, no retry, no wait for its retry time)."""
    return request_input(state, config, ledger_id, request_id).model_copy(
        update={"final_query": True, "next_action": RequestAction.QUERY, "not_before": None}
    )


def record_stop_query(state: LedgerState, report: RequestReport) -> str | None:
    """A final query answered: `applied`/`rejected` resolves the request (claims released),
    `blocked` blocks it, anything else leaves it as it was (`_phase_before_stop_query`)
    with that status; its next action stays `query`. Returns what it gave (also kept in
    `stop_answers`), None for a report of no request being asked."""
    request = state.requests.get(report.request_id)
    if request is None or request.phase != "in_flight" or is_stale(request, report):
        return None
    status = normalize_status(report.status)
    if report.phase in ("resolved", "blocked"):
        record_finished(state, report.model_copy(update={"next_action": RequestAction.QUERY}))
        answer = status.outcome.value if report.phase == "resolved" else "blocked"
    else:
        request.attempt = report.attempt
        request.last_status = bounded_status(report.status)
        request.phase = _phase_before_stop_query(request)
        answer = status.outcome.value
    state.stop_answers[request.id] = answer
    return answer


def stop_query_unanswered(state: LedgerState, request_id: str) -> None:
    """A final query ended without an answer (its workflow failed or was cancelled, the
    deadline): the request goes back to frozen, its next action `query`, its last status
    the one it had."""
    request = state.requests.get(request_id)
    if request is None or request.phase != "in_flight":
        return
    request.phase = _phase_before_stop_query(request)
    state.stop_answers[request_id] = NO_ANSWER


def _phase_before_stop_query(request: RequestRecord) -> RequestPhase:
    """A request its final query left unresolved: blocked again when it was blocked (its
    blocker is kept), else frozen, as `stop` leaves a request it cancelled."""
    return RequestPhase.BLOCKED if request.blocker is not None else RequestPhase.FROZEN


def final_result(state: LedgerState) -> dict[str, Any]:
    """What a stopped ledger completes with: its snapshot (first page), the requests its
    final queries resolved (`resolved_at_stop`) and every request whose outcome stays
    unknown (`unknown`, see `unknown_requests`)."""
    result = snapshot(state)
    resolved: list[dict[str, Any]] = []
    for request_id, answer in state.stop_answers.items():
        request = state.requests.get(request_id)
        if request is not None and request.phase == "resolved":
            resolved.append(
                {
                    "request_id": request_id,
                    "operation_ids": list(request.operation_ids),
                    "outcome": answer,
                }
            )
    result["resolved_at_stop"] = resolved
    result["unknown"] = unknown_requests(state)
    return result


def unknown_requests(state: LedgerState) -> list[dict[str, Any]]:
    """Each request whose submit may have reached the far side and is not resolved, oldest
    operation first: `request_id`, `operation_ids`, `request` (the frozen body, with its
    `idempotency_key`), `next_action` (`query`: ask the far side by its key), `attempt`,
    `last_status`, and `at_stop`: what the final query gave (`accepted`, `unresolved`,
    `blocked`, `no_answer`) or `not_asked` (past the limit or the deadline). Bodies and
    statuses are kept while the list stays under MAX_UNKNOWN_BYTES, then left out."""
    entries: list[dict[str, Any]] = []
    used = 2
    for request_id in unknown_candidates(state):
        request = state.requests[request_id]
        entry: dict[str, Any] = {
            "request_id": request.id,
            "operation_ids": list(request.operation_ids),
            "request": request.body,
            "next_action": RequestAction.QUERY.value,
            "attempt": request.attempt,
            "last_status": request.last_status,
            "at_stop": state.stop_answers.get(request.id, NOT_ASKED),
        }
        size = len(json.dumps(entry, separators=(",", ":"), default=str)) + 1
        if used + size > MAX_UNKNOWN_BYTES:
            entry.update(request=None, last_status=None, request_left_out=True)
            size = len(json.dumps(entry, separators=(",", ":"), default=str)) + 1
        used += size
        entries.append(entry)
    return entries
