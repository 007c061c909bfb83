"""The workflows' own rules, applied by the client before anything is sent.

A with-start whose message or start input the workflow refuses would still create the
workflow, and a signal it refuses is dropped unseen: both are checked here first, with the
parse functions the workflows themselves run. Plain updates are left to the workflow's
validator, which refuses them without recording anything. The validators are imported by the
calls that check input with them: a client that only reads loads none.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from durability.errors import RejectedError
from workflows import ledger as _ledger
from workflows.ledger import LEDGER_ID_PREFIX as LEDGER_ID_PREFIX
from workflows.limits import any_id_problem
from workflows.schedule import models as _schedule_models
from workflows.validation import INVALID_START_INPUT, InvalidRequest, format_validation_error

if TYPE_CHECKING:
    from workflows.catalog import Message


def schedule_workflow_id(object_id: str) -> str:
    """`schedule:<object_id>`; InvalidRequest naming the ID when it cannot be one (empty,
    blank, spaces around it, control characters, over Temporal's limits). Every call for
    an object goes through here, so a bad ID is refused before anything is sent."""
    check_id("object_id", object_id)
    return _schedule_models.schedule_workflow_id(object_id)


def ledger_workflow_id(ledger_id: str) -> str:
    """`ledger:<ledger_id>`; InvalidRequest naming the ID when it cannot be one (see
    `schedule_workflow_id`)."""
    check_id("ledger_id", ledger_id)
    return _ledger.ledger_workflow_id(ledger_id)


def check_id(field: str, value: str) -> None:
    problem = any_id_problem(field, value)
    if problem is not None:
        raise InvalidRequest(problem)


# The schedule's workflow ID prefix, as the schedule's own function makes it.
SCHEDULE_ID_PREFIX = _schedule_models.schedule_workflow_id("")


def set_payload(
    expression: str,
    version: int,
    jitter_ms: int | None = None,
    jitter_max_ms: int | None = None,
    params: Any = None,
) -> dict[str, Any]:
    """The wire `set` payload. `jitter_max_ms` asks the workflow to pick the jitter once."""
    if jitter_ms is not None and jitter_max_ms is not None:
        raise ValueError("give jitter_ms or jitter_max_ms, not both")
    payload: dict[str, Any] = {"expression": expression, "version": version}
    if jitter_ms is not None:
        payload["jitter_ms"] = jitter_ms
    if jitter_max_ms is not None:
        payload["jitter_ms"] = {"max_ms": jitter_max_ms}
    if params is not None:
        # Anything but an object is sent as it is, for the workflow's rules to refuse by name.
        payload["params"] = dict(params) if isinstance(params, Mapping) else params
    return payload


def cancel_payload(version: int | None) -> dict[str, Any]:
    """The wire `cancel` payload; without `version` it cancels whatever version is live."""
    return {} if version is None else {"version": version}


def skip_payload(operation_id: str, reason: str | None = None) -> dict[str, Any]:
    """The wire `skip` payload; without `reason` the workflow records "skipped"."""
    payload: dict[str, Any] = {"operation_id": operation_id}
    if reason is not None:
        payload["reason"] = reason
    return payload


def now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)


def as_start_input(
    key: str, business_id: str, options: Any, internal: str, workflow_id: str, kind: str
) -> dict[str, Any]:
    """`options` as a start input: a JSON object without the workflow's `internal` field (the
    state a continue-as-new carries)."""
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        start_refused(
            workflow_id, kind, f"the start options must be a JSON object, got {options!r:.200}"
        )
    if internal in options:
        start_refused(
            workflow_id,
            kind,
            f"{internal} is internal: the state a run carries across continue-as-new",
        )
    return {key: business_id, **options}


def start_refused(
    workflow_id: str, former: str, error: str | None, coerced: str | None = None
) -> None:
    """A new run fails on a start input with an `error`, or one only a lax reading accepts
    (`coerced`: an unknown field, a value of another JSON type)."""
    problem = error or coerced
    if problem is not None:
        raise RejectedError(
            problem, update="start", workflow_id=workflow_id, type=INVALID_START_INPUT,
            former_type=former,
        )  # fmt: skip


def schedule_start_input(object_id: str, options: Any = None) -> dict[str, Any]:
    """The schedule's start input for `options`; RejectedError (`InvalidStartInput`) naming
    the field when a new schedule would fail on it."""
    from workflows.schedule import core as schedule_core

    workflow_id = schedule_workflow_id(object_id)
    kind = "InvalidScheduleInput"
    start_input = as_start_input("object_id", object_id, options, "carried", workflow_id, kind)
    start = schedule_core.parse_start(lambda: start_input, workflow_id)
    start_refused(workflow_id, kind, start.error, start.coerced)
    return start_input


def ledger_start_input(ledger_id: str, options: Any = None) -> dict[str, Any]:
    """The ledger's start input for `options`; RejectedError (`InvalidStartInput`) naming the
    field when a new ledger would fail on it."""
    from workflows.ledger import core as ledger_core

    workflow_id = ledger_workflow_id(ledger_id)
    kind = "InvalidLedgerInput"
    start_input = as_start_input(
        "ledger_id", ledger_id, options, "carried_state", workflow_id, kind
    )
    start = ledger_core.read_start(lambda: start_input, workflow_id)
    start_refused(workflow_id, kind, start.error, start.coerced)
    return start_input


def checked(workflow_id: str, message: str, check: Callable[[], object]) -> None:
    """Run one of the workflows' parse functions; its refusal becomes a RejectedError."""
    try:
        check()
    except ValueError as error:  # InvalidRequest and its kinds: ValueErrors naming the field
        kind = type(error).__name__ if isinstance(error, InvalidRequest) else "InvalidRequest"
        raise RejectedError(
            str(error), update=message, workflow_id=workflow_id, type=kind
        ) from None


