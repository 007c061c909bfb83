"""The chaos harness cannot hang: every wait is bounded, and a ledger whose enqueue gets no
answer delays only its own batches (no server: the calls are stand-ins)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from durability.client import DurabilityClient
from harness.bounds import HarnessTimeout, bounded
from harness.chaos import ChaosConfig, Feeder, GaveUp, _settle, ledger_plan, retrying
from harness.fleet import WorkerFleet

_released = asyncio.Event()


async def _deaf() -> None:
    """A call that does not answer and ignores its cancellation, until the test releases it."""
    while not _released.is_set():
        with contextlib.suppress(asyncio.CancelledError):
            await _released.wait()


@pytest.fixture(autouse=True)
async def release_deaf_calls() -> AsyncIterator[None]:
    _released.clear()
    yield
    _released.set()
    await asyncio.sleep(0.1)  # the calls left behind end


@pytest.mark.timeout(20)
async def test_a_call_that_ignores_cancellation_is_left_behind_at_its_bound() -> None:
    with pytest.raises(HarnessTimeout, match="deaf call: no answer within 0s"):
        await bounded(_deaf(), 0.2, "deaf call")


@pytest.mark.timeout(20)
async def test_retrying_gives_up_on_a_call_that_never_answers() -> None:
    with pytest.raises(GaveUp, match="deaf call kept failing for 1s"):
        await retrying(_deaf, "deaf call", timeout=1, attempt_s=0.3)


class _OneLedgerDeaf:
    """Stands in for DurabilityClient.enqueue: one ledger never answers, the others at once."""

    def __init__(self, deaf_ledger: str) -> None:
        self.deaf_ledger = deaf_ledger
        self.enqueued: list[str] = []

    async def enqueue(self, ledger_id: str, ops: list[Any], *, options: Any) -> None:
        if ledger_id == self.deaf_ledger:
            await _deaf()
        self.enqueued += [op["id"] for op in ops]


@pytest.mark.timeout(30)
async def test_a_ledger_that_never_answers_delays_only_its_own_batches() -> None:
    config = ChaosConfig(operations=40, ledgers=4)
    plan = ledger_plan(config, "harness", random.Random(0))
    deaf_ledger = "harness-l0"
    stand_in = _OneLedgerDeaf(deaf_ledger)
    feeder = Feeder(cast(DurabilityClient, stand_in), plan, {}, over_s=0.5, log=print)
    with pytest.raises(HarnessTimeout):
        await bounded(feeder.run(), 3, "the feed")
    others = [op["id"] for ledger, ops in plan.items() if ledger != deaf_ledger for op in ops]
    assert sorted(stand_in.enqueued) == sorted(others)
    assert feeder.fed == feeder.total - len(plan[deaf_ledger]) // 5
    assert f"{deaf_ledger} from op-0" in feeder.describe_unfed()


class _SlowlyResolving:
    """Stands in for the DurabilityClient `_settle` observes: one operation of the ledger
    resolves at each snapshot; no runs, no ScheduledRun left."""

    def __init__(self, operations: int) -> None:
        self.unresolved = operations
        self.resolved = 0
        self.temporal = self

    async def list_runs(self, object_id: str) -> list[Any]:
        return []

    async def snapshot(self, ledger_id: str) -> dict[str, Any]:
        if self.unresolved:
            self.unresolved -= 1
            self.resolved += 1
        ops = [{"phase": "resolved"}] * self.resolved + [{"phase": "pending"}] * self.unresolved
        return {"operations": ops}

    async def list_workflows(self, query: str) -> AsyncIterator[Any]:
        for _ in ():
            yield _


class _NoFleet:
    def revive(self) -> list[int]:
        return []


@pytest.mark.timeout(30)
async def test_settling_lasts_while_it_progresses() -> None:
    stand_in = _SlowlyResolving(operations=4)
    config = ChaosConfig(settle_timeout_s=1.5, settle_cap_s=20)
    timeouts: list[str] = []
    settled = await _settle(
        cast(DurabilityClient, stand_in), ["o"], ["l"], config, cast(WorkerFleet, _NoFleet()),
        print, timeouts,
    )  # fmt: skip
    assert stand_in.unresolved == 0 and timeouts == []
    assert settled.ledgers["l"]["operations"] == [{"phase": "resolved"}] * 4


@pytest.mark.timeout(30)
async def test_settling_that_stops_progressing_is_a_harness_timeout() -> None:
    stand_in = _SlowlyResolving(operations=4)
    stand_in.snapshot = _stuck  # type: ignore[method-assign]
    config = ChaosConfig(settle_timeout_s=1.5, settle_cap_s=20)
    timeouts: list[str] = []
    await _settle(
        cast(DurabilityClient, stand_in), ["o"], ["l"], config, cast(WorkerFleet, _NoFleet()),
        print, timeouts,
    )  # fmt: skip
    assert len(timeouts) == 1 and timeouts[0].startswith("settle: "), timeouts
    assert "unresolved ops 1" in timeouts[0]


async def _stuck(ledger_id: str) -> dict[str, Any]:
    return {"operations": [{"phase": "pending"}]}
