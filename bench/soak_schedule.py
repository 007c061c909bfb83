"""Soak the schedule's deterministic simulation: many more seeded interleavings than
`make test` runs (tests/simulation/test_schedule_simulation.py).

    .venv/bin/python -m bench.soak_schedule [--runs N] [--first-seed S] [--steps K]

Prints the seeds per second and, on a broken promise, the seed and the command that replays it.
"""

from __future__ import annotations

import argparse
import sys
import time

from harness.schedule_simulation import SimulationFailure, simulate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200_000, help="interleavings to run")
    parser.add_argument("--first-seed", type=int, default=1_000_000, help="the first seed")
    parser.add_argument("--steps", type=int, default=80, help="transitions per interleaving")
    args = parser.parse_args()
    started = time.monotonic()
    for seed in range(args.first_seed, args.first_seed + args.runs):
        try:
            simulate(seed, args.steps)
        except SimulationFailure as failure:
            print(failure, file=sys.stderr)
            return 1
        done = seed - args.first_seed + 1
        if done % 10_000 == 0:
            rate = done / (time.monotonic() - started)
            print(f"{done} interleavings, {rate:.0f}/s, none broke a promise", flush=True)
    print(f"{args.runs} interleavings from seed {args.first_seed}: none broke a promise")
    return 0


if __name__ == "__main__":
    sys.exit(main())