# Each capability's message catalog (`workflows.catalog`): its module (imported on first use)
# and its name.
CATALOGS = {
    "schedule": ("workflows.schedule.messages", "SCHEDULE_MESSAGES"),
    "ledger": ("workflows.ledger.messages", "LEDGER_MESSAGES"),
}
# The messages this client checks before sending them, by `<capability>.<message>`. The
# schedule's are read by their catalog entry, as the schedule reads them; the ledger reads
# its own with the parse functions named here (their refusals name the `<message> input`).
CHECKED_BY_CATALOG = ("schedule.cancel", "schedule.pause", "schedule.describe")
PARSERS = {
    "ledger.release": ("workflows.ledger.core", "parse_release"),
    "ledger.snapshot": ("workflows.ledger.core", "parse_snapshot_query"),
    "ledger.stop": ("workflows.ledger.core", "parse_stop"),
    "ledger.skip": ("durability.checks", "parse_skip"),
}
CHECKED = (*CHECKED_BY_CATALOG, *PARSERS)


def catalog_message(message: str) -> Message:
    """The catalog entry of `message` (`<capability>.<message>`, e.g. `schedule.pause`)."""
    capability, _, name = message.partition(".")
    module, catalog = CATALOGS[capability]
    found: Message = getattr(importlib.import_module(module), catalog)[name]
    return found


def parse(message: str, payload: Any) -> object:
    """`payload` of `message` (`<capability>.<message>`, one of CHECKED) read as the workflow
    reads it; InvalidRequest naming the field and value as it refuses."""
    if message in PARSERS:
        module, function = PARSERS[message]
        workflow_parse: Callable[[Any], object] = getattr(importlib.import_module(module), function)
        return workflow_parse(payload)
    return catalog_message(message).parse(payload)


def check(workflow_id: str, message: str, payload: Any) -> None:
    """`parse(message, payload)`, its refusal as a RejectedError of the message's name."""
    checked(workflow_id, message.partition(".")[2], lambda: parse(message, payload))


def parse_skip(raw: Any) -> object:
    """The ledger's validation of a skip input, refused as the ledger refuses it."""
    from pydantic import ValidationError

    from workflows.ledger.models import SkipInput

    try:
        return SkipInput.model_validate(raw)
    except ValidationError as error:
        raise InvalidRequest(format_validation_error("skip input", error)) from None


def check_configure(kind: str, changes: Any, current: Mapping[str, Any]) -> object:
    """`configure` of `changes` as the workflow checks it, on its `current` settings."""
    if kind == "schedule":
        from workflows.schedule import core as schedule_core
        from workflows.schedule.models import ScheduleInput

        return schedule_core.parse_configure(changes, ScheduleInput.model_validate(current))
    from workflows.ledger import core as ledger_core
    from workflows.ledger.models import LedgerConfig

    return ledger_core.parse_configure(changes, LedgerConfig.model_validate(current))
