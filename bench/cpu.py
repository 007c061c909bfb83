"""`python -m bench.cpu`: CPU milliseconds per run, worker and server, for each side at a
fixed load. Where the capacity bench says *how much*, this says *who pays*: the worker
process (this one: workflow tasks, activities, the bench client) or the dev server.

    python -m bench.cpu [--objects 12] [--seconds 20] [--side durability --side native ...]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import uuid
from pathlib import Path

from bench import scenarios
from bench.activities import RECORDER
from bench.env import dev_server, load_product, worker
from bench.load import SIDES, run_load
from bench.machine import describe, loadavg
from bench.stats import Summary

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_ms(pid: int) -> float:
    """User + system CPU of one process, in ms."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / TICKS


def children(pid: int) -> list[int]:
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == pid:
            found.append(int(entry.name))
    return found


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.WARNING)
    http_server, ledger_url = scenarios.start_http_server()
    product = load_product(ledger_url)
    print(describe())
    try:
        async with dev_server(False) as (env, _):
            server_pids = children(os.getpid())
            queue = f"bench-{uuid.uuid4().hex[:8]}"
            async with worker(env.client, product, task_queue=queue):
                print(
                    "| side | objects | runs | p99 ms | worker CPU ms/run | server CPU ms/run "
                    "| load before |"
                )
                print("| --- | --- | --- | --- | --- | --- | --- |")
                for side in args.side or SIDES:
                    before_load = loadavg()
                    w0 = cpu_ms(os.getpid())
                    s0 = sum(cpu_ms(p) for p in server_pids)
                    res = await run_load(env.client, queue, side, args.objects, args.seconds)
                    w1 = cpu_ms(os.getpid())
                    s1 = sum(cpu_ms(p) for p in server_pids)
                    runs = max(1, len(RECORDER.marks.get(res.tag, [])))
                    p99 = Summary.of(res.lateness).p99
                    print(
                        f"| {side} | {args.objects} | {runs} | {p99:.0f} | "
                        f"{(w1 - w0) / runs:.1f} | {(s1 - s0) / runs:.1f} | {before_load} |",
                        flush=True,
                    )
    finally:
        http_server.shutdown()
        await RECORDER.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.cpu", description=__doc__)
    parser.add_argument("--objects", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--side", action="append", choices=SIDES)
    asyncio.run(main(parser.parse_args()))
