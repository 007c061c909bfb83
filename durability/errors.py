"""The errors durability's client and CLI raise, under one base: `DurabilityError`.

    try:
        await client.set_schedule("acct-42", "@hourly", version=3)
    except DurabilityError as error:
        print(f"not done: {error}")

Every error the client raises for a refusal, a missing or closed workflow, a missing worker,
an unanswered update or a bad setting derives from it: `RejectedError`, `NotFoundError`,
`ClosedError` (and `LedgerStopped`), `UnansweredError`, `InvalidQueryError`,
`BatchBusyError`, `NoWorkerError` and `ConfigurationError`. They are importable from here and
from where they always were (`durability.client`, `durability.settings`). An error of the
connection itself (Temporal unreachable, a refused call) is Temporal's own `RPCError`.

This module imports nothing heavy: the classes that live in `durability.client` are loaded
on first use.
"""

from __future__ import annotations

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


# Where the other errors are defined; `from durability.errors import RejectedError` loads it.
_DEFINED_IN = {
    "RejectedError": "durability.client",
    "NotFoundError": "durability.client",
    "ClosedError": "durability.client",
    "LedgerStopped": "durability.client",
    "UnansweredError": "durability.client",
    "InvalidQueryError": "durability.client",
    "BatchBusyError": "durability.client",
    "ConfigurationError": "durability.settings",
}

__all__ = ["DurabilityError", "NoWorkerError"]


def __getattr__(name: str) -> Any:
    module = _DEFINED_IN.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
