"""How both capabilities word a refused input, and read start settings strictly (pure).

Start settings are validated twice: laxly, as every release has (pydantic converts `"2"` to
2, `true` to 1, `2.0` to 2, and the schedule ignored unknown fields), and strictly. What only
the lax reading accepts is refused for runs started from now on (`ShellKernel.check_start`),
while a run recorded before keeps its converted value, so its history still replays.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError, ValidationInfo

StartInput = TypeVar("StartInput", bound=BaseModel)

# The refusal types on the wire, the same for the same kind of refusal in both
# capabilities: a refused message is `InvalidRequest` (or a subclass naming a narrower
# kind), a refused start input fails the workflow once as `INVALID_START_INPUT`.
INVALID_START_INPUT = "InvalidStartInput"
# The key under which a refusal's details name the type the same refusal had in 0.1.0, for
# callers that still match on it (kept for one release; see CHANGELOG.md).
FORMER_TYPE = "former_type"


class InvalidRequest(ValueError):
    """A message refused before anything is recorded; the message names the field and the
    value. The class name is the rejection's type on the wire (a subclass per narrower kind
    of refusal: `NoLiveSchedule`, `NoRoomForRuns`, `LedgerStopped`)."""


# The validation context of settings carried by continue-as-new: a bound a release tightened
# since is not applied to them (a run an earlier build accepted must not fail on continuing).
CARRIED_CONTEXT = {"carried": True}


def carried(info: ValidationInfo) -> bool:
    """Whether a validator reads settings carried by continue-as-new (`CARRIED_CONTEXT`)."""
    return isinstance(info.context, dict) and info.context.get("carried") is True


# A refusal names a field by its path: at most this many characters of it.
MAX_SHOWN_PATH = 200


def format_validation_error(what: str, error: ValidationError) -> str:
    """`invalid <what>: field.path: message (got value)` for each problem, one line."""
    parts = []
    for item in error.errors():
        path = ".".join(str(p) for p in item["loc"]) or "(root)"
        if len(path) > MAX_SHOWN_PATH:  # a raw caller's field name can be any length
            path = path[: MAX_SHOWN_PATH - 3] + "..."
        parts.append(problem(path, item["msg"], item.get("input")))
    return f"invalid {what}: " + "; ".join(parts)


def problem(path: str, what: str, value: object) -> str:
    """One problem of a refused payload: `field.path: message (got value)`, the value cut
    to 80 characters."""
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return f"{path}: {what} (got {shown})"


def strict_problem(
    what: str,
    model: type[BaseModel],
    settings: Mapping[str, Any],
    context: Mapping[str, Any] | None = None,
) -> str | None:
    """Why `settings` (already valid laxly) is refused by a strict reading as `model`, or
    None: a field `model` does not have, or a value of another JSON type that lax validation
    converted."""
    unknown = sorted(str(name) for name in settings if name not in model.model_fields)
    if unknown:
        return f"invalid {what}: unknown field(s) {', '.join(unknown)[:200]}"
    try:
        # In JSON mode, as the input arrived: a strict reading that still takes an enum's value.
        model.model_validate_json(json.dumps(dict(settings)), strict=True, context=context)
    except ValidationError as error:
        return format_validation_error(what, error)
    except (TypeError, ValueError):  # not JSON values (a subclass decoding its own input)
        return None
    return None


def read_start_input(
    what: str,
    read: Callable[[], object],
    model: type[StartInput],
    settings_model: type[BaseModel],
    carried_field: str,
) -> tuple[StartInput, str | None, str | None]:
    """A workflow's start input as `model`, with why it is refused and why a strict reading
    of its settings (`settings_model`, everything but `carried_field`) refuses it, if so. A
    refused input reads as `model()`'s defaults. `read()` returns the input as JSON values,
    or raises ValueError. Settings carried by continue-as-new (`carried_field` set) are read
    with `CARRIED_CONTEXT`."""
    context = None
    try:
        raw = read() or {}
        if isinstance(raw, dict) and raw.get(carried_field) is not None:
            context = CARRIED_CONTEXT
        start = model.model_validate(raw, context=context)
    except ValidationError as invalid:
        return model(), format_validation_error(what, invalid), None
    except ValueError as unreadable:
        return model(), f"invalid {what}: {unreadable}", None
    coerced = None
    if isinstance(raw, dict):
        given = {k: v for k, v in raw.items() if k != carried_field}
        coerced = strict_problem(what, settings_model, given, context)
    return start, None, coerced


# --- changing a live workflow's settings (`configure`) ---

# The settings a `configure` leaves, as JSON: the bound a start input has in the client
# (`durability.client.MAX_START_INPUT_BYTES`), here kept by the workflow itself, so a raw
# caller cannot grow what every continue-as-new carries.
MAX_SETTINGS_BYTES = 64 * 1024


def configured(
    what: str,
    current: StartInput,
    raw: object,
    fixed: Mapping[str, str],
    max_bytes: int = MAX_SETTINGS_BYTES,
) -> StartInput:
    """`current` with the start fields `raw` (a partial start input: a non-empty JSON object)
    replaced, read strictly as a new run reads its start input (the same bounds and
    messages); InvalidRequest naming the field and the value otherwise. `fixed` names the
    fields that cannot change, each with why. A field is replaced whole: an object field takes
    the object given, its missing fields their defaults, as in a start input."""
    model = type(current)
    if not isinstance(raw, dict) or not raw:
        raise InvalidRequest(
            f"{what} payload must be a non-empty JSON object of start fields, got {raw!r:.200}"
        )
    frozen = sorted(str(name) for name in raw if name in fixed)
    if frozen:
        name = frozen[0]
        raise InvalidRequest(f"{what}.{name[:200]} cannot change: {fixed[name]}")
    unknown = sorted(str(name) for name in raw if name not in model.model_fields)
    if unknown:
        raise InvalidRequest(f"{what} has unknown field(s) {', '.join(unknown)[:200]}")
    merged = {**current.model_dump(mode="json"), **raw}
    try:
        text = json.dumps(merged, separators=(",", ":"))
    except (TypeError, ValueError) as error:  # not JSON values (a caller in this process)
        raise InvalidRequest(f"{what} payload must be JSON values: {error}") from None
    if len(text) > max_bytes:
        raise InvalidRequest(
            f"{what} would leave settings of {len(text)} bytes as JSON, more than {max_bytes}"
        )
    try:
        # In JSON mode, as a start input arrives: strict, but an enum still takes its value.
        model.model_validate_json(text, strict=True)
        return model.model_validate(merged)
    except ValidationError as error:
        raise InvalidRequest(format_validation_error(what, error)) from None


def settings_view(settings: BaseModel, internal: frozenset[str]) -> dict[str, Any]:
    """The `settings` query (and `configure`'s result): every start field as JSON but the
    `internal` ones, whether set or left at its default."""
    every = type(settings).model_construct(
        _fields_set=set(type(settings).model_fields), **dict(settings)
    )
    view: dict[str, Any] = every.model_dump(mode="json")
    return {name: value for name, value in view.items() if name not in internal}
