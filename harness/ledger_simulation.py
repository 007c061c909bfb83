"""A deterministic model of the `OperationLedger` shell and of what Temporal can do around it.

`LedgerSim` drives `workflows.ledger.core` through the transitions the shell makes
(`workflows/ledger/workflow.py`, `request.py`) and, between them, anything Temporal may
deliver: every message (valid or not, as update or signal) at any point; compiles that
succeed, fail (refused, or transiently: retried, or for their whole retry window) or answer an
unsupported protocol; submits, queries and completions that answer each status, fail
(refused, or transiently: retried, or for their whole retry window), or are cancelled while
running (with `TRY_CANCEL` the call keeps running
at the far side; with `WAIT_CANCELLATION_COMPLETED` the loop ends only after it); reports
delivered late, after a relaunch or after continue-as-new; continue-as-new and worker
restarts (the state carried as JSON). Every step is chosen by `random.Random(seed)`, and
`workflows.invariants.check_ledger` runs after each one.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Any

from workflows.invariants import LedgerEffect, LedgerObservation, Violation, check_ledger
from workflows.ledger import core
from workflows.ledger.models import (
    LedgerConfig,
    LedgerState,
    RequestAction,
    RequestReport,
    RetryConfig,
    StopInput,
)

TYPES = ("shape.update", "asset.upload", "run.cancel", "text.edit")
CANVASES = ("c1", "c2", "c3", "c4")
# Loop stages with a call running at the far side (a submit or query, or the completion).
BUSY = ("attempt", "complete")
# Whether a request an earlier run started, cancelled at `stop`, still delivers the reports it
# had sent, and a report arriving once the ledger completed is a violation (it lands in the
# closing workflow task, which then fails with UnhandledCommand). On by default (`stop` waits
# for each such request's `request_ended`); `DURABILITY_SIM_LATE_REPORTS=0` turns it off.
LATE_REPORTS = os.environ.get("DURABILITY_SIM_LATE_REPORTS", "1") == "1"


@dataclass
class Loop:
    """One `FrozenRequest` run: its workflow ID is taken while it is alive."""

    request_id: str
    launch: int
    action: RequestAction
    attempt: int
    run: int  # the ledger run that started it
    stage: str = "attempt"  # attempt | complete | waiting
    final_query: bool = False
    cancel_requested: bool = False
    answer: Any = None
    step: core.Step | None = None
    outbox: list[tuple[str, RequestReport]] = field(default_factory=list)
    end_reported: bool = False  # its `request_ended` is in the outbox (or was delivered)


class SimFailure(AssertionError):
    """An invariant broke (or the model reached a state the shell cannot)."""


class LedgerSim:
    """One seeded interleaving (see the module)."""

    def __init__(self, seed: int, steps: int = 120) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.steps = steps
        rng = self.rng
        self.config = LedgerConfig(
            concurrency=rng.randint(1, 3),
            lanes=rng.choice([{}, {"asset.upload": 1}, {"shape.update": 1, "text.edit": 2}]),
            participant_free_types=["run.cancel"],
            supported_protocol_versions=[1, 2],
            retry=RetryConfig(initial_interval_ms=5, maximum_interval_ms=50),
            complete_activity=rng.choice([None, "complete"]),
        )
        self.state = LedgerState(ledger_id="sim")
        self.run = 1
        self.now = 1_000
        self.next_op = 0
        self.next_request = 0
        self.compiles: dict[str, str] = {}  # op -> request ID, compiles of this run
        self.loops: dict[str, Loop] = {}  # request ID -> its alive run
        self.pending_starts: list[tuple[str, bool]] = []  # (request, final query)
        self.zombies: list[tuple[str, RequestAction]] = []  # calls still running after cancel
        self.far_applied: set[str] = set()
        self.frozen: dict[str, dict[str, Any]] = {}
        self.client_tokens: list[str] = []
        self.stop_bound: StopInput | None = None
        self.stop_queue: list[str] = []
        self.cancelled_by_id: list[str] = []  # requests of earlier runs `stop` cancelled
        self.asking: set[str] = set()
        self.deadline_passed = False
        self.planned = False
        self.final: dict[str, Any] | None = None
        self.effects: list[LedgerEffect] = []
        self.trace: list[str] = []

    # ------------------------------------------------------------ checks

    def fail(self, message: str) -> None:
        raise SimFailure(
            f"{message}\nseed {self.seed}: replay with\n"
            f"  DURABILITY_SIM_SEED={self.seed} DURABILITY_SIM_STEPS={self.steps} "
            ".venv/bin/python -m pytest "
            "tests/simulation/test_ledger_simulation.py\nlast steps:\n  "
            + "\n  ".join(self.trace[-25:])
        )

    def check(self) -> None:
        seen = LedgerObservation(self.state, self.config, self.effects, self.frozen, self.final)
        violations: list[Violation] = check_ledger(seen)
        self.effects = []
        if violations:
            self.fail("; ".join(str(v) for v in violations))

    # ------------------------------------------------------------ effects

    def effect(self, kind: Any, target: str, held: bool, stopped: bool, **more: Any) -> None:
        total, by_type = core.in_flight(self.state)
        self.effects.append(
            LedgerEffect(
                kind=kind,
                target=target,
                held=held,
                stopped=stopped,
                in_progress=total,
                by_type=dict(by_type),
                concurrency=self.config.concurrency,
                lanes=dict(self.config.lanes),
                supported_protocol_versions=list(self.config.supported_protocol_versions),
                **more,
            )
        )

    def request_effect(self, kind: str, request_id: str, held: bool, stopped: bool) -> None:
        request = self.state.requests[request_id]
        self.effect(
            kind,
            request_id,
            held,
            stopped,
            operation_type=request.operation_type,
            protocol_version=request.body.get("protocol_version"),
            body=dict(request.body),
            frozen_body=self.frozen.get(request_id),
            earlier_attempt_running=any(r == request_id for r, _ in self.zombies),
        )

    # ------------------------------------------------------------ the run

    def play(self) -> None:
        for _ in range(self.steps):
            if self.final is not None:
                if LATE_REPORTS and any(loop.outbox for loop in self.loops.values()):
                    self.deliver()
                break
            self.step()
            self.check()
        self.drain()

    def step(self) -> None:
        rng = self.rng
        choices: list[tuple[int, Any]] = [(6, self.message), (5, self.pump), (2, self.tick)]
        if self.compiles:
            choices.append((5, self.compile_done))
        if any(loop.stage in BUSY for loop in self.loops.values()):
            choices.append((8, self.call_done))
        if any(loop.outbox for loop in self.loops.values()):
            choices.append((6, self.deliver))
        if self.zombies:
            choices.append((2, self.zombie_done))
        if self.pending_starts:
            choices.append((3, self.start_pending))
        if self.stop_bound is None and not self.compiles and not self.pending_starts:
            choices.append((1, self.continue_as_new))
        choices.append((1, self.restart))
        if self.stop_bound is not None:
            choices.append((4, self.stop_progress))
            if not self.deadline_passed:
                choices.append((1, self.stop_deadline))
        # A request workflow terminated from outside between calls (a call it left running
        # would run on unseen); one an earlier run started is noticed only at its next grant,
        # so only this run's are failed here.
        if any(self.may_fail(x) for x in self.loops.values()):
            choices.append((1, self.loop_fails))
        total = sum(weight for weight, _ in choices)
        pick = rng.uniform(0, total)
        for weight, action in choices:
            pick -= weight
            if pick <= 0:
                action()
                return
        choices[-1][1]()

    # ------------------------------------------------------------ messages

    def message(self) -> None:
        if self.stop_bound is not None and self.rng.random() < 0.4:
            self.skip_while_stopping()
            return
        last = "stop" if self.rng.random() < 0.15 else "resume"
        kind = self.rng.choice(
            [
                "enqueue",
                "enqueue",
                "enqueue",
                "hold",
                "release",
                "settle",
                "skip",
                "configure",
                last,
            ]
        )
        as_signal = self.rng.random() < 0.3 and kind in (
            "enqueue",
            "release",
            "resume",
            "skip",
            "configure",
        )
        raw = self.payload(kind)
        self.trace.append(f"{'signal' if as_signal else 'update'} {kind} {raw!r:.120}")
        try:
            parsed = self.validate(kind, raw, as_signal)
        except core.InvalidRequest as refused:
            if as_signal:
                core.count_dropped_signal(self.state)
            self.trace.append(f"  refused: {str(refused)[:100]}")
            return
        self.apply(kind, raw, parsed, as_signal)

    def skip_while_stopping(self) -> None:
        """`skip` aimed at what `stop` is about to ask (a message can come at any point)."""
        targets = [
            op
            for r in self.stop_queue + sorted(self.asking)
            for op in self.state.requests[r].operation_ids
            if r in self.state.requests
        ]
        raw = {"operation_id": self.rng.choice(targets or ["none"])}
        as_signal = self.rng.random() < 0.5
        self.trace.append(f"{'signal' if as_signal else 'update'} skip {raw} while stopping")
        try:
            parsed = core.validate_skip(self.state, raw)
        except core.InvalidRequest:
            if as_signal:
                core.count_dropped_signal(self.state)
            return
        core.skip_and_compact(self.state, self.config, parsed.operation_id, parsed.reason)

    def payload(self, kind: str) -> Any:
        rng = self.rng
        if kind == "enqueue":
            ops = []
            for _ in range(rng.randint(1, 3)):
                self.next_op += 1
                known = list(self.state.operations)
                kind_of = rng.choice(TYPES)
                participants = rng.sample(CANVASES, rng.randint(0 if rng.random() < 0.2 else 1, 2))
                ops.append(
                    {
                        "id": rng.choice(known)
                        if known and rng.random() < 0.1
                        else f"op{self.next_op}",
                        "operation_type": kind_of,
                        "participants": participants,
                        "dependencies": rng.sample(known, min(len(known), rng.randint(0, 1))),
                        "payload": {"n": self.next_op},
                        "protocol_version": rng.choice([1, 1, 1, 2, 3]),
                    }
                )
            return {"operations": ops} if rng.random() > 0.05 else {"operations": "bad"}
        if kind == "hold":
            return rng.choice(
                [{}, None, {"token": f"t{rng.randint(1, 4)}"}, {"bogus": 1}]
                + ([{"token": rng.choice(self.client_tokens)}] if self.client_tokens else [])
            )
        if kind == "release":
            tokens = self.client_tokens + list(self.state.holds)
            return (
                {"token": rng.choice(tokens)}
                if tokens and rng.random() < 0.8
                else {"token": "nope"}
            )
        if kind in ("settle", "resume"):
            return rng.choice([{}, None, {"bogus": 1}])
        if kind == "skip":
            known_ops: list[str] = list(self.state.operations) or ["none"]
            return rng.choice(
                [
                    {"operation_id": rng.choice(known_ops)},
                    {"operation_id": rng.choice(known_ops), "bogus": 1},
                ]
            )
        if kind == "configure":
            return rng.choice(
                [
                    {"concurrency": rng.randint(1, 4)},
                    {"lanes": {rng.choice(TYPES): rng.randint(0, 2)}},
                    {"supported_protocol_versions": rng.choice([[1], [2], [1, 2]])},
                    {"participant_free_types": rng.choice([["run.cancel"], []])},
                    {"concurrency": 0},
                    {"bogus": 1},
                ]
            )
        return rng.choice(
            [{}, {"query_limit": rng.randint(0, 3)}, {"query_deadline_ms": 0}, {"bogus": 1}]
        )

    def validate(self, kind: str, raw: Any, as_signal: bool) -> Any:
        state = self.state
        if kind == "enqueue":
            return core.validate_enqueue(state, raw, self.config)
        if kind == "hold":
            return core.validate_hold(state, raw)
        if kind == "release":
            return core.parse_release(raw) if as_signal else core.validate_release(state, raw)
        if kind in ("settle", "resume"):
            return core.validate_empty(state, kind, raw)
        if kind == "skip":
            return core.validate_skip(state, raw)
        if kind == "configure":
            return core.validate_configure(state, raw, self.config)
        return core.validate_stop(state, raw)

    def apply(self, kind: str, raw: Any, parsed: Any, as_signal: bool) -> None:
        state = self.state
        if kind == "enqueue":
            core.enqueue(state, parsed, self.config)
        elif kind == "hold":
            token = core.hold(state, core.hold_token(raw, f"gen{self.rng.randint(0, 10**9)}"))
            if self.rng.random() < 0.3 and not (isinstance(raw, dict) and raw.get("token")):
                self.trace.append("  (the hold's answer was lost)")
            else:
                self.client_tokens.append(token)
        elif kind == "release":
            if not core.release(state, parsed.token):
                core.count_dropped_signal(state)  # only a signal gets here (see validate)
            elif parsed.token in self.client_tokens:
                self.client_tokens.remove(parsed.token)
        elif kind == "resume":
            core.resume(state, self.config)
        elif kind == "skip":
            core.skip_and_compact(state, self.config, parsed.operation_id, parsed.reason)
        elif kind == "configure":
            self.config = parsed
        elif kind == "stop":
            self.begin_stop(raw)

    # ------------------------------------------------------------ the main loop

    def pump(self) -> None:
        held, stopped = bool(self.state.holds), self.state.stopped
        plan = core.pump(self.state, self.config, self.now, self.new_request_id)
        for request_id in plan.cancel:
            self.trace.append(f"pump: cancel {request_id}")
            loop = self.loops.get(request_id)
            if loop is not None:
                if loop.run != self.run:  # by workflow ID: a `stop` waits for its last report
                    core.cancel_by_id(self.state, request_id)
                self.cancel(loop)
        for request in plan.grants:
            self.trace.append(f"pump: grant {request.id}")
            self.request_effect("grant", request.id, held, stopped)
            loop = self.loops.get(request.id)
            if loop is None:  # its workflow is gone: the grant is not delivered
                core.request_interrupted(
                    self.state,
                    request.id,
                    "request_workflow_failed: grant not delivered",
                    self.state.stopped,
                )
            elif loop.stage == "waiting" and loop.launch == request.launch:
                loop.stage, loop.action = "attempt", request.retry_action
        for request in plan.launches:
            self.trace.append(f"pump: launch {request.id}")
            self.request_effect("launch", request.id, held, stopped)
            self.start(request.id)
        for op_id, request_id in plan.dispatches:
            self.trace.append(f"pump: compile {op_id} as {request_id}")
            record = self.state.operations[op_id]
            self.effect(
                "compile",
                op_id,
                held,
                stopped,
                operation_type=record.intent.operation_type,
                dependencies_resolved=all(
                    core.is_resolved(self.state, d) for d in record.intent.dependencies
                ),
            )
            self.compiles[op_id] = request_id

    def new_request_id(self) -> str:
        self.next_request += 1
        return f"r{self.next_request}"

    def tick(self) -> None:
        self.now += self.rng.choice([1, 5, 20, 100])

    # ------------------------------------------------------------ compiles

    def compile_done(self) -> None:
        op_id = self.rng.choice(sorted(self.compiles))
        request_id = self.compiles.pop(op_id)
        outcome = self.rng.choice(
            ["ok", "ok", "ok", "error", "mismatch", "v2", "v3", "retried", "unavailable"]
        )
        self.trace.append(f"compile {op_id}: {outcome}")
        if outcome == "retried":  # a transient failure: Temporal retries it, the core waits
            self.compiles[op_id] = request_id
            return
        if outcome in ("error", "unavailable"):
            transient = outcome == "unavailable"
            blocker = core.compile_blocker("compile exploded", transient=transient)
            core.block_compile(self.state, op_id, blocker)
            return
        intent = self.state.operations[op_id].intent
        compiled: dict[str, Any] = {
            "canvas_ids": ["elsewhere"]
            if outcome == "mismatch"
            else sorted(set(intent.participants)),
            "payload": intent.payload,
        }
        if outcome in ("v2", "v3"):
            compiled["protocol_version"] = int(outcome[1])
        held, stopped = bool(self.state.holds), self.state.stopped
        verdict = core.freeze(self.state, self.config, op_id, request_id, compiled)
        if request_id in self.state.requests:
            self.frozen.setdefault(request_id, dict(self.state.requests[request_id].body))
        if verdict == "launch":
            self.request_effect("launch", request_id, held, stopped)
            self.start(request_id)

    # ------------------------------------------------------------ request loops

    def start(self, request_id: str, final_query: bool = False) -> None:
        if request_id in self.loops:  # its workflow ID is taken: the shell tries again
            self.pending_starts.append((request_id, final_query))
            return
        request = self.state.requests[request_id]
        self.loops[request_id] = Loop(
            request_id,
            request.launch,
            RequestAction.QUERY if final_query else request.retry_action,
            request.attempt,
            self.run,
            final_query=final_query,
        )
        if final_query:
            self.request_effect("stop_query", request_id, False, False)

    def start_pending(self) -> None:
        for index, (request_id, final_query) in enumerate(self.pending_starts):
            if request_id not in self.loops:
                del self.pending_starts[index]
                self.start(request_id, final_query)
                return

    def far_answer(self, loop: Loop) -> Any:
        rng = self.rng
        if loop.action == RequestAction.SUBMIT:
            answer = rng.choice(
                ["applied", "applied", "rejected", "accepted", "unresolved", "blocked", "transport"]
            )
            if answer in ("applied", "accepted") or (answer == "transport" and rng.random() < 0.5):
                self.far_applied.add(loop.request_id)
        elif loop.request_id in self.far_applied:
            answer = rng.choice(["applied", "applied", "accepted", "transport"])
        else:
            answer = rng.choice(["unresolved", "accepted", "blocked", "transport"])
        if answer == "transport":
            return {"outcome": "unresolved", "error": "transport: timed out"}
        if answer == "blocked":
            return {"outcome": "unresolved", "blocked": True, "error": "http 403"}
        return {"outcome": answer}

    def call_done(self) -> None:
        loop = self.rng.choice([x for x in self.loops.values() if x.stage in BUSY])
        if loop.stage == "complete":
            assert loop.step is not None
            answer = self.rng.choice([None, None, {"blocked": True}, "retried", "refused", "gone"])
            self.trace.append(f"complete {loop.request_id}: {answer}")
            if answer == "retried":  # a transient failure: Temporal retries it, the loop waits
                return
            step = loop.step
            if answer in ("refused", "gone"):  # non-retryable, or transient for its window
                reason = core.completion_failure("boom", transient=answer == "gone")
                step = core.completion_blocked(step, reason)
            elif answer is not None:
                step = core.completion_blocked(step, core.completion_blocker(answer) or "")
            if loop.cancel_requested:  # it ran to its end: the answer is reported, then it ends
                answered = core.answer_at_cancel(
                    loop.request_id, loop.step, loop.attempt, loop.launch
                )
                if answered is not None:
                    loop.outbox.append(("request_progress", answered))
                self.end_cancelled(loop)
                return
            self.after_answer(loop, step)
            return
        raw = self.far_answer(loop)
        self.trace.append(f"{loop.action} {loop.request_id} (launch {loop.launch}): {raw}")
        loop.attempt += 1
        step = core.next_step(loop.action, raw, loop.attempt, self.config.retry, self.now)
        if loop.cancel_requested:
            self.end_cancelled(loop)
            return
        if step.result == "resolved" and self.config.complete_activity is not None:
            loop.stage, loop.step = "complete", step
            return
        self.after_answer(loop, step)

    def after_answer(self, loop: Loop, step: core.Step) -> None:
        status = step.status.model_dump(mode="json", exclude_none=True)
        if loop.final_query:
            phase = {"resolved": "resolved", "blocked": "blocked"}.get(step.result, "frozen")
            report = RequestReport(
                request_id=loop.request_id,
                phase=phase,
                status=status,
                attempt=loop.attempt,
                next_action=RequestAction.QUERY,
                launch=loop.launch,
            )
            del self.loops[loop.request_id]
            self.final_query_ended(loop.request_id, report)
            return
        if step.result != "retry":
            report = RequestReport(
                request_id=loop.request_id,
                phase="resolved" if step.result == "resolved" else "blocked",
                status=status,
                attempt=loop.attempt,
                next_action=step.next_action,
                launch=loop.launch,
            )
            loop.outbox.append(("request_finished", report))
            loop.stage = "ending"
            return
        loop.outbox.append(
            (
                "request_progress",
                RequestReport(
                    request_id=loop.request_id,
                    phase="in_flight",
                    status=status,
                    attempt=loop.attempt,
                    next_action=step.next_action,
                    retry_at=step.retry_at,
                    launch=loop.launch,
                    awaiting_grant=True,
                ),
            )
        )
        loop.stage = "waiting"

    def deliver(self) -> None:
        loop = self.rng.choice([x for x in self.loops.values() if x.outbox])
        self.deliver_one(loop)
        if loop.stage == "ending" and not loop.outbox:
            self.loop_ended(loop, cancelled=False)

    def deliver_one(self, loop: Loop) -> None:
        name, report = loop.outbox.pop(0)
        self.trace.append(f"deliver {name} {report.request_id} attempt {report.attempt}")
        if self.final is not None:
            if LATE_REPORTS:
                self.fail(f"{name} of {report.request_id} arrived after the ledger completed")
            return  # the ledger is closed: the report is not delivered
        if name == "request_progress":
            core.record_attempt(self.state, report)
        elif name == "request_ended":
            core.final_report_arrived(self.state, report.request_id)
        else:
            core.finish(self.state, self.config, report)

    def loop_ended(self, loop: Loop, cancelled: bool) -> None:
        """The loop's workflow closed: the run that started it applies its end."""
        if loop.cancel_requested:
            self.report_end(loop)
        while loop.outbox:
            self.deliver_one(loop)  # its signals were sent before it closed
        self.loops.pop(loop.request_id, None)
        if loop.run != self.run:
            return  # an earlier run's child: no handle here
        if cancelled:
            busy = loop.stage in BUSY
            core.request_interrupted(self.state, loop.request_id, "stopped", stopped=True)
            request = self.state.requests.get(loop.request_id)
            if busy and request is not None and request.phase == "frozen":
                # 3.6: a call `stop` interrupted may have reached the far side: ask next;
                # and an answer whose completion it interrupted is kept.
                if request.retry_action != RequestAction.QUERY:
                    self.fail(
                        f"3.6: {loop.request_id} interrupted mid-call, next {request.retry_action}"
                    )
                answered = loop.step is not None and loop.stage == "complete"
                outcome = (request.last_status or {}).get("outcome")
                if answered and loop.step is not None and outcome != loop.step.status.outcome:
                    self.fail(f"3.6: the answer of {loop.request_id} was lost at stop")

    def report_end(self, loop: Loop) -> None:
        """A cancelled loop's last report (`request_ended`), after whatever it sent before."""
        if loop.final_query or loop.end_reported:
            return
        loop.end_reported = True
        ended = RequestReport(
            request_id=loop.request_id,
            phase="frozen",
            status={},
            attempt=loop.attempt,
            next_action=RequestAction.QUERY,
            launch=loop.launch,
        )
        loop.outbox.append(("request_ended", ended))

    def may_fail(self, loop: Loop) -> bool:
        return not loop.final_query and loop.run == self.run and loop.stage == "waiting"

    def loop_fails(self) -> None:
        loop = self.rng.choice([x for x in self.loops.values() if self.may_fail(x)])
        self.trace.append(f"request workflow {loop.request_id} fails")
        loop.outbox.clear()
        self.loops.pop(loop.request_id)
        if loop.run == self.run:
            request = self.state.requests.get(loop.request_id)
            if request is not None and request.launch == loop.launch:
                core.request_interrupted(
                    self.state,
                    loop.request_id,
                    "request_workflow_failed: terminated",
                    stopped=self.state.stopped,
                )

    def cancel(self, loop: Loop) -> None:
        loop.cancel_requested = True
        if loop.stage in ("waiting", "ending"):
            self.end_cancelled(loop)
        elif not core.WAIT_FOR_CANCELLED_ATTEMPTS:  # TRY_CANCEL: the call runs on
            self.zombies.append((loop.request_id, loop.action))
            self.end_cancelled(loop)

    def end_cancelled(self, loop: Loop) -> None:
        self.trace.append(f"request {loop.request_id} ends cancelled")
        if loop.final_query:
            self.loops.pop(loop.request_id, None)
            self.final_query_ended(loop.request_id, None)
            return
        self.loop_ended(loop, cancelled=True)

    def zombie_done(self) -> None:
        request_id, action = self.zombies.pop(self.rng.randrange(len(self.zombies)))
        self.trace.append(f"cancelled {action} of {request_id} ends at the far side")
        if action == RequestAction.SUBMIT and self.rng.random() < 0.5:
            self.far_applied.add(request_id)

    # ------------------------------------------------------------ stop

    def begin_stop(self, raw: Any) -> None:
        self.stop_bound = core.begin_stop(self.state, raw)
        for op_id in list(self.compiles):
            del self.compiles[op_id]
            core.abandon_dispatch(self.state, op_id)
        local = [r for r, loop in self.loops.items() if loop.run == self.run]
        self.cancelled_by_id = core.cancel_at_stop(self.state, local)
        for request_id in self.cancelled_by_id:
            loop = self.loops.get(request_id)
            if loop is None:
                core.final_report_arrived(self.state, request_id)  # closed: the cancel fails
            else:
                loop.cancel_requested = True
                if loop.stage in ("waiting", "ending") or not core.WAIT_FOR_CANCELLED_ATTEMPTS:
                    if loop.stage in ("attempt", "complete"):
                        self.zombies.append((request_id, loop.action))
                    if not LATE_REPORTS:
                        loop.outbox.clear()
                    # What it sent before the cancellation arrived, then its last report.
                    self.report_end(loop)
                    loop.stage = "ending"
        for request_id in local:
            self.cancel(self.loops[request_id])
        self.pending_starts = [(r, f) for r, f in self.pending_starts if f]

    def stop_progress(self) -> None:
        if self.stop_bound is None or self.final is not None:
            return
        if self.compiles or any(
            loop.run == self.run and not loop.final_query for loop in self.loops.values()
        ):
            return  # stop waits for its cancellations to end
        if core.stop_waits_for_reports(self.state):
            if any(r in self.loops for r in self.state.awaiting_final_reports):
                return  # and for the last report of each request it cancelled by ID
            core.final_reports_given_up(self.state)  # gone without one: the timer passes
        for request_id in self.cancelled_by_id:  # each recorded frozen once it is heard from
            core.request_interrupted(self.state, request_id, "stopped", stopped=True)
        self.cancelled_by_id = []
        if not self.planned:
            self.planned = True
            if core.unknown_candidates(self.state):
                self.stop_queue = core.plan_stop_queries(self.state, self.stop_bound, self.config)
        for request_id in core.stop_queries_to_start(
            self.state, self.stop_queue, self.asking, self.config, self.deadline_passed
        ):
            if core.begin_stop_query(self.state, request_id):
                self.trace.append(f"stop: final query {request_id}")
                self.asking.add(request_id)
                self.start(request_id, final_query=True)
        if self.deadline_passed:
            for request_id in list(self.asking):
                loop = self.loops.get(request_id)
                if loop is not None and loop.final_query:
                    self.cancel(loop)
                else:  # still waiting for its workflow ID
                    self.pending_starts = [
                        (r, f) for r, f in self.pending_starts if r != request_id
                    ]
                    self.final_query_ended(request_id, None)
            self.stop_queue.clear()
        if not self.stop_queue and not self.asking:
            self.final = core.final_result(self.state)
            self.trace.append("stop: the ledger completes")

    def stop_deadline(self) -> None:
        self.deadline_passed = True
        self.trace.append("stop: the deadline passes")

    def final_query_ended(self, request_id: str, report: RequestReport | None) -> None:
        self.asking.discard(request_id)
        if report is None or core.record_stop_query(self.state, report) is None:
            core.stop_query_unanswered(self.state, request_id)

    # ------------------------------------------------------------ runs

    def continue_as_new(self) -> None:
        carried = core.next_run_input(self.state, self.config, "sim")
        self.trace.append("continue-as-new")
        start = core.read_start(lambda: carried.model_dump(mode="json"), "ledger:sim")
        if start.error is not None:
            self.fail(f"continue-as-new input refused: {start.error}")
        self.config, self.state = start.config, start.state
        core.recover(self.state)
        self.run += 1

    def restart(self) -> None:
        """A worker restart: the run replays to the same state (it round-trips as JSON)."""
        self.trace.append("worker restart")
        again = LedgerState.model_validate_json(self.state.model_dump_json())
        if again != self.state:
            self.fail("state does not survive a replay")
        self.state = again

    # ------------------------------------------------------------ the end

    def drain(self) -> None:
        """Liveness: with every known hold released (the client's own tokens, and those the
        snapshot lists), nothing left held, and no operation pending with nothing to wait
        for once the loops run out."""
        if self.final is not None:
            return
        for token in self.client_tokens + list(core.snapshot(self.state).get("hold_tokens", [])):
            core.release(self.state, token)
        if self.state.holds:
            self.fail(f"L12: held for good by tokens nobody knows: {self.state.holds}")
        for _ in range(400):
            if self.stop_bound is not None:
                self.stop_deadline()
                self.stop_progress()
                if self.final is not None:
                    break
            self.pump()
            if self.compiles:
                self.compile_done()
            elif any(loop.outbox for loop in self.loops.values()):
                self.deliver()
            elif any(loop.stage in BUSY for loop in self.loops.values()):
                self.call_done()
            elif self.zombies:
                self.zombie_done()
            elif self.pending_starts:
                self.start_pending()
            else:
                self.now += 100
            self.check()
        if self.stop_bound is not None or self.final is not None:
            return
        for record in self.state.operations.values():
            if record.phase == "pending" and not core.waiting_for(self.state, record):
                claimed = any(c in self.state.claims for c in core.canvases_of(record.intent))
                if not claimed and not self.compiles and not self.loops:
                    self.fail(f"L4: {record.intent.id} stays pending with nothing to wait for")
            if core.MISSING_PARTICIPANTS in record.blockers:
                self.fail(
                    f"L5: {record.intent.id} accepted, then blocked for good (no participants)"
                )
