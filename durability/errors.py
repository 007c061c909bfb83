"""The errors durability's client and CLI raise, under one base: `DurabilityError`.

    try:
        await client.set_schedule("acct-42", "@hourly", version=3)
    except DurabilityError as error:
        print(f"not done: {error}")

Every error the client raises for a refusal, a missing or closed workflow, a missing worker,
an unanswered update or query, or a bad setting derives from it: `RejectedError`,
`NotFoundError`, `ClosedError` (and `LedgerStopped`), `UnansweredError`, `InvalidQueryError`,
`BatchBusyError`, `NoWorkerError` and `ConfigurationError`. They are importable from here and
from `durability.client` (`ConfigurationError` from `durability.settings`, where it is
defined). An error of the connection itself (Temporal unreachable, a refused call) is
Temporal's own `RPCError`.

This module imports nothing heavy (`ConfigurationError`, defined in `durability.settings`, is
loaded on first use).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any


class DurabilityError(Exception):
    """The base of every error durability's client and CLI raise on purpose."""


class NoWorkerError(DurabilityError):
    """No worker polls the task queue a call would wait on, so nothing would answer it: the
    call was not sent (nothing was created or changed). `task_queue` names the queue.

    Start a worker on that queue (`make run`, `python worker.py` with
    `DURABILITY_TASK_QUEUE`), or send a signal instead, which waits for no worker."""

    def __init__(self, task_queue: str, what: str) -> None:
        super().__init__(
            f"no worker polls task queue {task_queue!r}, so nothing would answer: {what}; "
            "start a worker on that queue (or check the task queue's name)"
        )
        self.task_queue = task_queue


