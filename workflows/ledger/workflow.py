"""`OperationLedger`: the Temporal shell around `workflows.ledger.core`, which decides.

This module moves messages, activity results and child reports into the core, and turns its
plans into compiles (`compile.py`) and `FrozenRequest` children (`request.py`).

- Event history is the ledger: the compiled body and the frozen request are in history and
  state before the child, which alone sends anything, starts (L6).
- Each child reports by signal (`request_progress`, `request_finished`); the run that started
  it also awaits its completion, to notice a child that ended without reporting.
- Between attempts a child waits for a `grant` (L4: a waiting request holds no slot); the
  ledger owns the retry clock: one timer, for the earliest retry a slot could take
  (`core.next_grant_due`), replaced only by an earlier one.
- A task that applies a state-changing completion always sends a command (`workflows.kernel`).
- Signals and updates share names (`enqueue`, `release`, `resume`, `skip`); a bad signal is
  logged, counted (`dropped_signals` in the snapshot) and dropped, never raised.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import (
    ApplicationError,
)

with workflow.unsafe.imports_passed_through():
    from workflows import SANDBOXED, metrics
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
    from workflows.ledger.compile import compile_operation
    from workflows.ledger.models import (
        EnqueueInput,
        EnqueueResult,
        LedgerConfig,
        SkipInput,
        StopInput,
    )
    from workflows.ledger.request import (
        FrozenRequestWorkflow,
        RequestRuns,
        apply_final_report,
        cancel_request,
    )
    from workflows.search_attributes import LEDGER_ID

# Continue-as-new at this many events even if Temporal has not suggested it yet.
SAFETY_CAP_EVENTS = 10_000
# Before continue-as-new, wait this long at most for attempts in flight to report (`_quiet`).
QUIET_BEFORE_CONTINUE = timedelta(seconds=1)
# Recorded (as a patch marker) by a `stop` that asks the far side about the requests it may
# have received before the ledger completes; a history from before it completes at once.
STOP_QUERIES_PATCH = "stop-final-queries"
# Recorded (as a patch marker) by a run the first time the launch gate changes what it does:
# a request compiled while held (or while its slot was taken since) is recorded and started
# later, not at once; a request of a protocol version `configure` removed is blocked and its
# waiting loop cancelled. A run recorded before it launches as it did.
LAUNCH_GATE_PATCH = "ledger-launch-gate"
# Recorded by a run whose `enqueue` signal dropped an operation that could never dispatch
# (no participants, not participant-free); a run recorded before it blocked such operations.
ENQUEUE_PARTICIPANTS_PATCH = "ledger-refuse-no-participants"
# Recorded by a run the first time it publishes its status memo because the counts per phase
# changed without a completion (enqueue, skip, resume, configure, stop): `durability ledger
# list` reads that memo. A run recorded before published only on completions.
PUBLISH_COUNTS_PATCH = "ledger-publish-phase-counts"
# Recorded by a `stop` that cancelled requests an earlier run started (by workflow ID): it
# waits for each one's last report (`request_ended`) before completing, so
# no report lands in the task that completes the ledger; a request that never reports
# (terminated from outside) is given up after FINAL_REPORT_WAIT. A run recorded before it
# completed without waiting.
STOP_AWAITS_REPORTS_PATCH = "ledger-stop-awaits-final-reports"
FINAL_REPORT_WAIT = timedelta(seconds=60)

__all__ = ["FrozenRequestWorkflow", "OperationLedgerWorkflow"]


@workflow.defn(name=LEDGER_WORKFLOW, sandboxed=SANDBOXED)
class OperationLedgerWorkflow:
    """One ledger per `ledger_id` (L1): records intents and drives them to frozen requests."""

    @workflow.init
    def __init__(self, input: RawValue = NO_INPUT) -> None:
        # Decoded and validated here, not by the converter: a start input that fails to decode
        # would fail every workflow task; this way the ledger fails once, naming the field.
        start = core.read_start(lambda: decode_start_input(input), workflow.info().workflow_id)
        self._start_error, self._start_coerced = start.error, start.coerced
        self._start_bad_id = start.bad_id
        self._config, self._ledger_id, self._state = start.config, start.ledger_id, start.state
        self._recovery_error: str | None = None
        try:
            core.recover(self._state)  # L14: before anything is sent
        except core.RecoveryConflictError as error:
            self._recovery_error = str(error)
        self._compiles: dict[str, asyncio.Task[None]] = {}
        self._kernel = ShellKernel(
            core.InvalidRequest,
            lambda: core.count_dropped_signal(self._state),
            core.FORMER_REFUSAL_TYPES,
        )
        self._requests = RequestRuns(
            self._ledger_id,
            self._state,
            self._config,
            self._kernel,
            self._send_progress,
        )
        self._kernel.wake()
        self._final: dict[str, Any] | None = None
        # The counts per phase this run last published in its status memo (None: none yet).
        self._published_counts: dict[str, int] | None = None
        # The timer that wakes the ledger when a waiting request's retry is due: (due, task).
        self._retry_wake: tuple[int, asyncio.Task[None]] | None = None

    # ------------------------------------------------------------ main loop

    @workflow.run
    async def run(self, input: RawValue = NO_INPUT) -> dict[str, Any]:
        """Pump until stopped; continue-as-new when history grows (L14)."""
        self._kernel.check_start(
            self._start_error, self._start_coerced, "InvalidLedgerInput", self._start_bad_id
        )
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
                self._settle_for_close
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
        return (
            not self._state.stopped
            and self._history_due()
            and not self._compiles
            and not self._requests.starting
            and not self._requests.granting
        )

    def _quiet(self) -> bool:
        """No request started by this run is about to report: each is sleeping until a retry,
        so no report races the continue-as-new (docs/determinism.md)."""
        if self._state.stopped or self._final is not None:
            return True
        return core.waiting_to_retry(self._state, self._requests.tasks, now_ms())

    async def _settle_for_close(self) -> bool:
        """The ledger's drain rule: let in-flight attempts report (bounded: see `_quiet`);
        close only if nothing since has made continuing as new unsafe."""
        if not self._quiet():
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(self._quiet, timeout=QUIET_BEFORE_CONTINUE)
            await workflow.wait_condition(workflow.all_handlers_finished)
        return self._final is None and self._ready_to_continue()

    def _pump(self) -> None:
        """Carry out what `core.pump` decides: cancel the loops of requests it blocked, grant
        due retries, relaunch frozen requests, compile ready operations; then set the timer
        for the next retry a slot could take."""
        if self._history_due():
            return
        plan = core.pump(
            self._state,
            self._config,
            now_ms(),
            lambda: str(workflow.uuid4()),
            lambda: workflow.patched(LAUNCH_GATE_PATCH),
        )
        for request_id in plan.cancel:
            self._requests.cancel(request_id)
        for granted in plan.grants:
            self._requests.grant(granted)
        for relaunched in plan.launches:
            metrics.operations("dispatched", len(relaunched.operation_ids))
            self._requests.launch(relaunched.id)
        for op_id, request_id in plan.dispatches:
            metrics.operations("dispatched")
            self._compiles[op_id] = asyncio.create_task(self._compile(op_id, request_id))
        self._wake_for_retry()

    def _wake_for_retry(self) -> None:
        """One timer for the earliest retry a slot could take now, replaced only by an earlier
        one: a slot that frees wakes the ledger anyway (a report)."""
        due = core.next_grant_due(self._state, self._config, now_ms())
        if due is None or (self._retry_wake is not None and self._retry_wake[0] <= due):
            return
        if self._retry_wake is not None:
            self._retry_wake[1].cancel()
        self._retry_wake = (due, asyncio.create_task(self._wake_at(due)))

    async def _wake_at(self, due: int) -> None:
        delay = timedelta(milliseconds=max(1, due - now_ms()))
        await workflow.sleep(delay, summary="a retry is due")
        if self._retry_wake is not None and self._retry_wake[1] is asyncio.current_task():
            self._retry_wake = None
        self._kernel.wake()

    async def _compile(self, op_id: str, request_id: str) -> None:
        try:
            compiled = await compile_operation(self._state, self._config, op_id, request_id)
        finally:
            self._compiles.pop(op_id, None)
            self._kernel.wake()
        verdict = "stale"
        if compiled is not None or op_id in self._state.compiling:
            verdict = core.freeze(
                self._state,
                self._config,
                op_id,
                request_id,
                compiled,
                lambda: workflow.patched(LAUNCH_GATE_PATCH),
            )
        if verdict == "launch":
            self._requests.launch(request_id)  # its child's start is this task's command
        else:
            if verdict == "blocked":
                metrics.operations("blocked")
            self._send_progress()  # a blocked compile changes state and sends nothing else

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

    # ------------------------------------------------------------ messages
    # Every payload is parsed by its `core` function before anything is recorded, through the
    # kernel: an update's refusal becomes its rejection; a signal of the same name is dropped
    # (counted and logged) instead. Both then apply it the same way.

    # ------------------------------------------------------------ enqueue (L2)

    @workflow.update(name="enqueue")
    async def enqueue(self, raw: RawValue = NO_INPUT) -> EnqueueResult:
        """Record intents; returns accepted, duplicate and conflicting IDs once recorded."""
        return self._enqueue(self._kernel.update(core.validate_enqueue, self._state, raw))

    @enqueue.validator
    def validate_enqueue(self, raw: RawValue = NO_INPUT) -> None:
        """Reject malformed intents, repeated IDs, cycles, operations that could never
        dispatch (no participants); nothing is recorded."""
        self._kernel.validate(core.validate_enqueue, self._state, raw, self._config)

    @workflow.signal(name="enqueue")
    def enqueue_signal(self, raw: RawValue = NO_INPUT) -> None:
        """`enqueue` as a signal; its conflicts are counted (`signal_conflicts`) and logged."""
        batch = self._kernel.signal(
            "enqueue",
            core.validate_enqueue,
            self._state,
            raw,
            self._config,
            lambda: workflow.patched(ENQUEUE_PARTICIPANTS_PATCH),
        )
        if batch is None:
            return
        conflicts = self._enqueue(batch).conflicts
        if conflicts:
            total = core.count_signal_conflicts(self._state, conflicts)
            workflow.logger.warning(
                "enqueue signal: %d known IDs sent with another intent, not recorded "
                "(%d so far): %s",
                len(conflicts),
                total,
                ", ".join(repr(c) for c in conflicts[:10])
                + (" ..." if len(conflicts) > 10 else ""),
            )

    def _enqueue(self, batch: EnqueueInput) -> EnqueueResult:
        result = core.enqueue(self._state, batch, self._config)
        self._kernel.wake()
        return result

    # ------------------------------------------------------------ hold / release (L12)

    @workflow.update(name="hold")
    async def hold(self, raw: RawValue = NO_INPUT) -> str:
        """Stop new launches until the returned token is released: the caller's own
        (`{"token": T}`, idempotent) or one made up here (`{}`)."""
        generated = str(workflow.uuid4())
        token = self._kernel.update(core.hold_token, raw, generated)
        return core.hold(self._state, token)

    @hold.validator
    def validate_hold(self, raw: RawValue = NO_INPUT) -> None:
        """A running ledger, `{}` or `{"token": str}`, within the bound on tokens."""
        self._kernel.validate(core.validate_hold, self._state, raw)

    @workflow.update(name="release")
    async def release(self, raw: RawValue = NO_INPUT) -> bool:
        """Release one hold token."""
        return self._release(self._kernel.update(core.parse_release, raw).token)

    @release.validator
    def validate_release(self, raw: RawValue = NO_INPUT) -> None:
        """The token must be one currently held."""
        self._kernel.validate(core.validate_release, self._state, raw)

    @workflow.signal(name="release")
    def release_signal(self, raw: RawValue = NO_INPUT) -> None:
        """`release` as a signal; a token not held is dropped too."""
        release = self._kernel.signal("release", core.parse_release, raw)
        if release is not None and not self._release(release.token):
            self._kernel.drop("release", ValueError(f"token {release.token!r:.80} is not held"))

    def _release(self, token: str) -> bool:
        released = core.release(self._state, token)
        self._kernel.wake()
        return released

    # ------------------------------------------------------------ settle (L12)

    @workflow.update(name="settle")
    async def settle(self, raw: RawValue = NO_INPUT) -> dict[str, Any]:
        """Return once no attempt is in progress (compile, submit, query), with the counts."""
        self._kernel.update(core.validate_empty, self._state, "settle", raw)
        await workflow.wait_condition(
            lambda: self._state.stopped or core.attempts_in_progress(self._state) == 0
        )
        return core.settle_result(self._state)

    @settle.validator
    def validate_settle(self, raw: RawValue = NO_INPUT) -> None:
        """`{}` on a running ledger."""
        self._kernel.validate(core.validate_empty, self._state, "settle", raw)

    # ------------------------------------------------------------ resume (L13) / skip

    @workflow.update(name="resume")
    async def resume(self, raw: RawValue = NO_INPUT) -> dict[str, list[str]]:
        """Retry blocked requests with their frozen body and re-examine every operation."""
        return {"resumed": self._kernel.update(self._resume)}

    @resume.validator
    def validate_resume(self, raw: RawValue = NO_INPUT) -> None:
        """`{}` on a running ledger."""
        self._kernel.validate(core.validate_empty, self._state, "resume", raw)

    @workflow.signal(name="resume")
    def resume_signal(self, raw: RawValue = NO_INPUT) -> None:
        """`resume` as a signal."""
        parsed = self._kernel.signal("resume", core.validate_empty, self._state, "resume", raw)
        if parsed is not None:
            self._resume()

    def _resume(self) -> list[str]:
        touched = core.resume(self._state, self._config)
        self._kernel.wake()
        return touched

    @workflow.update(name="skip")
    async def skip(self, raw: RawValue = NO_INPUT) -> bool:
        """Resolve a stuck operation as `skipped`; its dependents proceed (see core)."""
        self._skip(self._kernel.update(core.validate_skip, self._state, raw))
        return True

    @skip.validator
    def validate_skip(self, raw: RawValue = NO_INPUT) -> None:
        """Known, unresolved, not in flight."""
        self._kernel.validate(core.validate_skip, self._state, raw)

    @workflow.signal(name="skip")
    def skip_signal(self, raw: RawValue = NO_INPUT) -> None:
        """`skip` as a signal."""
        parsed = self._kernel.signal("skip", core.validate_skip, self._state, raw)
        if parsed is not None:
            self._skip(parsed)

    def _skip(self, parsed: SkipInput) -> None:
        core.skip_and_compact(self._state, self._config, parsed.operation_id, parsed.reason)
        metrics.operations("skipped")
        self._kernel.wake()

    # ------------------------------------------------------------ configure

    def _configure(self, config: LedgerConfig) -> dict[str, Any]:
        """Decide under `config` from now on: grants, launches and compiles after this take
        it (`concurrency`, `lanes`, ...), requests started before keep what their input
        says; the next run of the workflow (continue-as-new) starts with it. It wakes the
        main loop (a higher `concurrency` launches waiting work at once). Its validation
        reads only the settings, which only `configure` changes, and whether the ledger is
        stopped, which only `stop` does: the validator's answer is the same whatever
        completion a cold worker applies in the same activation."""
        self._config = config
        self._requests.use_config(config)
        self._kernel.wake()
        return core.settings_of(config, self._ledger_id)

    @workflow.update(name="configure")
    async def configure(self, raw: RawValue = NO_INPUT) -> dict[str, Any]:
        """Change start settings in place; returns the settings now in effect."""
        return self._configure(
            self._kernel.update(core.validate_configure, self._state, raw, self._config)
        )

    @configure.validator
    def validate_configure(self, raw: RawValue = NO_INPUT) -> None:
        """Reject an empty, unknown, fixed or out-of-bounds setting before anything is recorded."""
        self._kernel.validate(core.validate_configure, self._state, raw, self._config)

    @workflow.signal(name="configure")
    def configure_signal(self, raw: RawValue = NO_INPUT) -> None:
        """`configure` as a signal; a bad payload is dropped (counted and logged)."""
        config = self._kernel.signal(
            "configure", core.validate_configure, self._state, raw, self._config
        )
        if config is not None:
            self._configure(config)

    # ------------------------------------------------------------ stop

    @workflow.update(name="stop")
    async def stop(self, raw: RawValue = NO_INPUT) -> dict[str, Any]:
        """Stop dispatching, cancel what is in flight, ask the far side about every request
        it may have received (`_ask_before_stopping`), complete with the final result."""
        bound = self._kernel.update(core.begin_stop, self._state, raw)
        for task in list(self._compiles.values()):
            task.cancel()
        for task in list(self._requests.tasks.values()):
            task.cancel()
        # Requests started by an earlier run (before continue-as-new) have no local task.
        earlier = core.cancel_at_stop(self._state, self._requests.tasks)
        # Each stays in flight until its last report (what it still sends is applied).
        awaits = core.stop_waits_for_reports(self._state) and workflow.patched(
            STOP_AWAITS_REPORTS_PATCH
        )
        for request_id in earlier:
            if not await cancel_request(self._ledger_id, request_id):
                core.final_report_arrived(self._state, request_id)  # closed: nothing to come
            if not awaits:
                core.request_interrupted(self._state, request_id, "stopped", stopped=True)
        await workflow.wait_condition(
            lambda: not self._compiles and not self._requests.tasks and not self._requests.granting
        )
        if awaits:
            await self._await_final_reports()
            for request_id in earlier:
                core.request_interrupted(self._state, request_id, "stopped", stopped=True)
        if core.unknown_candidates(self._state) and workflow.patched(STOP_QUERIES_PATCH):
            await self._ask_before_stopping(bound)
        self._final = core.final_result(self._state)
        workflow.set_current_details(core.details(self._state))
        return self._final

    async def _await_final_reports(self) -> None:
        """Wait for the last report of each request `stop` cancelled by workflow ID, at most
        FINAL_REPORT_WAIT (one timer); those that never came are given up (logged)."""
        if not core.stop_waits_for_reports(self._state):
            return  # each had closed already
        try:
            await workflow.wait_condition(
                lambda: not core.stop_waits_for_reports(self._state),
                timeout=FINAL_REPORT_WAIT,
                timeout_summary="stop: last reports of cancelled requests",
            )
        except TimeoutError:
            given_up = core.final_reports_given_up(self._state)
            workflow.logger.warning("stop: no last report from %s", ", ".join(given_up))

    @stop.validator
    def validate_stop(self, raw: RawValue = NO_INPUT) -> None:
        """`{}` or `{"query_limit"?, "query_deadline_ms"?}`, once."""
        self._kernel.validate(core.validate_stop, self._state, raw)

    async def _ask_before_stopping(self, bound: StopInput) -> None:
        """One final query per request `core.plan_stop_queries` names, at most `concurrency`
        at a time; at `query_deadline_ms` those still asking are cancelled (one timer)."""
        queue = core.plan_stop_queries(self._state, bound, self._config)
        if not queue:
            return
        deadline = asyncio.create_task(
            workflow.sleep(
                timedelta(milliseconds=bound.query_deadline_ms), summary="stop: final queries"
            )
        )
        asking: dict[str, asyncio.Task[None]] = {}
        while queue or asking:
            for request_id in core.stop_queries_to_start(
                queue, len(asking), self._config, deadline.done()
            ):
                if core.begin_stop_query(self._state, request_id):
                    asking[request_id] = asyncio.create_task(self._requests.final_query(request_id))
            if asking:
                await workflow.wait_condition(
                    lambda: deadline.done() or any(task.done() for task in asking.values())
                )
            for request_id in [r for r, task in asking.items() if task.done()]:
                finished = asking.pop(request_id)
                if not finished.cancelled():
                    finished.result()  # an error in the query's task is not swallowed
            if deadline.done():
                for task in asking.values():
                    task.cancel()
                await workflow.wait_condition(lambda: all(t.done() for t in asking.values()))
                break
        if not deadline.done():
            deadline.cancel()

    # ------------------------------------------------------------ child reports

    @workflow.signal(name="request_progress")
    def request_progress(self, raw: RawValue = NO_INPUT) -> None:
        """A non-final attempt of a frozen request (attempt, retry_at, next action)."""
        report = self._kernel.signal("request_progress", core.parse_report, raw)
        recorded = report is not None and core.record_attempt(self._state, report)
        if recorded and report is not None and report.awaiting_grant:
            self._kernel.wake()  # its slot is free (L4), its retry is to be granted

    @workflow.signal(name="request_finished")
    def request_finished(self, raw: RawValue = NO_INPUT) -> None:
        """A frozen request resolved or blocked."""
        report = self._kernel.signal("request_finished", core.parse_report, raw)
        # A request's end, reported by this signal or its child's result (whichever is first).
        if report is not None and apply_final_report(self._state, self._config, report):
            self._kernel.wake()

    @workflow.signal(name="request_ended")
    def request_ended(self, raw: RawValue = NO_INPUT) -> None:
        """The last report of a frozen request that was cancelled: it sends nothing after."""
        report = self._kernel.signal("request_ended", core.parse_report, raw)
        if report is not None:
            core.final_report_arrived(self._state, report.request_id)

    # ------------------------------------------------------------ queries

    @workflow.query(name="snapshot")
    def snapshot(self, raw: RawValue = NO_INPUT) -> dict[str, Any]:
        """One page of operations with their requests, counts per phase, claims, holds.
        Optional argument: `{"phase", "after", "limit"}` (see `core.SnapshotQuery`)."""
        with rejected_as(core.InvalidRequest, former_types=core.FORMER_REFUSAL_TYPES):
            query = core.parse_snapshot_query(read_message("snapshot query argument", raw))
        return core.snapshot(self._state, query)

    @workflow.query(name="settings")
    def settings(self) -> dict[str, Any]:
        """The start settings in effect (as changed by `configure`)."""
        return core.settings_of(self._config, self._ledger_id)

    @workflow.query(name="claims")
    def claims(self) -> dict[str, str]:
        """`{canvas_id: request_id}`."""
        return dict(self._state.claims)
