"""The bounds the CLI's help states, as the workflows set them.

`durability --help` answers without loading the workflows' modules (they load pydantic), so
the values are kept here, each with where the workflows set it;
`tests/product/test_cli_bounds.py` reads every one from there and fails when they differ.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bound:
    """An integer option's range and default."""

    low: int
    high: int
    default: int
    # Where the workflows set it: a field of a message's payload model in its capability's
    # catalog (`<capability>:<message>.<field>`: its ge, le and default), or a constant
    # (`module:NAME`: the high bound).
    source: str

    @property
    def text(self) -> str:
        """`0..100, default 100`."""
        return f"{self.low}..{self.high}, default {self.default}"


PREVIEW_COUNT = Bound(1, 50, 10, "workflows.schedule.preview:MAX_PREVIEW_TIMES")
DESCRIBE_RUNS = Bound(0, 10, 10, "schedule:describe.runs")
DESCRIBE_NEXT = Bound(0, 50, 10, "schedule:describe.next")
STOP_QUERY_LIMIT = Bound(0, 100, 100, "ledger:stop.query_limit")
STOP_QUERY_DEADLINE_MS = Bound(0, 60_000, 60_000, "ledger:stop.query_deadline_ms")
SNAPSHOT_LIMIT = Bound(1, 300, 200, "ledger:snapshot.limit")

BOUNDS = {
    "schedule preview --count": PREVIEW_COUNT,
    "schedule describe --runs": DESCRIBE_RUNS,
    "schedule describe --next": DESCRIBE_NEXT,
    "ledger stop --query-limit": STOP_QUERY_LIMIT,
    "ledger stop --query-deadline-ms": STOP_QUERY_DEADLINE_MS,
    "ledger snapshot --limit": SNAPSHOT_LIMIT,
}
