"""The contract's message tables (docs/contract.md) say what each capability's message catalog
declares: every message a user sends, under its wire name with its kinds, and every query,
and nothing the catalog does not have."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.helpers import PROJECT_ROOT
from workflows.catalog import Catalog, Kind

CONTRACT = PROJECT_ROOT / "docs" / "contract.md"


@dataclass(frozen=True)
class Tables:
    """Where a capability's messages are listed in the contract."""

    catalog: Catalog
    # The heading of the table of signals and updates (`| name | kind | ... |`).
    messages: str
    # The heading of the section that lists the queries (a `| name | returns |` table, or
    # text naming each one in backticks).
    queries: str


def sections() -> dict[str, str]:
    """The contract's text under each `###` heading, by heading."""
    found: dict[str, str] = {}
    heading = ""
    for line in CONTRACT.read_text().splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            found[heading] = ""
        elif heading:
            found[heading] += line + "\n"
    return found


def table_rows(text: str) -> Iterator[list[str]]:
    """The body rows of the first table in `text`, as cells."""
    rows: list[str] = []
    for line in text.splitlines():
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    for row in rows[2:]:
        yield [cell.strip() for cell in row.strip("|").split("|")]


def name_of(cell: str) -> str:
    match = re.fullmatch(r"`([a-z_]+)`", cell)
    assert match, f"not a message name: {cell!r}"
    return match[1]


def documented(tables: Tables) -> tuple[dict[str, set[str]], set[str], bool]:
    """The messages the contract lists, with their kinds; the queries it names, and whether
    it lists them in a table (else its text names them, among other things in backticks)."""
    text = sections()
    messages = {
        name_of(row[0]): {kind.strip() for kind in row[1].split(",")}
        for row in table_rows(text[tables.messages])
    }
    query_text = text[tables.queries]
    if "| name |" in query_text:
        return messages, {name_of(row[0]) for row in table_rows(query_text)}, True
    return messages, set(re.findall(r"`([a-z_]+)`", query_text)), False


def declared(catalog: Catalog) -> tuple[dict[str, set[str]], set[str]]:
    """The messages a user sends, with their kinds (as the contract words them), and the
    queries."""
    messages = {
        message.name: {kind.value for kind in (Kind.SIGNAL, Kind.UPDATE) if message.is_(kind)}
        for message in catalog
        if not message.internal and (message.is_(Kind.SIGNAL) or message.is_(Kind.UPDATE))
    }
    queries = {message.name for message in catalog.of_kind(Kind.QUERY)}
    return messages, queries


def capabilities() -> list[Tables]:
    from workflows.ledger.messages import LEDGER_MESSAGES
    from workflows.schedule.messages import SCHEDULE_MESSAGES

    return [
        Tables(SCHEDULE_MESSAGES, "2.2 Signals and updates", "2.3 Queries"),
        Tables(LEDGER_MESSAGES, "3.3 Signals and updates", "3.4 Queries"),
    ]


@pytest.mark.parametrize("tables", capabilities(), ids=lambda tables: tables.messages)
def test_the_contract_lists_each_catalog_message_with_its_kinds(tables: Tables) -> None:
    messages, queries, tabled = documented(tables)
    expected_messages, expected_queries = declared(tables.catalog)
    assert messages == expected_messages
    if tabled:
        assert queries == expected_queries
    else:
        assert not expected_queries - queries, "queries the contract does not name"
