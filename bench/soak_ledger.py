"""A long soak of the ledger simulation (`harness/ledger_simulation.py`): seeded
interleavings of the ledger's core and of what Temporal can do around it, every invariant of
`workflows.invariants` checked after each step, until a time budget runs out.

    python -m bench.soak_ledger [--seconds 600] [--first-seed 100000] [--steps 200]

Prints how many interleavings ran and how fast; on the first broken promise, the seed and the
command that replays it (exit 1).
"""

from __future__ import annotations

import argparse
import sys
import time

from harness.ledger_simulation import LedgerSim, SimFailure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600, help="time budget (default 600)")
    parser.add_argument("--first-seed", type=int, default=100_000, help="first seed to run")
    parser.add_argument("--steps", type=int, default=200, help="steps per interleaving")
    args = parser.parse_args(argv)
    began = time.monotonic()
    seed = args.first_seed
    while time.monotonic() - began < args.seconds:
        try:
            LedgerSim(seed, steps=args.steps).play()
        except SimFailure as failure:
            print(failure, file=sys.stderr)
            return 1
        seed += 1
    ran = seed - args.first_seed
    elapsed = time.monotonic() - began
    print(
        f"{ran} interleavings (seeds {args.first_seed}..{seed - 1}, {args.steps} steps each) "
        f"in {elapsed:.0f} s ({ran / elapsed:.1f}/s): every ledger invariant held"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
