"""Plugin-hosted runs: what `DurabilityPlugin` does around each schedule run activity its
worker executes (docs/contract.md, S9 and S10, "Who hosts the run").

A schedule whose `run_host` is `plugin` (the default when `activity_task_queue` is null)
schedules its run activity with a heartbeat timeout (30 s unless `run_heartbeat_timeout_ms`
says otherwise), a start-to-close timeout a day past `run_timeout_ms`, no timer of its own,
and the activity ID `run:timeout_ms=<run_timeout_ms>`. That ID is how the worker learns that
the activity is a run and what its deadline is: the run activity's one argument is wire
contract, a header would need an interceptor on the worker that runs the `ScheduledRun`
workflow too (a worker without one would schedule runs nobody wraps, each then interrupted
at its heartbeat timeout), and deriving the deadline from the activity's own timeouts would
tie every worker to one allowance constant and still not tell a run from another activity.

`RunHostInterceptor` then, for such an activity only (any activity type: the built-in `run`
or yours):

- heartbeats on the handler's behalf, every half heartbeat timeout, and only when the handler
  did not heartbeat itself in that time (repeating the handler's latest details). Nothing is
  sent before the first interval has passed, so a run shorter than that records no heartbeat.
  The SDK throttles what reaches the server to one heartbeat per 0.8 x the heartbeat timeout
  (the first one at once, later ones at the end of each throttle window), so a long run
  records about 60 / (0.8 x timeout in s) heartbeats a minute: 2.5 a minute (150 an hour) at
  the default 30 s, each one Temporal Cloud action;
- enforces `run_timeout_ms`, counted from the start of the run activity on this worker: at
  the deadline it cancels the handler (an async handler sees `asyncio.CancelledError`), keeps
  heartbeating while the handler winds down, and once the handler has really stopped fails
  the activity as `ScheduledRunTimeoutError` (non-retryable), whether the handler raised or
  returned. A sync (threaded) handler cannot be interrupted from here: it runs to its end,
  holding its slot, and still ends `ScheduledRunTimeoutError` if that is past the deadline;
- when the SDK cancels the activity (the run's workflow was cancelled, the worker shuts
  down), cancels the handler the same way and returns only once it stopped.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity, client
from temporalio import worker as temporal_worker
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
)

from workflows.schedule import RUN_WORKFLOW_TYPE
from workflows.schedule.models import RUN_TIMEOUT_ERROR, plugin_run_timeout_ms

# Set while a run is supervised: a second RunHostInterceptor on the same worker (the plugin
# on both a client and its worker) passes the activity through instead of wrapping it again.
_SUPERVISED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "durability_run_supervised", default=False
)


def timeout_error(run_timeout_ms: int) -> ApplicationError:
    """What a plugin-hosted run that passed its deadline fails with (S9)."""
    return ApplicationError(
        f"run exceeded run_timeout_ms={run_timeout_ms}", type=RUN_TIMEOUT_ERROR, non_retryable=True
    )


@dataclass
class Heartbeats:
    """The run's heartbeats: when the last one was asked for (by the handler or for it), with
    which details, and how many were asked for on the handler's behalf."""

    send: Callable[..., None]
    last_at: float = 0.0
    details: tuple[Any, ...] = ()
    sent_for_handler: int = 0
    clock: Callable[[], float] = field(default=lambda: asyncio.get_running_loop().time())

    def handler_beat(self, *details: Any) -> None:
        """The handler heartbeated (through the SDK's `activity.heartbeat`)."""
        self.last_at, self.details = self.clock(), details
        self.send(*details)

    def beat_for_handler(self) -> None:
        """Heartbeat on the handler's behalf, with its latest details."""
        self.last_at = self.clock()
        self.sent_for_handler += 1
        self.send(*self.details)


