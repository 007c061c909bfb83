"""The ranges and defaults the CLI's help states are the workflows' own: each bound kept in
`durability.cli_bounds` (the CLI answers `--help` without loading the workflows' modules) is
read again from the model field or constant that sets it."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from pydantic import BaseModel

from durability.cli import build_parser
from durability.cli_bounds import BOUNDS, Bound
from durability.message_specs import field_bounds


def resolve(source: str) -> Any:
    """`module:NAME` or `module:Model.field` (the field's FieldInfo)."""
    module, _, path = source.partition(":")
    name, _, field = path.partition(".")
    found = getattr(importlib.import_module(module), name)
    if field:
        assert isinstance(found, type) and issubclass(found, BaseModel), source
        return found.model_fields[field]
    return found


def source_of(bound: Bound) -> tuple[int, int | None, int | None]:
    """The high bound, the low bound and the default as the workflows set them (None where
    the source does not say)."""
    source = resolve(bound.source)
    if isinstance(source, int):
        high, low, default = source, None, None
    else:
        limits = field_bounds(source)
        high, low, default = limits["le"], limits["ge"], source.default
    if bound.default_source is not None:
        default = resolve(bound.default_source).default
    return high, low, default


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
