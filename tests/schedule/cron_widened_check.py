"""How many random expressions each reading of cron gets wrong, against the crontab(5) model.

    .venv/bin/python -m tests.schedule.cron_widened_check [COUNT]

Draws COUNT cases (expression, start) from `tests.support.cron_strategies.cases` (every
form crontab(5) allows, zones with half-hour offsets and daylight saving), derandomized so
every run draws the same ones, and compares each reading's next firing with the model's:
croniter's reading (the one before crontab's, `crontab_reading=False` on every expression)
and the built-in.
"""

from __future__ import annotations

import sys

from hypothesis import HealthCheck, given, settings

from tests.support.cron_model import COMPARED_YEARS, model_next
from tests.support.cron_strategies import cases
from workflows.schedule import cron

counts = {"cases": 0, "croniter": 0, "crontab": 0}
examples: list[str] = []


def _differs(found: int | None, expected: int | None, after: int) -> bool:
    if expected is None or expected - after > COMPARED_YEARS * 365 * 86_400_000:
        return found is not None and found != expected
    return found != expected


def check(count: int) -> None:
    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases())
    def one(case: tuple[str, int]) -> None:
        expression, after = case
        expected = model_next(expression, after)
        counts["cases"] += 1
        if _differs(cron._legacy_next(expression, after, classic_day_rule=True), expected, after):
            counts["croniter"] += 1
            if len(examples) < 5:
                examples.append(expression)
        if _differs(cron.next_occurrence(expression, after), expected, after):
            counts["crontab"] += 1

    one()


if __name__ == "__main__":
    check(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
    print(
        f"{counts['cases']} cases; disagreeing with the crontab(5) model: "
        f"croniter's reading {counts['croniter']}, the built-in {counts['crontab']}"
    )
    print("for example:", *examples, sep="\n  ")