async def supervise(
    handler: Callable[[], Awaitable[Any]],
    *,
    run_timeout_ms: int,
    heartbeat_every_s: float,
    heartbeats: Heartbeats,
    interruptible: bool = True,
) -> Any:
    """Run `handler()` under the run's deadline (`run_timeout_ms` from now), heartbeating
    every `heartbeat_every_s` the handler itself stays silent; see the module's docstring.
    `interruptible`: whether the handler can be cancelled (False for a threaded one)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + run_timeout_ms / 1000
    heartbeats.last_at = started  # no heartbeat at the start: the first is one interval in
    token = _SUPERVISED.set(True)
    try:
        task = asyncio.ensure_future(handler())
    finally:
        _SUPERVISED.reset(token)
    timed_out = False
    try:
        while not task.done():
            beat_at = heartbeats.last_at + heartbeat_every_s
            wake_at = beat_at if timed_out else min(beat_at, deadline)
            await asyncio.wait({task}, timeout=max(0.0, wake_at - loop.time()))
            if task.done():
                break
            now = loop.time()
            if not timed_out and now >= deadline:
                timed_out = True
                if interruptible:
                    task.cancel()
            if now >= heartbeats.last_at + heartbeat_every_s:
                heartbeats.beat_for_handler()
    except asyncio.CancelledError:
        # The SDK cancelled the activity: stop the handler, and return once it stopped.
        await _stopped(task, heartbeat_every_s, heartbeats, interruptible)
        raise
    if timed_out:
        if not task.cancelled():
            task.exception()  # retrieved: whatever the handler ended with, the run timed out
        raise timeout_error(run_timeout_ms)
    return task.result()


async def _stopped(
    task: asyncio.Future[Any], heartbeat_every_s: float, heartbeats: Heartbeats, interruptible: bool
) -> None:
    """Cancel `task` (when it can be) and wait until it is done, heartbeating meanwhile; a
    further cancellation of the waiter cancels the handler again and keeps waiting."""
    loop = asyncio.get_running_loop()
    if interruptible:
        task.cancel()
    while not task.done():
        try:
            await asyncio.wait(
                {task}, timeout=max(0.0, heartbeats.last_at + heartbeat_every_s - loop.time())
            )
        except asyncio.CancelledError:
            if interruptible:
                task.cancel()
            continue
        if not task.done() and loop.time() >= heartbeats.last_at + heartbeat_every_s:
            heartbeats.beat_for_handler()
    if not task.cancelled():
        task.exception()


def hosted_run_timeout_ms(info: activity.Info) -> int | None:
    """The run timeout of a plugin-hosted run activity; None for any other activity."""
    if info.is_local or info.workflow_type != RUN_WORKFLOW_TYPE:
        return None
    return plugin_run_timeout_ms(info.activity_id)


class _TrackedOutbound(ActivityOutboundInterceptor):
    """The activity's outbound calls, with its heartbeats noted in `heartbeats`."""

    def __init__(self, next: ActivityOutboundInterceptor) -> None:
        super().__init__(next)
        self.heartbeats = Heartbeats(send=next.heartbeat)

    def heartbeat(self, *details: Any) -> None:
        self.heartbeats.handler_beat(*details)


class _RunInbound(ActivityInboundInterceptor):
    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        self._outbound = _TrackedOutbound(outbound)
        super().init(self._outbound)

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        run_timeout_ms = hosted_run_timeout_ms(info)
        if run_timeout_ms is None or _SUPERVISED.get():
            return await self.next.execute_activity(input)
        heartbeat_timeout = info.heartbeat_timeout
        every = heartbeat_timeout.total_seconds() / 2 if heartbeat_timeout else 15.0
        # As the SDK tells an async activity from a threaded one.
        fn = input.fn
        interruptible = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            type(fn).__call__
        )
        return await supervise(
            lambda: self.next.execute_activity(input),
            run_timeout_ms=run_timeout_ms,
            heartbeat_every_s=every,
            heartbeats=self._outbound.heartbeats,
            interruptible=interruptible,
        )


class RunHostInterceptor(client.Interceptor, temporal_worker.Interceptor):
    """Hosts plugin-hosted schedule runs (see the module's docstring). It is a client
    interceptor too (passing everything through) so that it can ride on a client, as
    `durability.connect.interceptors()` does: every worker made from that client gets it."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _RunInbound(next)
