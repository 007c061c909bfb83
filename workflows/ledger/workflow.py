"""`OperationLedger`: the Temporal shell around `workflows.ledger.core`, which decides.

It reads as catalog -> core -> effects: its handlers are registered from the ledger's catalog
(`workflows.ledger.messages`); the core checks and applies each message; the shell carries out
what the core decides (`launches.py`: compiles, `FrozenRequest` children and their reports;
`stopping.py`: `stop`'s protocol). A task that applies a state-changing completion always
sends a command (`workflows.kernel`).
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows import SANDBOXED, metrics
    from workflows.catalog import Message
    from workflows.handlers import CatalogShell, handlers_from
    from workflows.kernel import (
        NO_INPUT,
        ShellKernel,
        decode_start_input,
        history_long,
        now_ms,
        read_message,
        rejected_as,
    )
    from workflows.ledger import LEDGER_WORKFLOW, core
    from workflows.ledger.drain import Drain
    from workflows.ledger.launches import Dispatcher, apply_final_report, launch_gate
    from workflows.ledger.messages import LEDGER_MESSAGES
    from workflows.ledger.models import EnqueueInput, EnqueueResult, LedgerConfig, SkipInput
    from workflows.ledger.request import FrozenRequestWorkflow
    from workflows.ledger.stopping import stop_ledger
    from workflows.search_attributes import LEDGER_ID

# Continue-as-new at this many events even if Temporal has not suggested it yet.
SAFETY_CAP_EVENTS = 10_000
# Asked by an `enqueue` signal that drops an operation which could never dispatch, where a
# run recorded without it blocked such operations.
ENQUEUE_PARTICIPANTS_PATCH = "ledger-refuse-no-participants"
# Asked where a message changed the counts per phase without a completion: the status memo
# `durability ledger list` reads is published then too.
PUBLISH_COUNTS_PATCH = "ledger-publish-phase-counts"

__all__ = ["FrozenRequestWorkflow", "OperationLedgerWorkflow"]


@workflow.defn(name=LEDGER_WORKFLOW, sandboxed=SANDBOXED)
@handlers_from(LEDGER_MESSAGES)
class OperationLedgerWorkflow(CatalogShell):
    """One ledger per `ledger_id` (L1): records intents and drives them to frozen requests."""

    @workflow.init
    def __init__(self, input: RawValue = NO_INPUT) -> None:
        # Decoded and validated here, not by the converter: a start input that fails to decode
        # would fail every workflow task; this way the ledger fails once, naming the field.
        start = core.read_start(lambda: decode_start_input(input), workflow.info().workflow_id)
        self._start = start
        self._config, self._ledger_id, self._state = start.config, start.ledger_id, start.state
        self._recovery_error: str | None = None
        try:
            core.recover(self._state)  # L14: before anything is sent
        except core.RecoveryConflictError as error:
            self._recovery_error = str(error)
        self._kernel = ShellKernel(
            core.InvalidRequest,
            lambda: core.count_dropped_signal(self._state),
            core.FORMER_REFUSAL_TYPES,
        )
        self._dispatch = Dispatcher(
            self._ledger_id, self._state, self._config, self._kernel, self._send_progress
        )
        self._requests = self._dispatch.requests
        self._drain = Drain()
        self._kernel.wake()
        self._final: dict[str, Any] | None = None
        # The counts per phase this run last published in its status memo (None: none yet).
        self._published_counts: dict[str, int] | None = None

    # ------------------------------------------------------------ main loop

    @workflow.run
    async def run(self, input: RawValue = NO_INPUT) -> dict[str, Any]:
        """Pump until stopped; continue-as-new when history grows (L14)."""
        start = self._start
        self._kernel.check_start(start.error, start.coerced, "InvalidLedgerInput", start.bad_id)
        if self._recovery_error is not None:
            raise ApplicationError(
                self._recovery_error, type="LedgerRecoveryConflict", non_retryable=True
            )
        workflow.upsert_search_attributes([LEDGER_ID.value_set(self._ledger_id)])
        while True:
            await workflow.wait_condition(
                lambda: self._kernel.woken or self._final is not None or self._ready_to_continue()
            )
            if self._final is not None:
                break
            if self._ready_to_continue() and await self._kernel.close_when_safe(
                self._drain_before_close
            ):
                workflow.continue_as_new(
                    core.next_run_input(self._state, self._config, self._ledger_id)
                )
            self._kernel.clear_wake()
            self._pump()
            self._publish_changed_counts()
            # What the UI shows as Current Details (metadata a query reads, not a command).
            workflow.set_current_details(core.details(self._state))
        # Unlike continue-as-new (workflows.kernel), the ledger completes in `stop`'s own
        # task: a caller reads it as completed once `stop` returns. A signal racing that task
        # can still get `stop` aborted unapplied; DurabilityClient sends it again.
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._publish_changed_counts()
        return self._final

    def _history_due(self) -> bool:
        limit = self._config.continue_as_new_after_events
        if limit is not None:
            return history_long(limit, or_suggested=False)
        return history_long(SAFETY_CAP_EVENTS)

    def _ready_to_continue(self) -> bool:
        """History is long and nothing half-done would be lost by continuing as new."""
        requests = self._requests
        return (
            not self._state.stopped
            and self._history_due()
            and not self._dispatch.compiles
            and not requests.starting
            and not requests.granting
        )

    def _quiet(self) -> bool:
        """No request launched by this run is about to report: each is sleeping until a retry,
        so no report races the continue-as-new (docs/determinism.md)."""
        if self._state.stopped or self._final is not None:
            return True
        return core.waiting_to_retry(self._state, self._requests.tasks, now_ms())

    async def _drain_before_close(self) -> bool:
        """The ledger's drain rule: let in-flight attempts report (bounded: see `_quiet`);
        close only if nothing since has made continuing as new unsafe."""
        if not self._quiet():
            threshold = self._config.continue_as_new_after_events or SAFETY_CAP_EVENTS
            await self._drain.wait(self._quiet, threshold)
            await workflow.wait_condition(workflow.all_handlers_finished)
        return self._final is None and self._ready_to_continue()

    def _pump(self) -> None:
        """Carry out what `core.pump` decides (`Dispatcher`); not once history is due."""
        if self._history_due():
            return
        plan = core.pump(
            self._state, self._config, now_ms(), lambda: str(workflow.uuid4()), launch_gate
        )
        self._dispatch.carry_out(plan)

    def _send_progress(self) -> None:
        """The progress barrier (`workflows.kernel`): this workflow task sends a command."""
        self._published_counts = core.phase_counts(self._state)
        self._kernel.progress(self._published_counts)

    def _publish_changed_counts(self) -> None:
        """Publish the counts per phase (the status memo `durability ledger list` reads)
        when a message changed them since this run last did (`skip`, `resume`, ...)."""
        if self._published_counts == core.phase_counts(self._state):
            return
        if workflow.patched(PUBLISH_COUNTS_PATCH):
            self._send_progress()

    # ------------------------------------------------------------ messages (the catalog's)
    # The core reads every payload with the state it is checked against: in an update's
    # validator (`core.check_update`), in its handler `apply_<name>` (again: the state may have
    # changed since), and `receive_<name>` for the signal of the same name.

    def _on_validate(self, message: Message, raw: Any) -> None:
        check = core.check_update
        self._kernel.validate(lambda v: check(message.name, self._state, self._config, v), raw)

    def _on_signal(self, message: Message, raw: Any) -> None:
        self._kernel.signal(message.name, getattr(self, f"receive_{message.name}"), raw)

    async def _on_update(self, message: Message, raw: Any) -> Any:
        accepted = self._kernel.update(lambda value: value, raw)
        with rejected_as(core.InvalidRequest, former_types=self._kernel.former_types):
            return await self._apply_of(message)(accepted)

    def _on_query(self, message: Message, raw: Any) -> Any:
        if not message.query_takes_payload:
            return getattr(self, f"query_{message.name}")()
        with rejected_as(core.InvalidRequest, former_types=core.FORMER_REFUSAL_TYPES):
            query = core.parse_snapshot_query(read_message("snapshot query argument", raw))
        return core.snapshot(self._state, query)

    async def apply_enqueue(self, value: Any) -> EnqueueResult:
        return self._enqueue(core.validate_enqueue(self._state, value))

    def receive_enqueue(self, value: Any) -> None:
        patched = lambda: workflow.patched(ENQUEUE_PARTICIPANTS_PATCH)  # noqa: E731
        batch = core.validate_enqueue(self._state, value, self._config, patched)
        conflicts = self._enqueue(batch).conflicts
        if conflicts:
            workflow.logger.warning(core.count_signal_conflicts(self._state, conflicts))

    def _enqueue(self, batch: EnqueueInput) -> EnqueueResult:
        result = core.enqueue(self._state, batch, self._config)
        self._kernel.wake()
        return result

    async def apply_hold(self, value: Any) -> str:
        generated = str(workflow.uuid4())
        return core.hold(self._state, core.hold_token(value, generated))

    async def apply_release(self, value: Any) -> bool:
        return self._release(core.parse_release(value).token)

    def receive_release(self, value: Any) -> None:
        token = core.parse_release(value).token
        if not self._release(token):
            self._kernel.drop("release", ValueError(f"token {token!r:.80} is not held"))

    def _release(self, token: str) -> bool:
        released = core.release(self._state, token)
        self._kernel.wake()
        return released

    async def apply_settle(self, value: Any) -> dict[str, Any]:
        core.validate_empty(self._state, "settle", value)
        await workflow.wait_condition(
            lambda: self._state.stopped or core.attempts_in_progress(self._state) == 0
        )
        return core.settle_result(self._state)

    async def apply_resume(self, value: Any) -> dict[str, list[str]]:
        return {"resumed": self._resume()}

    def receive_resume(self, value: Any) -> None:
        core.validate_empty(self._state, "resume", value)
        self._resume()

    def _resume(self) -> list[str]:
        touched = core.resume(self._state, self._config)
        self._kernel.wake()
        return touched

    async def apply_skip(self, value: Any) -> bool:
        self.receive_skip(value)
        return True

    def receive_skip(self, value: Any) -> None:
        skip: SkipInput = core.validate_skip(self._state, value)
        core.skip_and_compact(self._state, self._config, skip.operation_id, skip.reason)
        metrics.operations("skipped")
        self._kernel.wake()

    async def apply_configure(self, value: Any) -> dict[str, Any]:
        self.receive_configure(value)
        return core.settings_of(self._config, self._ledger_id)

    def receive_configure(self, value: Any) -> None:
        config: LedgerConfig = core.validate_configure(self._state, value, self._config)
        self._config = config
        self._dispatch.use_settings(config)
        self._kernel.wake()

    async def apply_stop(self, value: Any) -> dict[str, Any]:
        bound = core.begin_stop(self._state, value)
        await stop_ledger(self._state, self._config, self._ledger_id, self._dispatch, bound)
        self._final = core.final_result(self._state)
        workflow.set_current_details(core.details(self._state))
        return self._final

    def receive_request_progress(self, value: Any) -> None:
        report = core.parse_report(value)
        if core.record_attempt(self._state, report) and report.awaiting_grant:
            self._kernel.wake()  # its slot is free (L4), its retry is to be granted

    def receive_request_finished(self, value: Any) -> None:
        if apply_final_report(self._state, self._config, core.parse_report(value)):
            self._kernel.wake()

    def receive_request_ended(self, value: Any) -> None:
        core.final_report_arrived(self._state, core.parse_report(value).request_id)

    def query_settings(self) -> dict[str, Any]:
        return core.settings_of(self._config, self._ledger_id)

    def query_claims(self) -> dict[str, str]:
        return dict(self._state.claims)
