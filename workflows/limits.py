"""Temporal's own limits on what a workflow names in its commands (pure, shared by both models).

The server refuses a command whose activity type, task queue or child workflow ID passes its
limits, and a search attribute value over 2 KiB; a refused command fails the workflow task,
and so does every retry of it. The start inputs are checked against these limits up front, so
a bad one fails the workflow once, naming the field (`InvalidStartInput`). See also
`workflows.kernel.decode_start_input`.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Annotated, Any

from pydantic import AfterValidator

# Temporal's default `limit.maxIDLength`: workflow IDs, activity types, task queue names.
MAX_NAME_BYTES = 1000
# An object or ledger ID as UTF-8: its children's workflow IDs (`schedule-run:<id>:<time>`,
# `request:<id>:<uuid>`) stay under MAX_NAME_BYTES, its search attribute under 2 KiB.
MAX_ID_BYTES = 900
# Temporal's limit on one Keyword search attribute value (`DurabilityObjectId`,
# `DurabilityLedgerId`), which the server measures on the value as the SDK sends it: JSON with
# every non-ASCII character escaped (`ü` is `\u00fc`, 6 bytes; an emoji 12), quotes included.
MAX_KEYWORD_BYTES = 2048
# Format characters an ID may hold: the zero-width (non-)joiners inside emoji and scripts.
ALLOWED_FORMAT_CHARACTERS = frozenset("\u200c\u200d")
RESERVED_TASK_QUEUE_PREFIX = "/_sys/"
# A RetryPolicy's `maximum_attempts` is an int32 in Temporal's protobuf.
MAX_INT32 = 2**31 - 1

# How deep user JSON (`set.params`, an operation's `payload`) may nest. The workflows carry it
# a few levels deeper (run objects, continue-as-new inputs), and the Python SDK's converter
# reads no JSON nested over 200 levels: a deeper value would be accepted, then unreadable.
MAX_JSON_DEPTH = 64

# The largest update, signal or query argument a workflow takes, as the payload it receives.
# The product's client sends at most 256 KiB; a larger one from another caller is refused by
# the update's validator (see `workflows.kernel.read_message` for why it must be).
MAX_MESSAGE_BYTES = 512 * 1024


def utf8_bytes(value: str) -> int:
    return len(value.encode("utf-8", "surrogatepass"))


def json_depth(value: Any) -> int:
    """How deeply `value` nests objects and arrays: 0 for a scalar, 1 for `{}` or `[1]`."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def keyword_bytes(value: str) -> int:
    """`value`'s size as Temporal measures a Keyword search attribute's value."""
    return len(json.dumps(value))


def id_problem(field: str, value: str) -> str | None:
    """Why `value` cannot be an object or ledger ID by its size, or None."""
    size = utf8_bytes(value)
    if size > MAX_ID_BYTES:
        return f"{field} is {size} bytes as UTF-8, more than {MAX_ID_BYTES}"
    measured = keyword_bytes(value)
    if measured > MAX_KEYWORD_BYTES:
        return (
            f"{field} is {measured} bytes as a search attribute value (non-ASCII characters "
            f"escaped), more than Temporal's {MAX_KEYWORD_BYTES}"
        )
    return None


def id_form_problem(field: str, value: str) -> str | None:
    """Why `value` cannot be an object or ledger ID by its characters, or None: empty, blank,
    spaces around it, or a control, format, separator or surrogate character."""
    if not value.strip():
        return f"{field} must not be empty or blank, got {value!r}"
    if value != value.strip():
        return f"{field} must not start or end with spaces, got {value!r:.120}"
    for index, char in enumerate(value):
        category = unicodedata.category(char)
        if category in ("Cc", "Cs", "Zl", "Zp") or (
            category == "Cf" and char not in ALLOWED_FORMAT_CHARACTERS
        ):
            return (
                f"{field} must not hold control characters, got U+{ord(char):04X} at "
                f"{index} in {value!r:.120}"
            )
    return None


def any_id_problem(field: str, value: str) -> str | None:
    """Why `value` cannot be an object or ledger ID at all (`id_form_problem`, `id_problem`)."""
    return id_form_problem(field, value) or id_problem(field, value)


def _activity_name(value: str) -> str:
    if not value:
        raise ValueError("must be a non-empty activity name")
    size = utf8_bytes(value)
    if size > MAX_NAME_BYTES:
        raise ValueError(f"is {size} bytes as UTF-8, more than Temporal's {MAX_NAME_BYTES}")
    return value


def _task_queue(value: str) -> str:
    size = utf8_bytes(value)
    if size > MAX_NAME_BYTES:
        raise ValueError(f"is {size} bytes as UTF-8, more than Temporal's {MAX_NAME_BYTES}")
    if value.startswith(RESERVED_TASK_QUEUE_PREFIX):
        raise ValueError(f"must not start with Temporal's reserved {RESERVED_TASK_QUEUE_PREFIX!r}")
    return value


def _bounded_id(value: str) -> str:
    problem = id_problem("the ID", value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _workflow_id(value: str) -> str:
    size = utf8_bytes(value)
    if not value or size > MAX_NAME_BYTES:
        raise ValueError(f"must be 1..{MAX_NAME_BYTES} bytes as UTF-8, got {size}")
    return value


# An activity type name: 1..MAX_NAME_BYTES bytes.
ActivityName = Annotated[str, AfterValidator(_activity_name)]
# A task queue name ("" is the workflow's own queue): at most MAX_NAME_BYTES bytes, not reserved.
TaskQueueName = Annotated[str, AfterValidator(_task_queue)]
# An object or ledger ID: at most MAX_ID_BYTES bytes.
BoundedId = Annotated[str, AfterValidator(_bounded_id)]
# A workflow ID: 1..MAX_NAME_BYTES bytes.
WorkflowId = Annotated[str, AfterValidator(_workflow_id)]
