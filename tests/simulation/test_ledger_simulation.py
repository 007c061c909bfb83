"""The ledger's core under random interleavings (see `ledger_harness`): every invariant of
`workflows.invariants` after every step. `DURABILITY_SIM_SEED` replays one seed;
`DURABILITY_SIM_RUNS` sets how many seeds run (default 1500), `DURABILITY_SIM_STEPS` how many
steps each takes (default 120)."""

from __future__ import annotations

import os

from tests.simulation.ledger_harness import LedgerSim

RUNS = int(os.environ.get("DURABILITY_SIM_RUNS", "1500"))
SEED = os.environ.get("DURABILITY_SIM_SEED")
STEPS = int(os.environ.get("DURABILITY_SIM_STEPS", "120"))


def seeds() -> range | list[int]:
    return [int(SEED)] if SEED else range(RUNS)


def test_every_interleaving_keeps_the_ledger_promises() -> None:
    for seed in seeds():
        LedgerSim(seed, steps=STEPS).play()
