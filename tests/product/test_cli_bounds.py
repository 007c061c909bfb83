"""The ranges and defaults the CLI's help states are the workflows' own: each bound kept in
`durability.cli_bounds` (the CLI answers `--help` without loading the workflows' modules) is
read again from the catalog message's payload field, or the constant, that sets it."""

from __future__ import annotations

import argparse
import importlib

from durability.checks import CATALOGS, catalog_message
from durability.cli import build_parser
from durability.cli_bounds import BOUNDS, Bound
from durability.message_specs import field_bounds


def source_of(bound: Bound) -> tuple[int, int | None, int | None]:
    """The high bound, the low bound and the default as the workflows set them: a catalog
    message's payload field (its ge, le and default), or a constant (the high bound)."""
    where, _, path = bound.source.partition(":")
    if where in CATALOGS:
        name, _, field = path.partition(".")
        payload = catalog_message(f"{where}.{name}").payload
        assert payload is not None, bound.source
        info = payload.model_fields[field]
        limits = field_bounds(info)
        return limits["le"], limits["ge"], info.default
    constant: int = getattr(importlib.import_module(where), path)
    return constant, None, None


def test_every_bound_the_cli_states_is_the_workflows_own() -> None:
    for option, bound in BOUNDS.items():
        high, low, default = source_of(bound)
        assert bound.high == high, option
        assert low is None or bound.low == low, option
        assert default is None or bound.default == default, option


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[name]
            return found
    raise AssertionError(name)


def test_the_help_states_each_bound() -> None:
    for option, bound in BOUNDS.items():
        group, command, flag = option.split()
        parser = subcommand(subcommand(build_parser(), group), command)
        [action] = [a for a in parser._actions if flag in a.option_strings]
        assert action.help is not None
        assert f"{bound.low}..{bound.high}" in action.help, option
        assert str(bound.default) in action.help, option
