"""How both shells refuse an update: the refusal becomes the update's rejection."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from temporalio.exceptions import ApplicationError


@contextmanager
def rejected_as(*refusals: type[Exception]) -> Iterator[None]:
    """In an update's validator or handler: a refusal of one of these kinds becomes the
    rejection, not retryable (the same payload is refused again) and typed by the refusal's
    class (the schedule's `InvalidRequest`, `NoRoomForRuns`, `NoLiveSchedule`; the ledger's
    `LedgerInputError`, `LedgerStopped`), with its message naming the field and the value."""
    try:
        yield
    except refusals as error:
        raise ApplicationError(str(error), type=type(error).__name__, non_retryable=True) from None
