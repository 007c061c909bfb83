"""A workflow's start input, taken undecoded (`RawValue`) and decoded by the workflow.

Decoded by the SDK, a start input the converter cannot read (JSON nested deeper than it
reads, a number out of its range, not JSON at all) fails every workflow task, forever. Taken
as a `RawValue` and decoded here, it fails the workflow once, naming the problem.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

# The default of a workflow's `input` parameter when it is started without one (`null`).
NO_INPUT = RawValue(Payload(metadata={"encoding": b"binary/null"}))


def decode_start_input(input: Any) -> Any:
    """The start input as JSON values (an input already decoded is returned as it is: a
    subclass's `run` may declare `Any`); ValueError naming the problem when unreadable."""
    if not isinstance(input, RawValue):
        return input
    try:
        return workflow.payload_converter().from_payload(input.payload)
    except Exception as error:  # the converter raises whatever its decoder raises
        raise ValueError(f"the input cannot be decoded: {error}") from None
