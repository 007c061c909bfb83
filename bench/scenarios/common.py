"""What every scenario shares: the context it runs in and the verdict and summary formats."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from temporalio.client import Client

from bench.results import Results


@dataclass
class Ctx:
    """One bench run: its server's client, the worker's task queue, the results table."""

    client: Client
    task_queue: str
    quick: bool
    results: Results
    ledger_url: str = ""


def verdict(ratio: float, met: bool) -> str:
    """MET or MISSED for a goal, or n/a when the ratio could not be measured."""
    if math.isnan(ratio):
        return "n/a (not measurable in this run)"
    return "MET" if met else "MISSED"


def top(counter: Counter[str], n: int = 8) -> str:
    """The `n` largest counts, as `name count, ...`."""
    return ", ".join(f"{k} {v:g}" for k, v in counter.most_common(n))
