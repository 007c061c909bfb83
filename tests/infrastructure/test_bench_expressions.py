"""Every schedule expression written into the benchmarks and the harness is one a new `set`
accepts: a bench whose `set` the set rules refuse dies minutes into its run (the cold-tick
bench aged its schedules at `@every 250ms` until the 1 s floor came in)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from workflows.schedule.set_rules import MIN_EVERY_MS, every_ms

ROOT = Path(__file__).resolve().parents[2]
EVERY = re.compile(r"@every [0-9][0-9a-z]*")


def written_expressions() -> list[tuple[str, str]]:
    """(file, expression) for each `@every <literal duration>` in bench/ and harness/."""
    found = []
    for folder in ("bench", "harness"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for expression in EVERY.findall(path.read_text()):
                found.append((str(path.relative_to(ROOT)), expression))
    return found


def test_the_benches_write_expressions() -> None:
    files = {file for file, _ in written_expressions()}
    assert {"bench/coldtick.py", "bench/load.py", "harness/chaos.py"} <= files, files


@pytest.mark.parametrize(("file", "expression"), written_expressions())
def test_a_written_every_is_not_faster_than_a_set_accepts(file: str, expression: str) -> None:
    step = every_ms(expression)
    assert step is not None, (file, expression)
    assert step >= MIN_EVERY_MS, f"{file}: {expression} is refused by the set rules"
