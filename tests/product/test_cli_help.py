"""What a user reads before running anything: `durability --version`, a help text on every
option of every command, one base class for the client's errors, and the API reference
built from the docstrings (so it cannot rot)."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import version
from pathlib import Path

from durability import apidocs, client, errors, settings
from durability.cli import build_parser
from tests.support.helpers import run_command


def parsers(
    parser: argparse.ArgumentParser, path: str
) -> list[tuple[str, argparse.ArgumentParser]]:
    """`parser` and every parser below it, each with the command line that reaches it."""
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += parsers(sub, f"{path} {name}")
    return found


def test_every_option_and_argument_of_every_command_has_help() -> None:
    missing = [
        f"{path} {'/'.join(action.option_strings) or action.dest}"
        for path, parser in parsers(build_parser(), "durability")
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction)
        and (action.help is None or not action.help.strip())
    ]
    assert not missing, f"options without help: {missing}"


async def test_version_prints_the_installed_version() -> None:
    shown = await run_command([sys.executable, "-m", "durability.cli", "--version"])
    assert shown.stdout.strip() == f"durability {version('durability')}"
    # `--version` of `schedule set` is still the schedule's version.
    args = build_parser().parse_args(["schedule", "set", "a", "@hourly", "--version", "3"])
    assert args.version == 3


def test_every_client_error_derives_from_one_base_at_its_old_and_new_import_path() -> None:
    raised = (
        client.RejectedError, client.NotFoundError, client.ClosedError, client.LedgerStopped,
        client.UnansweredError, client.InvalidQueryError, client.BatchBusyError,
        settings.ConfigurationError, errors.NoWorkerError,
    )  # fmt: skip
    for error_class in raised:
        assert issubclass(error_class, errors.DurabilityError), error_class
        assert getattr(errors, error_class.__name__) is error_class
    # What they derived from before stays: callers catching those keep working.
    assert issubclass(client.UnansweredError, TimeoutError)
    assert issubclass(client.InvalidQueryError, ValueError)
    assert issubclass(settings.ConfigurationError, ValueError)


def test_the_api_reference_builds_from_the_docstrings_without_a_warning(tmp_path: Path) -> None:
    assert apidocs.build(tmp_path) == []
    page = (tmp_path / "durability" / "client.html").read_text()
    assert "DurabilityClient" in page and "set_schedule" in page
    assert "DurabilityError" in (tmp_path / "durability" / "errors.html").read_text()
