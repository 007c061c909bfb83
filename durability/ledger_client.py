"""The ledger's calls of `DurabilityClient` (docs/contract.md section 3), by ledger ID."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from temporalio.client import WorkflowHandle

from durability.checks import (
    LEDGER_ID_PREFIX,
    check,
    checked,
    ledger_start_input,
    ledger_workflow_id,
    skip_payload,
)
from durability.errors import LedgerStopped, RejectedError, summary_for
from durability.listing import Listed, list_workflows
from durability.sending import ClientCore, WithStart
from workflows.ledger import LEDGER_WORKFLOW


class EnqueueResult(TypedDict):
    """`enqueue` update result."""

    accepted: list[str]
    duplicates: list[str]
    conflicts: list[str]


# The most a message or a start input may weigh once encoded. Temporal refuses a payload over
# 2 MB, and a worker whose workflow task completion carries one (an update is echoed in its
# acceptance) fails that task again and again: the workflow is wedged. Every message the


def _enqueue_message(ledger_id: str, operations: Any, options: Any) -> WithStart:
    """What `enqueue` and `signal_enqueue` send (`options` is the start input), checked as a
    new ledger checks it (a running one also refuses a cycle through its own operations)."""
    from workflows.ledger import core as ledger_core
    from workflows.ledger.models import LedgerState

    start_input = ledger_start_input(ledger_id, options)
    if isinstance(operations, Sequence) and not isinstance(operations, str):
        operations = [dict(op) if isinstance(op, Mapping) else op for op in operations]
    payload = {"operations": operations}
    workflow_id = ledger_workflow_id(ledger_id)
    empty = LedgerState(ledger_id=ledger_id)
    checked(workflow_id, "enqueue", lambda: ledger_core.validate_enqueue(empty, payload))
    return WithStart(LEDGER_WORKFLOW, workflow_id, start_input, "enqueue", payload)


class LedgerClient(ClientCore):
    """The ledger's calls (see `DurabilityClient`)."""

    async def list_ledgers(self, query: str | None = None, limit: int = 100) -> list[Listed]:
        """Ledgers found by visibility: running ones, or those matching `query`."""
        return await list_workflows(self.temporal, LEDGER_WORKFLOW, LEDGER_ID_PREFIX, query, limit)

    def ledger_handle(self, ledger_id: str) -> WorkflowHandle[Any, Any]:
        return self.temporal.get_workflow_handle(ledger_workflow_id(ledger_id))

    async def enqueue(
        self,
        ledger_id: str,
        operations: Sequence[Mapping[str, Any]],
        *,
        options: Mapping[str, Any] | None = None,
        new: bool = False,
    ) -> EnqueueResult:
        """Enqueue (update-with-start); returns accepted, duplicate and conflicting IDs once
        recorded. `options` is the start input, read only when this call starts the ledger.
        `new` starts a new ledger under a closed (stopped) ID; without it a closed ID is
        refused."""
        result: EnqueueResult = await self._update_with_start(
            _enqueue_message(ledger_id, operations, options), new=new
        )
        return result

    async def signal_enqueue(
        self,
        ledger_id: str,
        operations: Sequence[Mapping[str, Any]],
        *,
        options: Mapping[str, Any] | None = None,
        new: bool = False,
    ) -> None:
        """Enqueue by signal-with-start: fire and forget, once checked as a new ledger checks
        it (a signal it refuses would be dropped unseen)."""
        await self._signal_with_start(_enqueue_message(ledger_id, operations, options), new=new)

    async def hold(self, ledger_id: str, token: str | None = None) -> str:
        """Stop new launches until the returned token is released. With `token` (your own),
        holding it again changes nothing: safe to send again when an answer was lost."""
        payload = {} if token is None else {"token": token}
        held: str = await self._update(ledger_workflow_id(ledger_id), "hold", payload, str)
        return held

    async def release(self, ledger_id: str, token: str) -> bool:
        """Release a held token; returns True (a token not held is refused)."""
        workflow_id = ledger_workflow_id(ledger_id)
        return bool(await self._send(workflow_id, "ledger.release", {"token": token}))

    async def signal_release(self, ledger_id: str, token: str) -> None:
        """`release` by signal, checked first (a token not held is dropped)."""
        workflow_id = ledger_workflow_id(ledger_id)
        await self._send(workflow_id, "ledger.release", {"token": token}, as_signal=True)

    async def settle(self, ledger_id: str) -> dict[str, Any]:
        """Wait until no attempt is in progress (compile, submit, query); returns whether the
        ledger is held, how many requests wait for their retry, and the snapshot's counts.
        Take a `hold` first for a quiet that lasts (nothing is launched while held)."""
        result: dict[str, Any] = await self._update(
            ledger_workflow_id(ledger_id), "settle", {}, dict
        )
        return result

    async def resume(self, ledger_id: str) -> list[str]:
        """Retry unresolved and blocked requests; returns the IDs of the operations resumed."""
        result: dict[str, list[str]] = await self._send(
            ledger_workflow_id(ledger_id), "ledger.resume", {}
        )
        return list(result.get("resumed", []))

    async def signal_resume(self, ledger_id: str) -> None:
        """`resume` by signal."""
        await self._send(ledger_workflow_id(ledger_id), "ledger.resume", {}, as_signal=True)

    async def skip(self, ledger_id: str, operation_id: str, reason: str | None = None) -> bool:
        """Resolve a stuck (pending or blocked, not in flight) operation as `skipped`.

        Its dependents then proceed. Rejected for an unknown, resolved or in-flight
        operation; `reason` (default "skipped" on the workflow side) becomes its error.
        """
        payload = skip_payload(operation_id, reason)
        return bool(await self._send(ledger_workflow_id(ledger_id), "ledger.skip", payload, bool))

    async def signal_skip(
        self, ledger_id: str, operation_id: str, reason: str | None = None
    ) -> None:
        """`skip` by signal, checked first as the ledger checks it."""
        payload = skip_payload(operation_id, reason)
        await self._send(ledger_workflow_id(ledger_id), "ledger.skip", payload, as_signal=True)

    async def stop(
        self,
        ledger_id: str,
        *,
        query_limit: int | None = None,
        query_deadline_ms: int | None = None,
    ) -> dict[str, Any]:
        """Stop dispatching, cancel in-flight requests, ask the far side once about each
        request it may have received; returns the final result: the final snapshot with
        `resolved_at_stop` (what those queries resolved) and `unknown` (what stays unknown,
        each with its frozen body; see `unknown_requests`). The ledger then completes: its
        ID takes a new ledger only with `enqueue(..., new=True)`; another `stop` raises
        LedgerStopped. `query_limit` (0..100, default 100) and `query_deadline_ms`
        (0..60000, default 60000) bound the asking; 0 asks none."""
        bound = (("query_limit", query_limit), ("query_deadline_ms", query_deadline_ms))
        payload = {key: value for key, value in bound if value is not None}
        result: dict[str, Any] = await self._send(
            ledger_workflow_id(ledger_id), "ledger.stop", payload
        )
        return result

    async def final_result(self, ledger_id: str) -> dict[str, Any]:
        """What a stopped ledger completed with (the result `stop` returned), read again:
        its `unknown` requests are what a user reconciles with the far side. A running
        ledger raises RejectedError (type "LedgerRunning"); no ledger, NotFoundError; a
        failed or terminated one, ClosedError."""
        workflow_id = ledger_workflow_id(ledger_id)
        why = await self._closed_or_missing(workflow_id)
        if why is None:
            raise RejectedError(
                f"{summary_for(workflow_id)} is running: it has a final result once stopped",
                update="final_result", workflow_id=workflow_id, type="LedgerRunning",
            )  # fmt: skip
        if not isinstance(why, LedgerStopped):
            raise why
        handle = self.temporal.get_workflow_handle(workflow_id)
        result: dict[str, Any] = await handle.result(follow_runs=False)
        return result

    async def snapshot(
        self,
        ledger_id: str,
        *,
        phase: str | None = None,
        after: int | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """One page of operations (oldest first) with counts per phase; pass the page's
        `next_after` as `after` for the next one. Filters: `phase`, `limit` (1..300)."""
        workflow_id = ledger_workflow_id(ledger_id)
        page = {
            key: value
            for key, value in (("phase", phase), ("after", after), ("limit", limit))
            if value is not None
        }
        check(workflow_id, "ledger.snapshot", page)
        args = (page,) if page else ()
        result: dict[str, Any] = await self._query(workflow_id, "snapshot", *args)
        return result

    async def configure_ledger(self, ledger_id: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Change start settings of a running ledger in place (docs/contract.md 3.3), e.g.
        `{"concurrency": 4}`; returns the settings now in effect. Requests started before
        keep theirs. Checked first as the ledger checks it (RejectedError)."""
        result: dict[str, Any] = await self._configure(
            "ledger", ledger_workflow_id(ledger_id), changes
        )
        return result

    async def signal_configure_ledger(self, ledger_id: str, changes: Mapping[str, Any]) -> None:
        """`configure` by signal, checked first on the ledger's current settings."""
        await self._configure("ledger", ledger_workflow_id(ledger_id), changes, as_signal=True)

    async def ledger_settings(self, ledger_id: str) -> dict[str, Any]:
        """The ledger's start settings in effect (the `settings` query)."""
        result: dict[str, Any] = await self._query(ledger_workflow_id(ledger_id), "settings")
        return result

    async def claims(self, ledger_id: str) -> dict[str, str]:
        result: dict[str, str] = await self._query(ledger_workflow_id(ledger_id), "claims")
        return result


def unknown_requests(final: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The requests a stopped ledger's final result lists as unknown: each may have reached
    the far side and is not resolved. `request_id`, `operation_ids`, `request` (the frozen
    body; its `idempotency_key` is what to ask the far side about), `next_action` (`query`),
    `attempt`, `last_status`, `at_stop` (what the stop's query gave: `accepted`,
    `unresolved`, `blocked`, `no_answer`, or `not_asked`). A final result recorded before
    0.1.1 has none listed: its unresolved requests are in `requests`."""
    return list(final.get("unknown") or [])
