"""A catalog's messages, sent by the client and as CLI commands built from the catalog.

`DurabilityClient.send_message` sends a message as its kinds allow (an update, or a signal
with `as_signal`), its payload checked by the message's model before anything is sent;
`durability.message_specs` makes a CLI command per message a user sends, its options and
their help (bounds included) read from the payload model. A small catalog of this test's
own, on a real server.
"""

from __future__ import annotations

import argparse
import importlib
import uuid
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

from durability import cli_messages
from durability.checks import CATALOGS
from durability.cli import build_parser
from durability.cli_catalog import add_catalog_commands, run_message
from durability.client import DurabilityClient, RejectedError
from durability.message_cli import add_message_command, payload_from, send_from_args
from durability.message_specs import commands_of, render
from workflows.catalog import Catalog, Kind, Message, kinds
from workflows.handlers import CatalogShell, handlers_from
from workflows.kernel import ShellKernel
from workflows.validation import InvalidRequest


class AddPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    amount: int = Field(ge=1, le=100, description="what to add")
    note: str | None = Field(default=None, max_length=20)
    tags: list[str] = Field(default_factory=list, min_length=1)


class ScalePayload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    factor: int = Field(default=2, ge=0)


CATALOG = Catalog(
    [
        Message(
            "add",
            "Add an amount to the total. Returns the new total.",
            kinds(Kind.SIGNAL, Kind.UPDATE),
            AddPayload,
            returns="the new total",
        ),
        Message("scale", "Multiply the total.", kinds(Kind.UPDATE), ScalePayload),
        Message("reset", "Set the total to 0.", kinds(Kind.SIGNAL)),
        Message("tick", "Sent by another workflow.", kinds(Kind.SIGNAL), internal=True),
        Message("total", "The total.", kinds(Kind.QUERY)),
    ]
)


@workflow.defn(name="MessageCounter", sandboxed=False)
@handlers_from(CATALOG)
class MessageCounter(CatalogShell):
    @workflow.init
    def __init__(self) -> None:
        self._total = 0
        self._kernel = ShellKernel(ValueError, lambda: 0)

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self._total < 0)
        return self._total

    def apply_add(self, payload: AddPayload) -> int:
        self._total += payload.amount
        return self._total

    def apply_scale(self, payload: ScalePayload) -> int:
        self._total *= payload.factor
        return self._total

    def apply_reset(self, _: Any) -> None:
        self._total = 0

    def apply_tick(self, _: Any) -> None:
        pass

    def query_total(self) -> int:
        return self._total


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="counter")
    group = top.add_subparsers(dest="command", required=True)
    for spec in commands_of(CATALOG):
        add_message_command(group, spec, "counter_id", "the counter's ID")
    return top


def help_of(command: str) -> str:
    for action in parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            help_text: str = action.choices[command].format_help()
            return help_text
    raise AssertionError(command)


def test_a_command_per_message_a_user_sends_with_help_and_bounds_from_the_model() -> None:
    specs = {spec.command: spec for spec in commands_of(CATALOG)}
    assert list(specs) == ["add", "scale", "reset"]  # no query, nothing internal
    add = help_of("add")
    assert "Add an amount to the total." in add
    assert "what to add (1..100)" in add
    assert "note (at most 20 characters)" in add
    assert "tags (at least 1 item)" in add  # a container's default is not said
    assert "--signal" in add  # sent both ways
    scale = help_of("scale")
    assert "factor (at least 0, default 2)" in scale
    assert "--signal" not in scale and "--signal" not in help_of("reset")
    args = parser().parse_args(["add", "c-1", "--amount", "5"])
    assert payload_from(args.message_command, args) == {"amount": 5}
    assert CATALOG["add"].parse(payload_from(args.message_command, args)).amount == 5
    with pytest.raises(SystemExit):  # --amount is required
        parser().parse_args(["add", "c-1"])
    too_much = parser().parse_args(["add", "c-1", "--amount", "500"])
    with pytest.raises(InvalidRequest, match="amount"):
        CATALOG["add"].parse(payload_from(too_much.message_command, too_much))


async def test_the_client_sends_a_catalog_message_as_its_kinds_allow(
    client: Client, task_queue: str
) -> None:
    workflow_id = f"message-counter-{uuid.uuid4()}"
    durability = DurabilityClient(client, task_queue)
    async with Worker(client, task_queue=task_queue, workflows=[MessageCounter]):
        handle = await client.start_workflow(
            MessageCounter.run, id=workflow_id, task_queue=task_queue
        )
        add = CATALOG["add"]
        assert await durability.send_message(add, workflow_id, {"amount": 5}) == 5
        assert (
            await durability.send_message(add, workflow_id, {"amount": 2}, as_signal=True) is None
        )
        args = parser().parse_args(["scale", "c", "--factor", "3"])
        assert await send_from_args(durability, CATALOG, workflow_id, args) == 21
        # Refused by the model before anything is sent, as an update and as a signal.
        for as_signal in (False, True):
            with pytest.raises(RejectedError, match="amount") as refused:
                await durability.send_message(add, workflow_id, {"amount": 0}, as_signal=as_signal)
            assert refused.value.type == "InvalidRequest"
        # A kind the message is not sent as, or an internal one: refused, nothing sent.
        with pytest.raises(ValueError, match="reset: a client does not send it as update"):
            await durability.send_message(CATALOG["reset"], workflow_id)
        with pytest.raises(ValueError, match="tick"):
            await durability.send_message(CATALOG["tick"], workflow_id, as_signal=True)
        assert await handle.query("total") == 21
        await send_from_args(durability, CATALOG, workflow_id, parser().parse_args(["reset", "c"]))
        assert await handle.query("total") == 0
        history = await handle.fetch_history()
    sent = [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in history.events
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    assert sent == ["add", "reset"]  # the refused signal never reached the workflow


def test_the_commands_a_generated_module_holds_are_the_catalogs() -> None:
    namespace: dict[str, Any] = {}
    exec(render({"COUNTER": CATALOG}), namespace)
    assert namespace["COUNTER"] == commands_of(CATALOG)


def choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: dict[str, argparse.ArgumentParser] = action.choices
            return found
    raise AssertionError("no subcommands")


def test_a_message_no_written_command_sends_gets_one_built_from_the_catalog() -> None:
    top = argparse.ArgumentParser(prog="counter")
    group = top.add_subparsers(dest="command", required=True)
    group.add_parser("add", help="a written command")
    add_catalog_commands(group, "counter_id", "the counter's ID", commands_of(CATALOG), ["add"])
    assert list(choices(top)) == ["add", "scale", "reset"]
    assert choices(top)["add"].description is None  # the written one is kept
    args = top.parse_args(["scale", "c-1", "--factor", "3"])
    assert args.run is run_message and payload_from(args.message_command, args) == {"factor": 3}


def test_the_cli_has_a_command_for_every_message_a_user_sends() -> None:
    """`durability/cli_messages.py` is the product catalogs' commands as they are now (else:
    `python -m durability.message_specs`), and the CLI has each of them."""
    for capability, (module, name) in CATALOGS.items():
        catalog = getattr(importlib.import_module(module), name)
        generated = getattr(cli_messages, capability.upper())
        assert generated == commands_of(catalog), "run python -m durability.message_specs"
        commands = choices(choices(build_parser())[capability])
        assert {spec.command for spec in generated} <= set(commands), capability
