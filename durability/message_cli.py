"""CLI commands built from a message catalog (`workflows.catalog`), one per message a user
sends: its help line is the message's summary, its options are its payload's fields, each
with the field's bounds (`durability.message_specs` reads them from the payload model).

This module is plain data and argparse: the CLI builds its parser from `MessageCommand`s
without loading pydantic or the workflows' models, which a command loads only to send.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from durability.client import DurabilityClient
    from workflows.catalog import Catalog

# How an option's text is read, by the field's type.
_READERS: dict[str, Any] = {"int": int, "float": float, "str": str}


@dataclass(frozen=True)
class Option:
    """One field of a message's payload, as a command-line option."""

    field: str
    # `int`, `float`, `str`, `bool` (a flag) or `json` (any JSON value).
    kind: str
    help: str
    required: bool = False
    choices: tuple[str, ...] | None = None

    @property
    def flag(self) -> str:
        """`--<field>`, with `-` for `_`."""
        return "--" + self.field.replace("_", "-")


@dataclass(frozen=True)
class MessageCommand:
    """A message a user sends, as a CLI command (`durability.message_specs.commands_of`)."""

    # The wire name, and the command's name (`-` for `_`).
    message: str
    help: str
    options: tuple[Option, ...]
    # The kinds it is sent as: an update unless `--signal` (or only ever a signal).
    update: bool
    signal: bool

    @property
    def command(self) -> str:
        return self.message.replace("_", "-")


def add_message_command(
    group: Any, spec: MessageCommand, key: str, key_help: str
) -> argparse.ArgumentParser:
    """Add `spec`'s command to the subparsers `group`: its positional `key` (the workflow's
    business ID), an option per payload field and, for a message sent both ways,
    `--signal`. Returns the command's parser; `args.message_command` is `spec`."""
    text = _literal(spec.help)
    command: argparse.ArgumentParser = group.add_parser(spec.command, help=text, description=text)
    command.add_argument(key, help=key_help)
    for option in spec.options:
        if option.kind == "bool":
            command.add_argument(
                option.flag, action="store_true", default=None, help=_literal(option.help)
            )
            continue
        command.add_argument(
            option.flag,
            dest=option.field,
            type=_READERS.get(option.kind, str),
            required=option.required,
            choices=option.choices,
            help=_literal(option.help),
        )
    if spec.update and spec.signal:
        command.add_argument(
            "--signal", action="store_true", help="send a signal instead of an update"
        )
    command.set_defaults(message_command=spec)
    return command


def _literal(text: str) -> str:
    """`text` as argparse prints it (it reads `%` as a format)."""
    return text.replace("%", "%%")


def payload_from(spec: MessageCommand, args: argparse.Namespace) -> dict[str, Any]:
    """The payload the options given in `args` make (an option not given is left out, for the
    workflow's default). A `json` option's text is read as JSON (ValueError naming it)."""
    payload: dict[str, Any] = {}
    for option in spec.options:
        value = getattr(args, option.field, None)
        if value is None:
            continue
        if option.kind == "json":
            try:
                value = json.loads(value)
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"{option.flag} must be JSON, got {value!r} ({error.msg})"
                ) from None
        payload[option.field] = value
    return payload


async def send_from_args(
    client: DurabilityClient,
    catalog: Catalog,
    workflow_id: str,
    args: argparse.Namespace,
    context: Mapping[str, Any] | None = None,
) -> Any:
    """Send the message of the command `args` parsed, with the payload its options make, as
    `DurabilityClient.send_message` does (checked by the payload model first)."""
    spec: MessageCommand = args.message_command
    as_signal = bool(getattr(args, "signal", False)) or not spec.update
    return await client.send_message(
        catalog[spec.message],
        workflow_id,
        payload_from(spec, args),
        as_signal=as_signal,
        context=None if context is None else dict(context),
    )
