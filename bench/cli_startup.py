"""`python -m bench.cli_startup`: wall time of `durability` CLI calls beside the `temporal` CLI's.

Starts its own dev server on 127.0.0.1 and an in-process worker, sets one schedule, then runs
each command as a fresh subprocess `--runs` times (after one unmeasured warm-up run) and
prints the median, min and max in a markdown table, with the machine and its load average.

    python -m bench.cli_startup                       # this checkout
    python -m bench.cli_startup --checkout ../base    # another checkout beside this one

`--checkout DIR` (repeatable) runs `python -m durability.cli` with DIR as the working
directory, so DIR's `durability` package is the one imported (same interpreter, same
installed SDK): a worktree of an older commit gives a before/after table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from bench.env import dev_server, worker
from bench.machine import describe, loadavg
from durability.client import DurabilityClient
from durability.devserver import temporal_cli

PROJECT_ROOT = Path(__file__).resolve().parent.parent

# What any Python CLI on the SDK pays before its first answer: import the client, connect,
# one RPC. durability's calls add their converter, tracing and plugin on top.
SDK_FLOOR = """
import asyncio, os
from temporalio.client import Client

async def main():
    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"])
    try:
        await client.get_workflow_handle("schedule:missing").describe()
    except Exception:
        pass

asyncio.run(main())
"""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.cli_startup", description=__doc__)
    parser.add_argument("--runs", type=int, default=9, help="measured runs per command")
    parser.add_argument(
        "--checkout",
        type=Path,
        action="append",
        help="a checkout whose durability package to time (repeatable; default: this one)",
    )
    return parser.parse_args(argv)


def timed(argv: Sequence[str], cwd: Path, env: dict[str, str], runs: int) -> list[float]:
    """Wall seconds of `runs` runs of `argv` (after one warm-up run)."""
    times: list[float] = []
    for index in range(runs + 1):
        started = time.perf_counter()
        subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False, timeout=120)
        if index:
            times.append(time.perf_counter() - started)
    return times


async def measure(argv: Sequence[str], cwd: Path, env: dict[str, str], runs: int) -> list[float]:
    """`timed` in a thread: the in-process worker keeps answering the commands' queries."""
    return await asyncio.to_thread(timed, argv, cwd, env, runs)


def summary(times: Sequence[float]) -> str:
    return (
        f"{statistics.median(times) * 1000:.0f} ms "
        f"({min(times) * 1000:.0f}-{max(times) * 1000:.0f})"
    )


async def main(args: argparse.Namespace) -> int:
    checkouts = [path.resolve() for path in args.checkout or [PROJECT_ROOT]]
    object_id = f"startup-{uuid.uuid4().hex[:8]}"
    task_queue = f"bench-startup-{uuid.uuid4().hex[:8]}"
    load_before = loadavg()
    async with (
        dev_server(file_backed=False) as (environment, _),
        worker(environment.client, "http://127.0.0.1:9", task_queue=task_queue),
    ):
        address = environment.client.service_client.config.target_host
        await DurabilityClient(environment.client, task_queue).set_schedule(
            object_id, "@hourly", version=1
        )
        env = {**os.environ, "TEMPORAL_ADDRESS": address, "TEMPORAL_NAMESPACE": "default"}
        durability = [sys.executable, "-m", "durability.cli"]
        rows: list[tuple[str, list[str]]] = []
        for label, argv in (
            ("durability --help", [*durability, "--help"]),
            ("durability schedule set (usage error)", [*durability, "schedule", "set", "x"]),
            ("durability schedule get <live>", [*durability, "schedule", "get", object_id]),
            ("durability schedule get <none>", [*durability, "schedule", "get", "missing"]),
            ("durability schedule list", [*durability, "schedule", "list", "--limit", "1"]),
        ):
            rows.append(
                (label, [summary(await measure(argv, path, env, args.runs)) for path in checkouts])
            )
        rows.append(
            (
                "python: SDK Client.connect + describe (the floor)",
                [
                    summary(
                        await measure(
                            [sys.executable, "-c", SDK_FLOOR], PROJECT_ROOT, env, args.runs
                        )
                    )
                ],
            )
        )
        temporal = temporal_cli()
        for label, argv in (
            ("temporal --version", [temporal, "--version"]),
            (
                "temporal workflow list",
                [temporal, "workflow", "list", "--address", address, "--limit", "1"],
            ),
        ):
            rows.append((label, [summary(await measure(argv, PROJECT_ROOT, env, args.runs))]))

    machine = describe()
    print(
        f"CLI start-up, median (min-max) of {args.runs} runs after one warm-up; "
        f"{machine['nproc']} x {machine['cpu']}, Python {machine['python']}, "
        f"temporalio {machine['temporalio']}; load average {load_before} before, "
        f"{loadavg()} after\n"
    )
    headers = ["command", *(str(path) for path in checkouts)]
    print("| " + " | ".join(headers) + " |")
    print("|" + " --- |" * len(headers))
    for label, cells in rows:
        cells = cells + ["-"] * (len(checkouts) - len(cells))
        print("| " + " | ".join([label, *cells]) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
