"""`durability`: the command line for schedules and ledgers.

    durability schedule set acct-42 "@every 5m" --version 3 --params '{"plan": "pro"}'
    durability schedule get acct-42
    durability schedule runs acct-42 --json
    durability schedule describe acct-42 --runs 5 --next 3
    durability schedule list --query "DurabilityScheduleVersion >= 3"
    durability schedule pause --query "DurabilityObjectId STARTS_WITH 'acct-'" --dry-run
    durability ledger enqueue canvas-7 --file ops.json
    durability ledger snapshot canvas-7
    durability ledger skip canvas-7 op-3 --reason "client upgrade pending"

Connection settings come from Temporal's environment configuration (TEMPORAL_ADDRESS, ...).
`--json` and `--task-queue` go before or after the command. Tables show times in ISO 8601
UTC; `--json` keeps epoch milliseconds, as the workflows' wire contract has them.
Booleans print as sentences ("already paused"); `--json` prints the values as the
workflows answer them. Only `schedule set` and `ledger enqueue` create a workflow; any
other command on an ID with none says "no such schedule/ledger <id>", and on a closed one
says how it closed. Exit codes: 0 ok, 1 rejected, not found or closed, 2 bad usage or
settings.

This module builds the parser and runs a command; the commands are in
`durability.cli_schedule`, `durability.cli_ledger` (and `--query` in `durability.cli_bulk`),
the codec server's in `durability.cli_codec`, what they share in `durability.cli_common`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from durability.cli_bulk import BULK_COMMANDS, check_bulk_usage
from durability.cli_catalog import add_catalog_commands
from durability.cli_codec import add_codec_server, run_codec_server
from durability.cli_common import (
    Command,
    NotDone,
    Show,
    UsageError,
    iso,
    json_arg,
    table,
    with_iso_times,
)
from durability.cli_ledger import (
    LEDGER_COMMANDS,
    add_ledger_arguments,
    ledger_list,
    read_operations,
)
from durability.cli_messages import LEDGER, SCHEDULE
from durability.cli_schedule import SCHEDULE_COMMANDS, add_schedule_arguments, schedule_list
from durability.settings import ConfigurationError

# The Temporal client, the workflows' validators and OpenTelemetry are imported only by the
# commands that talk to Temporal (`run_command`): `--help`, a usage error or a bad JSON
# option answer without loading them.
if TYPE_CHECKING:
    from durability.client import DurabilityClient


# -- list, of either group ---------------------------------------------------------------


def show_listed(result: Any, args: argparse.Namespace) -> str:
    if not result:
        return "none found"
    if args.group == "ledger":  # version and next tick are the schedule's
        return table(
            ("id", "status", "operations", "started_at"),
            [(w["id"], w["status"], _counts(w["counts"]), iso(w["started_at"])) for w in result],
        )
    rows = [
        (
            w["id"],
            w["status"],
            w["state"],
            w["version"],
            iso(w["next_tick_at"]),
            iso(w["started_at"]),
        )
        for w in result
    ]
    return table(("id", "status", "state", "version", "next_tick_at", "started_at"), rows)


def _counts(counts: dict[str, int] | None) -> str | None:
    """A ledger's operations per phase as `3 pending, 2 resolved`; None (`-`) when unknown."""
    if counts is None:
        return None
    return ", ".join(f"{n} {phase}" for phase, n in sorted(counts.items())) or "none"


# -- parser ---------------------------------------------------------------------


def _global_options(suppress: bool) -> argparse.ArgumentParser:
    """`--json` and `--task-queue`, accepted before and after the command: the copies on
    the commands default to SUPPRESS so they never overwrite a value given before."""
    options = argparse.ArgumentParser(add_help=False)
    default: Any = argparse.SUPPRESS if suppress else False
    options.add_argument("--json", action="store_true", default=default, help="print JSON")
    options.add_argument(
        "--task-queue",
        default=argparse.SUPPRESS if suppress else None,
        help="task queue for new workflows (default: env)",
    )
    return options


def _add_list(commands: Any, run: Command, what: str) -> None:
    cmd = commands.add_parser("list", help=f"{what} found by visibility (running by default)")
    cmd.add_argument("--query", help="a visibility filter, e.g. \"ExecutionStatus = 'Completed'\"")
    cmd.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    cmd.set_defaults(run=run, show=show_listed)


