"""Keeps the schedule simulation's model honest: a small seeded random run through the real SDK
on the dev server. Bursts of concurrent messages (updates and signals, valid and not), runs
that fail, outcome deliveries that are refused first, continue-as-new on a short history, then
a cancellation; checked from outside against the same promises the simulation checks: no
run started twice (S6), every trigger its own run, every run's outcome delivered (S11), the
slots bound (S8), and a cancelled schedule closes, refusing messages meanwhile."""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError

from tests.support.fakes import ScheduleFake
from tests.support.helpers import eventually, schedule_worker

pytestmark = pytest.mark.cacheless

SEEDS = [int(os.environ.get("DURABILITY_SDK_SIM_SEED", "7"))]


def _message(rng: random.Random, version: int) -> tuple[str, Any, bool]:
    """A random message: (name, payload, as a signal)."""
    name = rng.choice(["trigger", "trigger", "trigger", "pause", "unpause", "configure", "set"])
    if name == "set":
        # A later version of the same yearly schedule (a stale version is ignored), or junk.
        payload: Any = rng.choice(
            [{"expression": "0 0 1 1 *", "version": version, "params": {"outcome_failures": 1}},
             {"expression": "not cron", "version": version}]
        )  # fmt: skip
    elif name == "configure":
        payload = {"max_concurrent_runs": rng.randint(1, 3)}
    else:
        payload = {}
    return name, payload, name != "trigger" and rng.random() < 0.3


@pytest.mark.parametrize("seed", SEEDS)
async def test_random_messages_through_the_sdk_keep_the_schedule_promises(
    client: Client, task_queue: str, unique: str, seed: int
) -> None:
    rng = random.Random(seed)
    fake = ScheduleFake()
    object_id = f"sdk-sim-{unique}"
    async with schedule_worker(client, task_queue, fake.activities()):
        handle = await client.start_workflow(
            "DurabilitySchedule",
            {
                "max_concurrent_runs": 2,
                "max_queued_runs": 50,
                "continue_as_new_after_events": 80,
                "outcome_retries": {"initial_interval_ms": 100},
            },
            id=f"schedule:{object_id}",
            task_queue=task_queue,
        )
        params = {"outcome_failures": 1}
        await handle.execute_update(
            "set", {"expression": "0 0 1 1 *", "version": 1, "params": params}
        )
        triggered: list[int] = []
        version = 1
        for _ in range(6):  # bursts of concurrent messages
            calls = []
            for _ in range(rng.randint(2, 6)):
                version += 1
                name, payload, as_signal = _message(rng, version)
                if as_signal:
                    calls.append(handle.signal(name, payload))
                else:
                    calls.append(handle.execute_update(name, payload))
            answers = await asyncio.gather(*calls, return_exceptions=True)
            for answer in answers:
                if isinstance(answer, int) and not isinstance(answer, bool):
                    triggered.append(answer)
                elif isinstance(answer, BaseException):
                    assert isinstance(answer, WorkflowUpdateFailedError), answer
            await asyncio.sleep(rng.random() * 0.5)
        await handle.execute_update("unpause", {})
        # Every trigger answered ran, once, and its outcome was delivered.
        await eventually(lambda: set(triggered) <= set(fake.accepted), timeout=90)
        assert len(triggered) == len(set(triggered)), triggered  # each its own run
        started = [run["scheduled_time"] for run in fake.started]
        assert len(started) == len(set(started)), started  # S6
        assert fake.max_in_flight <= 3  # S8: at most the highest max_concurrent_runs set
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), timeout=60)
    assert set(started) <= set(fake.accepted)  # S11: delivered before the close
