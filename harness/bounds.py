"""A bound on any await of a test harness: a call that gets no answer in time raises, it never
hangs the harness (not even a call that ignores its cancellation)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


class HarnessTimeout(TimeoutError):
    """A call of the harness that got no answer within its bound."""


async def bounded(call: Awaitable[T], seconds: float, what: str) -> T:
    """`await call`, but at most `seconds`: then HarnessTimeout. The call is cancelled and
    left behind, not waited for, so a call that ignores its cancellation cannot hang the
    harness either."""
    task = asyncio.ensure_future(call)
    task.add_done_callback(_retrieve)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        raise HarnessTimeout(f"{what}: no answer within {seconds:.0f}s")
    return task.result()


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Read the outcome of a task left behind, so asyncio does not warn it was never read."""
    if not task.cancelled():
        task.exception()
