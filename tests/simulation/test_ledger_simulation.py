"""The ledger's core under random interleavings (see `harness.ledger_simulation`): every
invariant of `workflows.invariants` after every step. `DURABILITY_SIM_SEED` replays one seed;
`DURABILITY_SIM_RUNS` sets how many seeds run (default 1500, in three slices so that
`pytest -n` spreads them), `DURABILITY_SIM_STEPS` how many steps each takes (default 120).
The reports that would land once the ledger completed are modelled and are violations
(`harness.ledger_simulation.LATE_REPORTS`; `DURABILITY_SIM_LATE_REPORTS=0` turns that off)."""

from __future__ import annotations

import os

import pytest

from harness.ledger_simulation import LedgerSim

RUNS = int(os.environ.get("DURABILITY_SIM_RUNS", "1500"))
SEED = os.environ.get("DURABILITY_SIM_SEED")
STEPS = int(os.environ.get("DURABILITY_SIM_STEPS", "120"))
SLICES = 3


@pytest.mark.parametrize("first", range(SLICES))
def test_every_interleaving_keeps_the_ledger_promises(first: int) -> None:
    if SEED is not None:
        if first == 0:
            LedgerSim(int(SEED), steps=STEPS).play()
        return
    for seed in range(first, RUNS, SLICES):
        LedgerSim(seed, steps=STEPS).play()