def _add_commands(
    group: Any,
    key: str,
    commands: Sequence[tuple[str, Command, Show, str]],
    key_optional: Sequence[str] = (),
) -> dict[str, argparse.ArgumentParser]:
    """Add `commands` to `group`, each with its positional `key` (which those named in
    `key_optional` may leave out); returns them by name."""
    parsers: dict[str, argparse.ArgumentParser] = {}
    for name, run, show, text in commands:
        parsers[name] = cmd = group.add_parser(name, help=text, description=text)
        what = "the schedule's object ID" if key == "object_id" else "the ledger's ID"
        cmd.add_argument(
            key,
            nargs="?" if name in key_optional else None,
            help=what + (" (or --query)" if name in key_optional else ""),
        )
        cmd.set_defaults(run=run, show=show)
    return parsers


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="durability", description=__doc__.split("\n")[0], parents=[_global_options(False)]
    )
    parser.add_argument(
        "--version", action="version", version=f"durability {package_version()}",
        help="print durability's version and exit",
    )  # fmt: skip
    common = _global_options(True)
    top = parser.add_subparsers(dest="group", required=True)

    class CommandParser(argparse.ArgumentParser):
        """Every command's parser also takes the global options."""

        def __init__(self, **kwargs: Any) -> None:
            kwargs.setdefault("parents", [common])
            super().__init__(**kwargs)

    schedule = top.add_parser(
        "schedule", help="per-object recurring schedules", parents=[common]
    ).add_subparsers(dest="command", required=True, parser_class=CommandParser)
    _add_list(schedule, schedule_list, "schedules")
    commands = _add_commands(schedule, "object_id", SCHEDULE_COMMANDS, BULK_COMMANDS)
    add_schedule_arguments(schedule, commands)
    written = [*commands, "list", "preview"]
    add_catalog_commands(schedule, "object_id", "the schedule's object ID", SCHEDULE, written)

    ledger = top.add_parser(
        "ledger", help="durable operation ledgers", parents=[common]
    ).add_subparsers(dest="command", required=True, parser_class=CommandParser)
    _add_list(ledger, ledger_list, "ledgers")
    commands = _add_commands(ledger, "ledger_id", LEDGER_COMMANDS)
    add_ledger_arguments(commands)
    add_catalog_commands(ledger, "ledger_id", "the ledger's ID", LEDGER, [*commands, "list"])
    add_codec_server(top)
    return parser


def parse_inputs(args: argparse.Namespace) -> None:
    """Check JSON options and files before anything is sent."""
    for option in ("params", "options", "set"):
        if hasattr(args, option):
            setattr(args, option, json_arg(f"--{option}", getattr(args, option)))
    if getattr(args, "group", None) == "schedule" and args.command in BULK_COMMANDS:
        check_bulk_usage(args)
    operation_id = getattr(args, "operation_id", None)
    if operation_id is not None and not operation_id.strip():
        raise UsageError(f"operation_id must not be empty, got {operation_id!r}")
    if getattr(args, "file", None) is not None:
        args.operations = read_operations(args.file)


class Interrupted(Exception):
    """Ctrl-C (SIGINT) stopped the command; the message says what was already sent."""


def interrupted_sentence(client: DurabilityClient | None) -> str:
    """What an interrupted command had already sent, as one line."""
    sent = [] if client is None else client.sent
    if not sent:
        return "interrupted: nothing was sent, nothing changed"
    last = sent[-1]
    if not last.answered:
        return (
            f"interrupted: {last.what} was sent and not answered yet: it may or may not take "
            "effect; read the state before sending it again"
        )
    return f"interrupted: {last.what} was sent" + (f"; {last.means}" if last.means else "")


async def execute(args: argparse.Namespace) -> Any:
    """Connect and run the command. SIGINT cancels it and raises Interrupted, saying what
    was already sent (the SDK turns a cancelled call into errors of its own)."""
    import signal

    from durability.client import DurabilityClient
    from durability.tracing import configure_tracing

    if getattr(args, "offline", False):
        return await args.run(None, args)
    loop = asyncio.get_running_loop()
    command = asyncio.current_task()
    stopped = False
    client: DurabilityClient | None = None

    def interrupt() -> None:
        nonlocal stopped
        stopped = True
        if command is not None:
            command.cancel()

    with contextlib.suppress(NotImplementedError):  # no signal handlers on this platform
        loop.add_signal_handler(signal.SIGINT, interrupt)
    tracing = configure_tracing("durability-cli")
    try:
        # Without an exporter a span goes nowhere: no interceptor, and no import of it.
        client = await DurabilityClient.connect(args.task_queue, tracing=tracing is not None)
        return await args.run(client, args)
    except BaseException as error:
        if stopped:
            raise Interrupted(interrupted_sentence(client)) from error
        raise
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        if tracing is not None:
            tracing.shutdown()  # send this command's spans before the process leaves


