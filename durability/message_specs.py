"""A catalog's messages read as CLI commands (`durability.message_cli.MessageCommand`): the
help line is the message's summary, and each payload field an option whose help states the
field's bounds as its model declares them (`ge`, `le`, `max_length`, ... and its default).

This module loads pydantic: it is for building the commands (and for tests), not for
answering `--help`.
"""

from __future__ import annotations

import enum
import types
import typing
from typing import Any, Literal

from pydantic.fields import FieldInfo

from durability.message_cli import MessageCommand, Option
from workflows.catalog import Catalog, Kind, Message

# The constraint keywords a field's bounds are read from, as pydantic keeps them.
_BOUND_KEYS = ("ge", "gt", "le", "lt", "min_length", "max_length")


def field_bounds(info: FieldInfo) -> dict[str, Any]:
    """The field's constraints (`{"ge": 1, "le": 100}`), from its metadata."""
    found: dict[str, Any] = {}
    for item in info.metadata:
        for key in _BOUND_KEYS:
            value = getattr(item, key, None)
            if value is not None:
                found[key] = value
    return found


def _kind_of(annotation: Any) -> tuple[str, tuple[str, ...] | None]:
    """How an option of this type is read: its kind and its choices (an enum, a Literal)."""
    arguments = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType) and len(arguments) == 1:
        return _kind_of(arguments[0])
    if origin is typing.Annotated:
        return _kind_of(arguments[0])
    if origin is Literal and all(isinstance(a, str) for a in arguments):
        return "str", tuple(arguments)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "str", tuple(str(member.value) for member in annotation)
    for kind in (bool, int, float, str):  # bool first: a bool is an int
        if annotation is kind:
            return kind.__name__, None
    return "json", None


def bounds_text(info: FieldInfo) -> str:
    """The field's bounds and default in words: `1..100, default 10`, `at most 1200
    characters`; empty when it has neither."""
    bounds = field_bounds(info)
    parts: list[str] = []
    low, high = bounds.get("ge"), bounds.get("le")
    if low is not None and high is not None:
        parts.append(f"{low}..{high}")
    else:
        for key, words in (("ge", "at least"), ("gt", "above"), ("le", "at most"), ("lt", "below")):
            if key in bounds:
                parts.append(f"{words} {bounds[key]}")
    unit = "item" if typing.get_origin(info.annotation) in (list, tuple, set) else "character"
    shortest, longest = bounds.get("min_length"), bounds.get("max_length")
    if shortest is not None and longest is not None:
        parts.append(f"{shortest}..{longest} {unit}s")
    elif longest is not None:
        parts.append(f"at most {longest} {unit}{'' if longest == 1 else 's'}")
    elif shortest is not None:
        parts.append(f"at least {shortest} {unit}{'' if shortest == 1 else 's'}")
    default = None if info.is_required() else info.get_default(call_default_factory=True)
    if isinstance(default, enum.Enum):
        default = default.value
    if isinstance(default, int | float | str):  # a container's default is not said in a line
        parts.append(f"default {default}")
    return ", ".join(parts)


def option_of(name: str, info: FieldInfo) -> Option:
    """The option of payload field `name`: help from its description (or its name) and its
    bounds."""
    kind, choices = _kind_of(info.annotation)
    described = info.description or name.replace("_", " ")
    bounds = bounds_text(info)
    return Option(
        field=name,
        kind=kind,
        help=f"{described} ({bounds})" if bounds else described,
        required=info.is_required(),
        choices=choices,
    )


def command_of(message: Message) -> MessageCommand:
    """`message` as a CLI command."""
    fields = message.payload.model_fields if message.payload is not None else {}
    return MessageCommand(
        message=message.name,
        help=message.summary,
        options=tuple(option_of(name, info) for name, info in fields.items()),
        update=message.is_(Kind.UPDATE),
        signal=message.is_(Kind.SIGNAL),
    )


def commands_of(catalog: Catalog) -> tuple[MessageCommand, ...]:
    """A command per message a user sends (an update or a signal, not internal), in the
    catalog's order."""
    return tuple(
        command_of(message)
        for message in catalog
        if not message.internal and (message.is_(Kind.UPDATE) or message.is_(Kind.SIGNAL))
    )


def render(catalogs: dict[str, Catalog]) -> str:
    """The source of a module holding each catalog's commands under its key (a tuple of
    `MessageCommand`): what `durability/cli_messages.py` is generated as, for the CLI to
    build its parser from without loading the catalogs."""
    lines = [
        '"""The CLI commands of the message catalogs, as `durability.message_specs` reads them.',
        "",
        "Generated by `python -m durability.message_specs`: do not edit. A test fails when it",
        "no longer matches the catalogs.",
        '"""',
        "",
        "# ruff: noqa: E501 (the messages' help lines, as the catalogs word them)",
        "",
        "from durability.message_cli import MessageCommand, Option",
    ]
    for key, catalog in catalogs.items():
        lines += ["", f"{key} = {commands_of(catalog)!r}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Write `durability/cli_messages.py` from the product's catalogs."""
    import importlib
    import subprocess
    import sys
    from pathlib import Path

    from durability.checks import CATALOGS

    catalogs = {
        capability.upper(): getattr(importlib.import_module(module), name)
        for capability, (module, name) in CATALOGS.items()
    }
    path = Path(__file__).with_name("cli_messages.py")
    path.write_text(render(catalogs))
    subprocess.run([sys.executable, "-m", "ruff", "format", "--quiet", str(path)], check=False)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
