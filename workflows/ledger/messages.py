"""The ledger's messages, each declared once (`workflows.catalog`): `OperationLedger`'s
(`LEDGER_MESSAGES`) and its `FrozenRequest` children's (`REQUEST_MESSAGES`).

`OperationLedgerWorkflow` registers its Temporal handlers from `LEDGER_MESSAGES`
(`workflows.handlers`). The ledger's core reads each payload itself, with the state it is
checked against (`workflows.ledger.intake`): what it accepts is what the payload model here
accepts, plus the state's own checks (a stopped ledger, a token not held, a cycle, ...).
Signals and updates share names (`enqueue`, `release`, `resume`, `skip`, `configure`).
"""

from __future__ import annotations

from workflows.catalog import Catalog, Kind, Message, kinds
from workflows.ledger.models import (
    EmptyInput,
    EnqueueInput,
    GrantInput,
    HoldInput,
    LedgerConfig,
    ReleaseInput,
    RequestReport,
    SkipInput,
    SnapshotQuery,
    StopInput,
)

LEDGER_MESSAGES = Catalog(
    (
        Message(
            "enqueue",
            "Record intents (L2): an ID already known is a duplicate, or a conflict when sent "
            "with another intent; neither is recorded. Refused: malformed intents, IDs "
            "repeated in the batch, dependency cycles, operations that could never dispatch "
            "(no participants, a type that is not participant-free), a batch past the state "
            "budget. As a signal its conflicts are counted (`signal_conflicts`) and logged.",
            kinds(Kind.SIGNAL, Kind.UPDATE),
            EnqueueInput,
            returns="the accepted, duplicate and conflicting IDs, once recorded",
            wakes=True,
        ),
        Message(
            "hold",
            "Stop new launches until the returned token is released (L12): the caller's own "
            '(`{"token": T}`, idempotent) or one made up here (`{}`); refused on a stopped '
            "ledger and past the bound on outstanding tokens.",
            kinds(Kind.UPDATE),
            HoldInput,
            returns="the hold token",
        ),
        Message(
            "release",
            "Release one hold token. As an update the token must be held; as a signal a "
            "token not held is dropped.",
            kinds(Kind.SIGNAL, Kind.UPDATE),
            ReleaseInput,
            returns="whether the token was held",
            wakes=True,
        ),
        Message(
            "settle",
            "Wait until no attempt is in progress (compile, submit, query), then return the "
            "counts; `{}` on a running ledger.",
            kinds(Kind.UPDATE),
            EmptyInput,
            returns="whether the ledger is held, with the counts per phase",
        ),
        Message(
            "resume",
            "Retry blocked requests with their frozen body and re-examine every operation "
            "(L13); `{}` on a running ledger.",
            kinds(Kind.SIGNAL, Kind.UPDATE),
            EmptyInput,
            returns='`{"resumed": [operation IDs]}`',
            wakes=True,
        ),
        Message(
            "skip",
            "Resolve a stuck operation as `skipped`: known, unresolved, not in flight; its "
            "dependents proceed.",
            kinds(Kind.SIGNAL, Kind.UPDATE),
            SkipInput,
            returns="true",
            wakes=True,
        ),
        Message(
            "configure",
            "Change start settings in place: grants, launches and compiles after it take "
            "them, requests launched before keep what their input says, the next run starts "
            "with them. Refused: an empty, unknown, fixed or out-of-bounds setting. Its "
            "validation reads only the settings and whether the ledger is stopped, which no "
            "completion changes: the answer is the same whatever a cold worker applies in "
            "the same activation.",
            kinds(Kind.SIGNAL, Kind.UPDATE),
            LedgerConfig,
            returns="the settings now in effect",
            wakes=True,
        ),
        Message(
            "stop",
            "Stop dispatching, cancel what is in flight, ask the far side about every "
            'request it may have received, complete with the final result; `{}` or `{"'
            'query_limit"?, "query_deadline_ms"?}`, once.',
            kinds(Kind.UPDATE),
            StopInput,
            returns="the ledger's final result",
        ),
        Message(
            "request_progress",
            "A non-final attempt of a frozen request (attempt, retry time, next action).",
            kinds(Kind.SIGNAL),
            RequestReport,
            wakes=True,
            internal=True,
        ),
        Message(
            "request_finished",
            "A frozen request resolved or blocked (its end, reported by this signal or its "
            "child's result, whichever comes first).",
            kinds(Kind.SIGNAL),
            RequestReport,
            wakes=True,
            internal=True,
        ),
        Message(
            "request_ended",
            "The last report of a frozen request that was cancelled: it sends nothing after.",
            kinds(Kind.SIGNAL),
            RequestReport,
            internal=True,
        ),
        Message(
            "snapshot",
            "One page of operations with their requests, counts per phase, claims, holds. "
            'Optional argument: `{"phase", "after", "limit"}`.',
            kinds(Kind.QUERY),
            SnapshotQuery,
            returns="the page and the counts",
            query_takes_payload=True,
        ),
        Message(
            "settings",
            "The start settings in effect (as changed by `configure`).",
            kinds(Kind.QUERY),
            returns="the settings",
        ),
        Message(
            "claims",
            "The canvases claimed by unresolved requests.",
            kinds(Kind.QUERY),
            returns="`{canvas_id: request_id}`",
        ),
    )
)

REQUEST_MESSAGES = Catalog(
    (
        Message(
            "grant",
            "The ledger's slot for a waiting request's next attempt (L4): this launch, after "
            "this many attempts (an older grant is stale); a bad one is logged and dropped.",
            kinds(Kind.SIGNAL),
            GrantInput,
            internal=True,
        ),
    )
)