def package_version() -> str:
    """The installed durability's version (`durability --version`)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("durability")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def fail(message: str, code: int) -> int:
    """Print `message` as the command's one-line error; returns `code`."""
    one_line = " ".join(line.strip() for line in message.splitlines() if line.strip())
    print(f"durability: {with_iso_times(one_line)}", file=sys.stderr)
    return code


# The exit code of a command stopped by Ctrl-C (SIGINT), as shells report it: 128 + 2.
INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C while parsing or importing: nothing was sent
        return fail("interrupted: nothing was sent, nothing changed", INTERRUPTED)


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.group == "codec-server":
            return run_codec_server(args)
        parse_inputs(args)
    except (UsageError, ConfigurationError, ValueError, OSError) as error:
        return fail(str(error), 2)
    except Exception as error:  # never a traceback: one line naming what went wrong
        return fail(f"{type(error).__name__}: {error}", 1)
    return run_command(args)


def run_command(args: argparse.Namespace) -> int:
    """Run a schedule or ledger command against Temporal and print its result; returns the
    exit code."""
    from temporalio.client import WorkflowQueryFailedError
    from temporalio.service import RPCError

    from durability.client import (
        BatchBusyError,
        ClosedError,
        InvalidQueryError,
        NotFoundError,
        RejectedError,
        UnansweredError,
    )
    from durability.errors import NoWorkerError
    from durability.sending import UNANSWERED_STATUSES

    try:
        result = asyncio.run(execute(args))
    except Interrupted as error:
        return fail(str(error), INTERRUPTED)
    except KeyboardInterrupt:  # before the command's loop ran: nothing was sent
        return fail("interrupted: nothing was sent, nothing changed", INTERRUPTED)
    except NoWorkerError as error:
        return fail(str(error), 1)
    except UnansweredError as error:  # a TimeoutError, so an OSError: before that clause
        return fail(str(error), 1)
    except InvalidQueryError as error:  # a ValueError: before that clause
        return fail(f"--query {error.query!r:.300} refused: {error.reason}; nothing sent", 1)
    except NotDone as error:
        show(error.result, args)
        return fail(str(error), 1)
    except BatchBusyError as error:
        return fail(str(error), 1)
    except (UsageError, ConfigurationError, ValueError, OSError) as error:
        return fail(str(error), 2)
    except RejectedError as error:
        return fail(f"{error.update} rejected by {error.workflow_id}: {error}", 1)
    except ClosedError as error:  # LedgerStopped included: its sentence names `--new`
        return fail(error.sentence("--new"), 1)
    except NotFoundError as error:
        return fail(str(error), 1)
    except WorkflowQueryFailedError as error:
        return fail(f"{args.command} failed on the worker: {error}", 1)
    except RPCError as error:
        if error.status in UNANSWERED_STATUSES:  # no refusal: nobody answered in time
            return fail(
                f"Temporal did not answer in time ({error.status.name}: {error.message}); a "
                "change sent may or may not have been made: read the state before sending again",
                1,
            )
        return fail(f"Temporal refused the call: {error.message}", 1)  # a bad --query, ...
    except Exception as error:  # never a traceback: one line naming what went wrong
        return fail(f"{type(error).__name__}: {error}", 1)
    show(result, args)
    return 0


def show(result: Any, args: argparse.Namespace) -> None:
    """Print a command's result: JSON with `--json`, else its table or sentence."""
    text = json.dumps(result, indent=2, sort_keys=True) if args.json else args.show(result, args)
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `... | head` stopped reading: not an error of the command
        pass


def entrypoint() -> None:
    """Console-script entry: run, flush, and leave without interpreter finalization.

    Temporal's Rust core keeps threads that may call into Python while the interpreter
    finalizes, which can abort a short-lived process after its work is done; the CLI's
    output is already written, so it exits directly with its code.
    """
    code = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BrokenPipeError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    entrypoint()
