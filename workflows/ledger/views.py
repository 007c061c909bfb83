"""What the ledger shows (pure): counts per phase, the UI's details, the `snapshot` query's page
and `settle`'s answer.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from workflows.ledger.dispatch import waiting_for
from workflows.ledger.models import (
    LedgerCounters,
    LedgerState,
    OperationRecord,
    SnapshotQuery,
)
from workflows.ledger.records import in_flight
from workflows.validation import InvalidRequest as InvalidRequest


def attempts_in_progress(state: LedgerState) -> int:
    """How many attempts are in progress (`settle` waits for none)."""
    return in_flight(state)[0]


def settle_result(state: LedgerState) -> dict[str, Any]:
    """What `settle` returns once no attempt is in progress: whether the ledger is held, how
    many requests wait for their retry, and the snapshot's counts."""
    return {
        "held": bool(state.holds),
        "waiting": sum(1 for r in state.requests.values() if r.phase == "in_flight" and r.waiting),
        "counts": counts(state),
    }


def phase_counts(state: LedgerState) -> dict[str, int]:
    """How many operations are in each phase (only phases that have some)."""
    counts: dict[str, int] = {}
    for record in state.operations.values():
        counts[record.phase] = counts.get(record.phase, 0) + 1
    return dict(sorted(counts.items()))


def details(state: LedgerState) -> str:
    """Markdown for the UI's "Current Details": operations per phase, claims and holds."""
    counts = ", ".join(f"{count} {phase}" for phase, count in phase_counts(state).items())
    head = "**Stopped.** " if state.stopped else "**Held.** " if state.holds else ""
    return (
        f"{head}Operations: {counts or 'none'}  \n"
        f"Canvases claimed: {len(state.claims)}; holds: {len(state.holds)}"
    )


def counts(state: LedgerState) -> dict[str, Any]:
    """Operations and requests per phase, how many resolved IDs are remembered, and how many
    operations were resolved since the ledger began."""
    requests: Counter[str] = Counter(q.phase for q in state.requests.values())
    return {
        "operations": phase_counts(state),
        "requests": dict(sorted(requests.items())),
        "forgotten": len(state.forgotten),
        "resolved_total": state.resolved_total,
    }


def snapshot(state: LedgerState, query: SnapshotQuery | None = None) -> dict[str, Any]:
    """The `snapshot` query: one page of operations in sequence order with their requests,
    the counts per phase, claims and holds. `next_after` is the cursor of the next page."""
    query = query or SnapshotQuery()
    matching = (
        r
        for r in state.operations.values()
        if (query.phase is None or r.phase == query.phase)
        and (query.after is None or r.sequence > query.after)
    )
    page: list[OperationRecord] = []
    more = False
    for record in matching:
        if len(page) == query.limit:
            more = True
            break
        page.append(record)
    request_ids = {r.request_id for r in page if r.request_id is not None}
    return {
        "ledger_id": state.ledger_id,
        "stopped": state.stopped,
        "held": bool(state.holds),
        "holds": len(state.holds),
        "hold_tokens": list(state.holds),
        "dropped_signals": state.dropped_signals,
        "signal_conflicts": state.signal_conflicts,
        "counts": counts(state),
        "counters": (state.counters or LedgerCounters()).model_dump(mode="json"),
        "operations": [
            {
                "id": r.intent.id,
                "operation_type": r.intent.operation_type,
                "sequence": r.sequence,
                "phase": r.phase,
                "blockers": list(r.blockers),
                "waiting_for": waiting_for(state, r),
                "request_id": r.request_id,
                "outcome": r.outcome,
                "error": r.error,
            }
            for r in page
        ],
        "next_after": page[-1].sequence if more else None,
        "requests": [
            {
                "id": q.id,
                "operation_ids": list(q.operation_ids),
                "phase": q.phase,
                "attempt": q.attempt,
                "retry_at": q.retry_at,
                "retry_action": q.retry_action,
                "waiting": q.waiting,
                "canvas_ids": list(q.canvas_ids),
                "blocker": q.blocker,
                "last_status": q.last_status,
            }
            for q in state.requests.values()
            if q.id in request_ids
        ],
        "claims": dict(state.claims),
    }