class RejectedError(DurabilityError):
    """A message or start input was refused, by the workflow's validator or, before anything
    was sent, by this client with the workflow's own rules; nothing was recorded or created.

    `type` is the refusal's kind, as the workflow names it (`InvalidRequest`,
    `NoLiveSchedule`, `LedgerStopped`, `InvalidStartInput`, ...), when known; `former_type`
    the name the same refusal had in 0.1.0 where it differs (`LedgerInputError`,
    `InvalidScheduleInput`, `InvalidLedgerInput`), kept for one release.
    """

    def __init__(
        self,
        message: str,
        *,
        update: str,
        workflow_id: str,
        type: str | None = None,
        former_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.update = update
        self.workflow_id = workflow_id
        self.type = type
        self.former_type = former_type


class NotFoundError(DurabilityError):
    """No schedule or ledger workflow has that ID; nothing was created."""

    def __init__(self, workflow_id: str) -> None:
        super().__init__(f"no such {summary_for(workflow_id)}")
        self.workflow_id = workflow_id


class ClosedError(DurabilityError):
    """The schedule or ledger workflow of that ID is closed (completed, failed, cancelled,
    terminated or timed out): it answers no message, and its last state is not live.

    `status` is the closed status ("failed", ...), `reason` why, when Temporal recorded one.
    A with-start (`set_schedule`, `enqueue`) refuses a closed ID unless called with
    `new=True`, which starts a new workflow under it, without the old one's state.
    """

    def __init__(
        self, workflow_id: str, status: str, reason: str | None, *, start_refused: bool = False
    ) -> None:
        super().__init__(workflow_id, status, reason)
        self.workflow_id = workflow_id
        self.status = status
        self.reason = reason
        # A with-start was refused: the ID is taken by the closed workflow.
        self.start_refused = start_refused

    @property
    def closed(self) -> str:
        """`schedule acct-42 is closed (terminated: <reason>)`."""
        because = f": {self.reason}" if self.reason else ""
        return f"{summary_for(self.workflow_id)} is closed ({self.status}{because})"

    # The refusal's kind, as `RejectedError.type` names one: None for a closed workflow in
    # general, "LedgerStopped" for a ledger that completed by `stop` (`LedgerStopped`).
    type: str | None = None
    # How a caller asks for a new workflow under the ID (the CLI says `--new`).
    NEW_ARGUMENT = "new=True"

    def __str__(self) -> str:
        return self.sentence(self.NEW_ARGUMENT)

    def sentence(self, new_argument: str) -> str:
        """The refusal as one sentence, naming how to start a new one (`new_argument`)."""
        return self.closed + (f"; {new_argument} starts a new one" if self.start_refused else "")


class LedgerStopped(ClosedError):
    """The ledger of that ID completed by `stop` (a ledger completes no other way): it takes
    no message, and a with-start (`enqueue`, `signal_enqueue`) is refused unless called with
    `new=True`, which starts a new, empty ledger under the ID: it knows none of the stopped
    one's operations, requests or IDs. `type` is "LedgerStopped". `final_result` reads what
    the stopped one completed with, its `unknown` requests included."""

    type = "LedgerStopped"

    @property
    def closed(self) -> str:
        """`ledger doc-7 is stopped (its last run completed by stop)`."""
        return f"{summary_for(self.workflow_id)} is stopped (its last run completed by stop)"

    def sentence(self, new_argument: str) -> str:
        if not self.start_refused:
            return self.closed
        from workflows.ledger import LEDGER_ID_PREFIX

        ledger_id = self.workflow_id.removeprefix(LEDGER_ID_PREFIX)
        return (
            f"{self.closed}: enqueue refused, nothing was created; {new_argument} starts a "
            f"new, empty ledger under ID {ledger_id!r}, without the stopped one's operations, "
            "requests or IDs (reconcile its unknown requests first: docs/contract.md, stop)"
        )


def closed_error(
    workflow_id: str, status: str, reason: str | None, *, start_refused: bool = False
) -> ClosedError:
    """The ClosedError for a closed workflow: `LedgerStopped` for a ledger that completed."""
    from workflows.ledger import LEDGER_ID_PREFIX

    if workflow_id.startswith(LEDGER_ID_PREFIX) and status == "completed":
        return LedgerStopped(workflow_id, status, reason, start_refused=start_refused)
    return ClosedError(workflow_id, status, reason, start_refused=start_refused)


class UnansweredError(DurabilityError, TimeoutError):
    """No answer to an update within the client's `update_timeout`, or to a query within its
    `query_timeout`. `update` or `query` names the message; the other is None.

    An update may or may not have taken effect: read the state before sending it again.
    Temporal can leave an update completed in the workflow task that continues as new
    unanswered (temporalio/temporal#6375); without a bound its caller would wait forever.
    A query changes nothing: it went unanswered because no worker took the workflow's task
    in time (its worker died or restarts, or every worker is busy).
    """

    def __init__(
        self,
        *,
        workflow_id: str,
        timeout: timedelta,
        update: str | None = None,
        query: str | None = None,
        last_error: str | None = None,
    ) -> None:
        seconds = f"{timeout.total_seconds():g} s"
        if query is not None:
            said = f" (Temporal's last answer: {last_error})" if last_error else ""
            message = (
                f"no answer to the {query!r} query of {workflow_id!r} within {seconds}{said}; "
                "a query changes nothing: check that a worker runs the workflow's task queue, "
                "then ask again"
            )
        else:
            message = (
                f"no answer to the {update!r} update of {workflow_id!r} within {seconds}; it "
                "may or may not have taken effect: read the state before sending it again"
            )
        super().__init__(message)
        self.update = update
        self.query = query
        self.workflow_id = workflow_id


def summary_for(workflow_id: str) -> str:
    """The UI summary of a workflow started by this client: "schedule acct-42"."""
    kind, _, business_id = workflow_id.partition(":")
    return f"{kind} {business_id}"


class InvalidQueryError(DurabilityError, ValueError):
    """A bulk call's visibility query was refused, by this client or by Temporal; nothing was
    sent. `query` is the caller's query, `reason` why."""

    def __init__(self, query: str, reason: str) -> None:
        super().__init__(f"query {query!r:.300} refused: {reason}")
        self.query = query
        self.reason = reason


class BatchBusyError(DurabilityError):
    """Temporal refused to start the batch job: the namespace already runs as many as it
    allows (`frontend.MaxConcurrentBatchOperationPerNamespace`, 1 by default). Nothing was
    sent; start it again once the running job has closed (`temporal batch list`)."""


# Where the other errors are defined; `from durability.errors import ConfigurationError` loads it.
_DEFINED_IN = {"ConfigurationError": "durability.settings"}

__all__ = [
    "BatchBusyError",
    "ClosedError",
    "DurabilityError",
    "InvalidQueryError",
    "LedgerStopped",
    "NoWorkerError",
    "NotFoundError",
    "RejectedError",
    "UnansweredError",
    "closed_error",
    "summary_for",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    module = _DEFINED_IN.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
