"""The commands of catalog messages no written command sends: each built from its catalog
entry (`durability/cli_messages.py`, generated from the catalogs), so a message a user sends
has a command as soon as it is in its capability's catalog."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from durability.cli_common import table
from durability.message_cli import MessageCommand, add_message_command, send_from_args

if TYPE_CHECKING:
    from durability.client import DurabilityClient


async def run_message(client: DurabilityClient, args: argparse.Namespace) -> Any:
    """Send the command's message to the group's workflow of the ID given."""
    import importlib

    from durability.checks import CATALOGS, ledger_workflow_id, schedule_workflow_id

    module, name = CATALOGS[args.group]
    catalog = getattr(importlib.import_module(module), name)
    if args.group == "schedule":
        workflow_id = schedule_workflow_id(args.object_id)
    else:
        workflow_id = ledger_workflow_id(args.ledger_id)
    answer = await send_from_args(client, catalog, workflow_id, args)
    if getattr(args, "signal", False) or not args.message_command.update:
        return {"signalled": True}
    return {"answer": answer}


def show_message(result: Any, args: argparse.Namespace) -> str:
    if "signalled" in result:
        return f"signalled: {args.message_command.message} (checked before sending)"
    return table(("field", "value"), [("answer", result["answer"])])


def add_catalog_commands(
    group: Any, key: str, key_help: str, specs: Sequence[MessageCommand], written: Sequence[str]
) -> None:
    """Add to `group` a command for each of `specs` whose name no command in `written` has."""
    for spec in specs:
        if spec.command not in written:
            command = add_message_command(group, spec, key, key_help)
            command.set_defaults(run=run_message, show=show_message)
