"""The scenarios of `python -m bench`, one module each; each adds rows to the one results
table."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bench.scenarios import (
    bounds,
    capacity,
    cost,
    cpu,
    floors,
    history,
    ledger,
    ledger_retry_slots,
    scale,
    schedule,
)
from bench.scenarios.common import Ctx

SCENARIOS: dict[str, Callable[[Ctx], Awaitable[None]]] = {
    "floors": floors.floors,
    "cpu": cpu.cpu,
    "schedule": schedule.schedule,
    "capacity": capacity.capacity,
    "ledger": ledger.ledger,
    "ledger-retry-slots": ledger_retry_slots.ledger_retry_slots,
    "cost": cost.cost_scenario,
    "scale": scale.scale,
    "history": history.history_day,
    "bounds": bounds.bounds,
}
# history first: on the time-skipping server it stalled when run after the dev-server loads
# (cause not found yet; it runs in ~25 s on its own), scale last: it leaves the worker busy.
QUICK = ["history", "floors", "schedule", "cpu", "capacity", "ledger", "cost", "scale"]
