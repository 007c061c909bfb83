"""The schedule's deterministic simulation (`harness.schedule_simulation`): a few thousand seeded
interleavings of what Temporal can do between the shell's transitions, every schedule
invariant checked after every transition.

`DURABILITY_SIM_SEED=<n>` replays one interleaving (the seed a failure prints);
`DURABILITY_SIM_RUNS=<n>` runs that many (a soak: `bench/soak_schedule.py`);
`DURABILITY_SIM_FIRST_SEED` moves the first seed.
"""

from __future__ import annotations

import os

from harness.schedule_simulation import simulate

RUNS = int(os.environ.get("DURABILITY_SIM_RUNS", "3000"))
FIRST_SEED = int(os.environ.get("DURABILITY_SIM_FIRST_SEED", "0"))


def test_every_interleaving_keeps_the_schedule_promises() -> None:
    replay = os.environ.get("DURABILITY_SIM_SEED")
    seeds = [int(replay)] if replay else range(FIRST_SEED, FIRST_SEED + RUNS)
    for seed in seeds:
        simulate(seed)


def test_the_simulation_reaches_the_interleavings_it_is_for() -> None:
    """The model is not vacuous: across the seeds it cancels while closing for
    continue-as-new with deliveries owed, triggers in bursts, and messages a closing
    schedule."""
    seen: set[str] = set()
    for seed in range(300):
        log = simulate(seed).log
        joined = " ".join(log)
        if "close-begins" in joined and "cancel-requested" in joined.split("close-begins", 1)[1]:
            seen.add("cancel while closing")
        if "triggerx" in joined:
            seen.add("trigger burst")
        if "continue-as-new" in joined:
            seen.add("continue-as-new")
        if "cancel-requested" in joined and "update:" in joined.split("cancel-requested", 1)[1]:
            seen.add("message while closing")
    assert seen == {
        "cancel while closing", "trigger burst", "continue-as-new", "message while closing"
    }  # fmt: skip
