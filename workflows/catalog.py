"""What a message catalog declares (pure): each message a capability takes, once.

A capability's catalog (`workflows/schedule/messages.py`, `workflows/ledger/messages.py`) is a
tuple of `Message`: its wire name, the kinds it is sent as (signal, update, query, and whether
an update may start the workflow), its strict payload model, what it does, and whether it
wakes the workflow's main loop. Everything that speaks the message reads it from there:

- the workflow shell registers its Temporal handlers from it (`workflows.handlers`), each
  handler routing the payload to the shell's `apply_<name>` (and `check_<name>` in an
  update's validator), which carry out the core's transition;
- the client's methods and the CLI's subcommands, with their help and the bounds of every
  field (read from the payload model);
- the contract's message tables, checked against it by a test.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from workflows.validation import InvalidRequest, format_validation_error


class Kind(enum.Enum):
    """How a message may be sent."""

    SIGNAL = "signal"
    UPDATE = "update"
    QUERY = "query"
    # An update that may also start the workflow (update-with-start).
    WITH_START = "with-start"


@dataclass(frozen=True)
class Message:
    """One message a workflow takes (see the module)."""

    name: str
    doc: str
    kinds: frozenset[Kind]
    # The payload's strict model, or None when the message takes none (its payload, if a
    # caller sends one, is still bounded and must be readable).
    payload: type[BaseModel] | None = None
    # What an update (or query) returns, in words, for the docs and the CLI's help.
    returns: str = ""
    # Whether applying it may change what the main loop decides next.
    wakes: bool = False
    # Sent by the product's own workflows, never by a user: no client method, no CLI command.
    internal: bool = False
    # A query that takes an argument (a query that takes none keeps a handler without one).
    query_takes_payload: bool = field(default=False)

    @property
    def summary(self) -> str:
        """The first sentence of `doc`: the CLI's help line."""
        return self.doc.split(". ")[0].rstrip(".") + "."

    def is_(self, kind: Kind) -> bool:
        """Whether the message may be sent as `kind`."""
        return kind in self.kinds

    def parse(self, value: Any, context: dict[str, Any] | None = None) -> Any:
        """`value` (JSON values) read strictly as the payload model; InvalidRequest naming the
        field and the value otherwise. Without a model, `value` as it is."""
        if self.payload is None:
            return value
        try:
            text = json.dumps({} if value is None else value)
        except (TypeError, ValueError) as error:  # not JSON values (a caller in this process)
            raise InvalidRequest(f"{self.name} payload must be JSON values: {error}") from None
        try:
            # In JSON mode, as the payload arrived: strict, but an enum still takes its value.
            return self.payload.model_validate_json(text, strict=True, context=context)
        except ValidationError as error:
            raise InvalidRequest(format_validation_error(f"{self.name} payload", error)) from None


def kinds(*given: Kind) -> frozenset[Kind]:
    """The kinds of a catalog entry."""
    return frozenset(given)


class Catalog:
    """A capability's messages, by wire name, in declaration order."""

    def __init__(self, messages: Iterable[Message]) -> None:
        self._messages = {message.name: message for message in messages}

    def __iter__(self) -> Iterator[Message]:
        return iter(self._messages.values())

    def __getitem__(self, name: str) -> Message:
        return self._messages[name]

    def __contains__(self, name: object) -> bool:
        return name in self._messages

    def of_kind(self, kind: Kind, *, internal: bool = False) -> tuple[Message, ...]:
        """The messages sent as `kind` (the internal ones only when asked)."""
        return tuple(m for m in self if m.is_(kind) and (internal or not m.internal))
