"""What the CLI's commands share: their types, errors, option readers and output formats."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from durability.client import DurabilityClient


Command = Callable[["DurabilityClient", argparse.Namespace], Coroutine[Any, Any, Any]]
Show = Callable[[Any, argparse.Namespace], str]


class UsageError(Exception):
    """Bad command-line input; the message names the option and the value."""


class NotDone(Exception):
    """The command printed its `result` and did not do all it was asked (exit code 1):
    a bulk command without `--yes`, or a batch job whose signals did not all arrive."""

    def __init__(self, result: Any, message: str) -> None:
        super().__init__(message)
        self.result = result


def iso(epoch_ms: Any) -> str:
    if not isinstance(epoch_ms, int):
        return "-" if epoch_ms is None else str(epoch_ms)
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds")


# A number in a message that reads as epoch milliseconds of 2001..2999.
EPOCH_MS = re.compile(r"\b\d{13,14}\b")
EPOCH_MS_RANGE = range(10**12, 32_503_680_000_000)


def with_iso_times(message: str) -> str:
    """`message` with each epoch-ms time followed by its ISO 8601 UTC form."""

    def readable(match: re.Match[str]) -> str:
        value = int(match[0])
        return f"{value} ({iso(value)})" if value in EPOCH_MS_RANGE else match[0]

    return EPOCH_MS.sub(readable, message)


def cell(value: Any) -> str:
    """A table cell: lists joined by commas, objects as JSON, booleans as yes/no, None as `-`."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(cell(item) for item in value) or "-"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table."""
    cells = [[str(h) for h in headers]] + [[cell(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def json_arg(option: str, text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"{option} must be JSON, got {text!r} ({error.msg})") from None


def epoch_ms(option: str) -> Callable[[str], int]:
    """Parse epoch milliseconds or an ISO 8601 time (UTC when no offset is given)."""

    def parse(text: str) -> int:
        if text.isdigit():
            return int(text)
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{option} must be epoch ms or ISO 8601, got {text!r}"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)

    return parse


def error_text(error: Any) -> str | None:
    if not isinstance(error, dict):
        return None
    return f"{error.get('name')}: {error.get('message')}"


def counters_table(counters: dict[str, Any], heading: str) -> str:
    """Counters as a `heading` / value table; a counter by kind gets a row per kind."""
    rows: list[tuple[str, Any]] = []
    for name, value in counters.items():
        if isinstance(value, dict):
            rows.extend((f"{name}.{kind}", count) for kind, count in sorted(value.items()))
            if not value:
                rows.append((name, 0))
        else:
            rows.append((name, value))
    return table((heading, "value"), rows)


def phases(counts: Any) -> str | None:
    """`2 blocked, 1 pending` from a count per phase; None (`-`) when not reported."""
    if not isinstance(counts, dict):
        return None
    return ", ".join(f"{n} {phase}" for phase, n in sorted(counts.items())) or "none"


def show_settings(result: Any, args: argparse.Namespace) -> str:
    if isinstance(result, dict) and "before" in result and "changes" in result:
        return show_dry_run(result, args)
    if result == {"signalled": True}:
        return "signalled: checked on the current settings; applied when the workflow takes it"
    return show_fields(result, args)


def show_fields(result: Any, args: argparse.Namespace) -> str:
    return table(("field", "value"), [(k, v) for k, v in result.items()])


NEW_HELP = (
    "start a new {what} if the ID's workflow is closed (it starts without the old one's "
    "state); without it a closed ID is refused"
)


def add_configure(cmd: argparse.ArgumentParser, what: str, example: str) -> None:
    cmd.add_argument(
        "--set",
        required=True,
        help=f"JSON object of start fields to change, e.g. '{example}' (the others are kept)",
    )
    cmd.add_argument("--signal", action="store_true", help=f"signal the {what} instead")


def show_dry_run(result: Any, args: argparse.Namespace) -> str:
    """A `--dry-run`'s answer: fire times before and after, then what else changes."""
    before, after = result["before"], result["after"]
    rows = [
        (iso(before[i]) if i < len(before) else "-", iso(after[i]) if i < len(after) else "-")
        for i in range(max(len(before), len(after)))
    ]
    parts = [table(("next before", "next after"), rows) if rows else "no fire time before or after"]
    if result.get("applied") is False:
        parts.append(f"not applied: version {args.version} is not above the stored version")
    changes = result.get("changes") or {}
    if changes:
        parts.append(table(("field", "before", "after"), [(k, *v) for k, v in changes.items()]))
    elif result.get("applied") is not False:
        parts.append("nothing else changes")
    parts.append("dry run: nothing was sent")
    return "\n\n".join(parts)
