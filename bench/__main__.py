"""`python -m bench`: durability side by side with native Temporal Schedules and the floors.

Starts its own dev server (127.0.0.1, `history.timerProcessorMaxTimeShift` lowered like the
run command does) and an in-process worker, runs the scenarios on the same server, prints one
markdown table and writes it, with a PNG of the lateness distributions, to bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
import uuid
from pathlib import Path

from bench import scenarios
from bench.env import dev_server, worker
from bench.machine import describe, loadavg
from bench.results import Results
from bench.scenarios.common import Ctx
from bench.scenarios.ledger import start_http_server

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a ~4-minute subset")
    parser.add_argument(
        "--scenario",
        choices=sorted(scenarios.SCENARIOS),
        action="append",
        help="run only this scenario (repeatable); default: all",
    )
    parser.add_argument(
        "--file-backed", action="store_true", help="dev server with a database file"
    )
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="where results go")
    return parser.parse_args(argv)


async def main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING)
    chosen = args.scenario or list(scenarios.QUICK)
    results = Results(machine=describe())
    http_server, ledger_url = start_http_server()
    name = "quick" if args.quick else "full"
    if args.scenario:
        name = "-".join(args.scenario) + ("-quick" if args.quick else "")
    if args.file_backed:
        name += "-file"
    stamp = time.strftime("%Y-%m-%d", time.gmtime())
    title = f"durability bench: {name}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    args.out.mkdir(parents=True, exist_ok=True)
    partial = args.out / f"{name}-{stamp}.partial.md"
    began = time.monotonic()
    loads: list[str] = []
    try:
        async with dev_server(args.file_backed) as (env, server_desc):
            results.server = (
                f"{server_desc}, history.timerProcessorMaxTimeShift=50ms, "
                "one in-process worker for every side"
            )
            print(f"dev server up ({results.server}); scenarios: {', '.join(chosen)}", flush=True)
            queue = f"bench-{uuid.uuid4().hex[:8]}"
            async with worker(env.client, ledger_url, task_queue=queue):
                ctx = Ctx(
                    client=env.client,
                    task_queue=queue,
                    quick=args.quick,
                    results=results,
                    ledger_url=ledger_url,
                )
                for scenario in chosen:
                    print(f"== {scenario}", flush=True)
                    t0 = time.monotonic()
                    load_before = loadavg()
                    try:
                        await scenarios.SCENARIOS[scenario](ctx)
                    except Exception as error:  # report and go on with the other scenarios
                        logging.exception("scenario %s failed", scenario)
                        results.row(scenario, "error", f"{type(error).__name__}", str(error)[:300])
                    print(f"   ({time.monotonic() - t0:.0f} s)", flush=True)
                    loads.append(f"{scenario} {load_before} -> {loadavg()}")
                    partial.write_text(results.markdown(f"{title} (partial: up to {scenario})"))
    finally:
        http_server.shutdown()
    results.note(
        "lateness = wall time when the worker starts the run's activity minus the time the run "
        "was due (durability: the run's `due_at`; native: TemporalScheduledStartTime; chain: "
        "the aligned second); the first 3 s of every load are dropped as warm-up; percentiles "
        "are nearest-rank over the runs that started"
    )
    results.note(f"whole bench took {time.monotonic() - began:.0f} s")
    results.note(
        "load average (1/5/15 min) before -> after each scenario, on a 2-core machine where "
        "anything else running skews the numbers: " + "; ".join(loads)
    )
    table = results.markdown(title)
    print()
    print(table)
    (args.out / f"{name}-{stamp}.md").write_text(table)
    partial.unlink(missing_ok=True)
    if results.series or results.sweep:
        results.chart(args.out / f"{name}-{stamp}.png", title)
    print(f"wrote {args.out / f'{name}-{stamp}.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
