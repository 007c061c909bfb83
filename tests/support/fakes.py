"""The one fake of the schedule's activity contract (`run`, `on_outcome`, `lifecycle`), for
every test that drives a schedule: each call is recorded, and what the fake does comes from
the run's params and from a few switches the test flips."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError


@dataclass
class ScheduleFake:
    """Activities that record what the schedule asked of them.

    From the run's params: `sleep_ms` (the run takes that long, heartbeating unless
    `no_heartbeat`), `gated_run` (the run waits until the test sets `run_gate`), `fail` (the run
    raises ApplicationError type `Boom`; with `fail_message_chars` its message is that long),
    `outcome_failures` (the outcome activity refuses that many attempts first, type
    `Refused`), `gated_outcome` (the outcome activity, once called, waits until the test sets
    `outcome_gate`), `gated_then_refused` (the first outcome call waits for `outcome_gate`,
    then is refused as `Refused`; later calls are accepted).

    Switches: every outcome call first waits while `outcomes_open` is clear; while `refusing`,
    it is refused as `Unavailable: receiver down`, and with `refusals_final` too that refusal is
    non-retryable, so the outcome is dead-lettered at once.
    """

    started: list[dict[str, Any]] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)
    # (run, outcome, attempt) of every outcome call, refused ones included
    outcomes: list[tuple[dict[str, Any], dict[str, Any], int]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    outcome_gate: asyncio.Event = field(default_factory=asyncio.Event)
    run_gate: asyncio.Event = field(default_factory=asyncio.Event)
    outcomes_open: asyncio.Event = field(default_factory=asyncio.Event)
    refusing: bool = False
    refusals_final: bool = False
    refused: list[str] = field(default_factory=list)  # idempotency keys refused while refusing
    # scheduled_time and idempotency key of each outcome call that returned (accepted)
    accepted: list[int] = field(default_factory=list)
    accepted_keys: list[str] = field(default_factory=list)
    # scheduled_time of the one outcome call `gated_then_refused` refused
    refused_after_gate: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.outcomes_open.set()

    @activity.defn(name="run")
    async def run(self, run: dict[str, Any]) -> None:
        self.started.append(run)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        params = run["params"]
        try:
            deadline = time.monotonic() + params.get("sleep_ms", 0) / 1000
            while time.monotonic() < deadline or (
                params.get("gated_run") and not self.run_gate.is_set()
            ):
                if not params.get("no_heartbeat"):
                    activity.heartbeat()
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            self.cancelled.append(run["scheduled_time"])
            raise
        finally:
            self.in_flight -= 1
        if params.get("fail"):
            # `fail_message_chars`: a message that long (a handler that dumps a huge error).
            message = "m" * params.get("fail_message_chars", 0) or "the run failed on purpose"
            raise ApplicationError(message, type="Boom")
        self.finished.append(run["scheduled_time"])

    @activity.defn(name="on_outcome")
    async def on_outcome(self, run: dict[str, Any], outcome: dict[str, Any]) -> None:
        await self.outcomes_open.wait()
        attempt = activity.info().attempt
        self.outcomes.append((run, outcome, attempt))
        if self.refusing:
            self.refused.append(run["idempotency_key"])
            raise ApplicationError(
                "receiver down", type="Unavailable", non_retryable=self.refusals_final
            )
        if run["params"].get("gated_then_refused") and not self.refused_after_gate:
            await self.outcome_gate.wait()
            self.refused_after_gate.append(run["scheduled_time"])
            raise ApplicationError("refused once the gate opened", type="Refused")
        if attempt <= run["params"].get("outcome_failures", 0):
            raise ApplicationError(f"outcome attempt {attempt} refused", type="Refused")
        if run["params"].get("gated_outcome"):
            await self.outcome_gate.wait()
        self.accepted.append(run["scheduled_time"])
        self.accepted_keys.append(run["idempotency_key"])

    @activity.defn(name="lifecycle")
    async def lifecycle(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def delivered(self) -> list[tuple[dict[str, Any], dict[str, Any], int]]:
        """Outcome calls that succeeded (the last attempt of each run that returned)."""
        return [o for o in self.outcomes if o[2] > o[0]["params"].get("outcome_failures", 0)]

    def activities(self) -> list[Callable[..., Any]]:
        return [self.run, self.on_outcome, self.lifecycle]
