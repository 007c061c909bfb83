"""Every message `DurabilitySchedule` takes, declared once (pure; see `workflows.catalog`).

The shell (`workflows.schedule.workflow`) registers its Temporal handlers from
`SCHEDULE_MESSAGES`; each payload is read strictly by its model (`workflows.schedule.models`),
one error format for every message: `invalid <name> payload: field: msg (got value)`. (The
`ScheduledRun` child takes one internal signal without a payload, `REPORT_BY_SIGNAL`.)
"""

from __future__ import annotations

from typing import Any

from workflows.catalog import Catalog, Kind, Message, kinds
from workflows.schedule.models import (
    NEXT_OCCURRENCE,
    NOW_MS,
    RUN_ACKNOWLEDGED_SIGNAL,
    RUN_SETTLED_SIGNAL,
    BackfillRequest,
    CancelRequest,
    DescribeQuery,
    PauseRequest,
    RedeliverRequest,
    RunAcknowledged,
    RunSettled,
    SetRequest,
)

SIGNAL, UPDATE, QUERY, WITH_START = Kind.SIGNAL, Kind.UPDATE, Kind.QUERY, Kind.WITH_START

SCHEDULE_MESSAGES = Catalog(
    (
        Message(
            "set",
            "Store a version of the schedule: its expression, jitter and params (S2, S3). As "
            "a signal, a bad payload is logged, counted and dropped.",
            kinds(SIGNAL, UPDATE, WITH_START),
            SetRequest,
            returns="whether the version was stored",
            wakes=True,
        ),
        Message(
            "cancel",
            "Cancel the schedule (at `version`, or whatever is stored): no tick fires after it "
            "(S5).",
            kinds(SIGNAL, UPDATE),
            CancelRequest,
            returns="whether a schedule was live",
            wakes=True,
            core_method="cancel",
        ),
        Message(
            "configure",
            "Change start settings in place: runs, deliveries and lifecycle calls started from "
            "now on take them, those going keep theirs (docs/contract.md 2.2).",
            kinds(SIGNAL, UPDATE),
            returns="the settings now in effect",
            wakes=True,
        ),
        Message(
            "pause",
            "Stop ticks (runs already recorded go on), with an optional `note` saying why.",
            kinds(SIGNAL, UPDATE),
            PauseRequest,
            returns="whether it was running",
            wakes_first=True,
        ),
        Message(
            "unpause",
            "Tick again from now; ticks missed while paused are skipped. Refused when the "
            "schedule's `next_occurrence` fails on its expression (S7).",
            kinds(SIGNAL, UPDATE),
            returns="whether it was paused",
            wakes_first=True,
        ),
        Message(
            "trigger",
            "Record a run now, outside the expression (refused with no live schedule, or no "
            "room for its run).",
            kinds(UPDATE),
            returns="the run's scheduled_time",
            wakes=True,
        ),
        Message(
            "backfill",
            "Record runs for the occurrences in a past range [start_at, end_at).",
            kinds(UPDATE),
            BackfillRequest,
            returns="the scheduled times of the runs recorded",
            wakes=True,
        ),
        Message(
            "redeliver",
            "Deliver a dead-lettered outcome again, as it was, under the same retry policy; "
            "the letter leaves `dead_letters` once delivered.",
            kinds(UPDATE),
            RedeliverRequest,
            returns="true, at once",
        ),
        Message(
            RUN_SETTLED_SIGNAL,
            "A run finished: free its slot and start the next queued run.",
            kinds(SIGNAL),
            RunSettled,
            internal=True,
        ),
        Message(
            RUN_ACKNOWLEDGED_SIGNAL,
            "A handed-over run's outcome was delivered (or dead-lettered): forget the run.",
            kinds(SIGNAL),
            RunAcknowledged,
            internal=True,
        ),
        Message(
            "get",
            "The live schedule, or None.",
            kinds(QUERY),
            returns="object or null",
            core_method="get",
        ),
        Message(
            "describe",
            "The live schedule, `paused`, the last runs that ended, the next fire times and "
            'the counters; `{"runs": n, "next": n}` sizes the lists.',
            kinds(QUERY),
            DescribeQuery,
            returns="object",
            query_takes_payload=True,
            core_method="describe",
        ),
        Message(
            "runs", "Every run not yet forgotten.", kinds(QUERY), returns="list", core_method="runs"
        ),
        Message(
            "paused",
            "Whether ticks are paused.",
            kinds(QUERY),
            returns="boolean",
            core_method="paused",
        ),
        Message(
            "pause_note",
            "Why the schedule is paused (`pause`'s note, or the failed run that paused it "
            "under `pause_on_failure`), or None.",
            kinds(QUERY),
            returns="string or null",
            core_method="pause_note",
        ),
        Message(
            "skipped_ticks",
            "Ticks skipped: queue full, overlap policy, state budget or catchup window.",
            kinds(QUERY),
            returns="integer",
            core_method="skipped_ticks",
        ),
        Message(
            "dead_letters",
            "Outcomes whose delivery was given up, oldest first.",
            kinds(QUERY),
            returns="list",
            core_method="dead_letters",
        ),
        Message(
            "settings",
            "The start settings in effect (as changed by `configure`).",
            kinds(QUERY),
            returns="object",
            core_method="settings_view",
        ),
        Message(
            "dropped_signals",
            "How many malformed signals were dropped.",
            kinds(QUERY),
            returns="integer",
            core_method="dropped_signals",
        ),
    )
)


def read_payload(
    name: str, raw: object, now_ms: int | None = None, next_occurrence: Any = None
) -> Any:
    """`raw` read as the payload of the schedule's message `name`, at `now_ms` (a `backfill`
    range must be past) with `next_occurrence` (a `set` expression must parse with it);
    InvalidRequest naming the field and the value otherwise."""
    context = {NOW_MS: now_ms, NEXT_OCCURRENCE: next_occurrence}
    return SCHEDULE_MESSAGES[name].parse(raw, context)
