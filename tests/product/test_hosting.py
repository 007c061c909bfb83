"""The plugin's run wrapper (`durability.hosting.supervise`) on its own, in plain asyncio: the
heartbeats it adds, the worker-side deadline, and waiting for a handler that winds down.
The end-to-end cases are in tests/schedule/test_schedule_run_host.py."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from durability.hosting import Heartbeats, supervise
from workflows.schedule.core import read_start
from workflows.schedule.models import (
    RunHost,
    plugin_run_activity_id,
    plugin_run_timeout_ms,
)

# How late a loop woken on time may run a step when other test processes share the cores.
LATE_S = 0.25


class Sent:
    """The heartbeats that reached the SDK's heartbeat call, with their details and times."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, tuple[Any, ...]]] = []

    def __call__(self, *details: Any) -> None:
        self.calls.append((time.monotonic(), details))


async def test_a_run_shorter_than_the_interval_gets_no_heartbeat() -> None:
    sent = Sent()
    result = await supervise(
        lambda: asyncio.sleep(0.3, result="done"),
        run_timeout_ms=5000,
        heartbeat_every_s=0.5,
        heartbeats=Heartbeats(send=sent),
    )
    assert result == "done" and sent.calls == []


async def test_a_long_run_is_heartbeated_every_interval_the_handler_stays_silent() -> None:
    sent = Sent()
    heartbeats = Heartbeats(send=sent)

    async def handler() -> None:
        await asyncio.sleep(0.45)
        heartbeats.handler_beat("progress", 1)  # the handler's own, through the SDK
        await asyncio.sleep(0.75)  # ends at 1.2 s

    began = time.monotonic()
    await supervise(handler, run_timeout_ms=5000, heartbeat_every_s=0.3, heartbeats=heartbeats)
    times = [at - began for at, _ in sent.calls]
    # 0.3 (for it), 0.45 (its own), then 0.75 and 1.05 for it, repeating its details: each one
    # for it an interval after the one before. A busy machine (the suite runs in several
    # processes) wakes the loop late, never early, so only lateness gets a wide margin.
    assert len(times) == 4, times
    for_it = [(times[0], 0.0), (times[2], times[1]), (times[3], times[2])]
    assert all(0.29 <= at - after <= 0.3 + LATE_S for at, after in for_it), times
    assert 0.45 - 0.01 <= times[1] <= 0.45 + LATE_S, times
    assert [d for _, d in sent.calls] == [(), ("progress", 1), ("progress", 1), ("progress", 1)]
    assert heartbeats.sent_for_handler == 3


async def test_at_the_deadline_the_handler_is_cancelled_and_waited_for_then_it_times_out() -> None:
    sent = Sent()
    stopped: list[float] = []

    async def swallows() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(0.5)  # winds down, then returns normally
        finally:
            stopped.append(time.monotonic())
        return "ignored"

    began = time.monotonic()
    with pytest.raises(ApplicationError) as raised:
        await supervise(
            swallows, run_timeout_ms=300, heartbeat_every_s=0.2, heartbeats=Heartbeats(send=sent)
        )
    ended = time.monotonic()
    assert raised.value.type == "ScheduledRunTimeoutError" and raised.value.non_retryable
    assert "run_timeout_ms=300" in raised.value.message
    assert stopped and ended >= stopped[0] >= began + 0.75, "it waited for the handler to stop"
    assert len(sent.calls) >= 3, "it heartbeated while the handler wound down"


async def test_a_handler_that_raises_after_its_deadline_still_times_out() -> None:
    async def raises_on_cancel() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise ValueError("cleanup failed") from None

    with pytest.raises(ApplicationError) as raised:
        await supervise(
            raises_on_cancel,
            run_timeout_ms=100,
            heartbeat_every_s=1,
            heartbeats=Heartbeats(send=Sent()),
        )
    assert raised.value.type == "ScheduledRunTimeoutError"


async def test_a_handler_done_in_time_keeps_its_result_or_error() -> None:
    async def fails() -> None:
        raise ApplicationError("boom", type="Boom")

    with pytest.raises(ApplicationError) as raised:
        await supervise(
            fails, run_timeout_ms=1000, heartbeat_every_s=1, heartbeats=Heartbeats(send=Sent())
        )
    assert raised.value.type == "Boom"


async def test_an_uninterruptible_handler_runs_to_its_end_and_times_out() -> None:
    finished: list[bool] = []

    async def shielded() -> None:
        await asyncio.sleep(0.4)
        finished.append(True)

    with pytest.raises(ApplicationError):
        await supervise(
            shielded,
            run_timeout_ms=100,
            heartbeat_every_s=1,
            heartbeats=Heartbeats(send=Sent()),
            interruptible=False,
        )
    assert finished == [True]


async def test_cancelling_the_activity_cancels_the_handler_and_waits_for_it() -> None:
    stopped: list[float] = []

    async def winds_down() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            await asyncio.sleep(0.3)
            stopped.append(time.monotonic())

    task = asyncio.create_task(
        supervise(
            winds_down, run_timeout_ms=60_000, heartbeat_every_s=1, heartbeats=Heartbeats(Sent())
        )
    )
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stopped, "the activity ended only once the handler had stopped"


def test_the_run_activity_id_carries_the_timeout() -> None:
    assert plugin_run_timeout_ms(plugin_run_activity_id(900_000)) == 900_000
    prefix = "run:timeout_ms="
    others = ["1", "run", prefix, f"{prefix}0", f"{prefix}-5", f"{prefix}1e3", f"{prefix}{2**31}"]
    for other in [*others, f"{prefix}\u0663"]:
        assert plugin_run_timeout_ms(other) is None, other


@pytest.mark.parametrize(
    ("start", "host"),
    [
        ({}, RunHost.PLUGIN),
        ({"activity_task_queue": "elsewhere"}, RunHost.EXTERNAL),
        ({"run_host": "external"}, RunHost.EXTERNAL),
        ({"run_host": "plugin", "activity_task_queue": "elsewhere"}, RunHost.PLUGIN),
    ],
)
def test_run_host_defaults_from_the_activity_task_queue(
    start: dict[str, Any], host: RunHost
) -> None:
    parsed = read_start(lambda: start, "schedule:x")
    assert parsed.error is None and parsed.settings.hosted_by() is host


@pytest.mark.parametrize("value", ["Plugin", "worker", 1, True, ""])
def test_a_bad_run_host_is_refused_naming_the_field_and_value(value: Any) -> None:
    parsed = read_start(lambda: {"run_host": value}, "schedule:x")
    assert parsed.error is not None
    assert "run_host" in parsed.error and repr(value) in parsed.error
