"""`python -m bench.chaos`: the long chaos run, the fast one being
tests/infrastructure/test_chaos.py.

A 3-worker fleet of real `python -m worker` processes against its own file-backed dev server:
20 schedules at `@every 1s` through HTTP webhooks and 500 ledger operations (with
dependencies, over several ledgers and canvases) against one recording HTTP server, while a
random worker is SIGKILLed every few seconds and started again, and the dev server is
restarted once on the same database. Then it stops ticking, waits for every run to be
acknowledged and every operation resolved, and prints, as a table, what the HTTP server and
Temporal recorded: kills, restarts, runs, operations, and each violation count (all must be 0).
Exit status 1 when any violation is found.

Every wait of the harness is bounded: what gets no answer in time (an enqueue, a poke, a
settle observation, a history read) is counted in the table as `harness_timeouts`, never
waited out. Each log line carries the wall-clock time; `kill -USR1 <pid>` prints the stack of
every asyncio task and thread to stderr (where the harness is, should it seem idle).
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import signal
import sys
import tempfile
import time
from pathlib import Path

from harness.chaos import ChaosConfig, ChaosReport, run_chaos


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--schedules", type=int, default=20, help="objects at @every 1s")
    parser.add_argument("--operations", type=int, default=500, help="ledger operations")
    parser.add_argument("--ledgers", type=int, default=10, help="ledgers they spread over")
    parser.add_argument("--workers", type=int, default=3, help="worker processes")
    parser.add_argument("--window", type=float, default=180.0, help="seconds of chaos")
    parser.add_argument("--settle", type=float, default=240.0, help="max seconds to settle")
    parser.add_argument(
        "--feed-grace",
        type=float,
        default=180.0,
        help="max seconds after the window for the last enqueues (then a harness timeout)",
    )
    parser.add_argument("--seed", type=int, default=int(time.time()), help="random seed")
    parser.add_argument("--keep", type=Path, help="keep the database and logs in this folder")
    parser.add_argument("--quiet", action="store_true", help="only the table")
    return parser.parse_args(argv)


def table(report: ChaosReport) -> str:
    config = report.config
    rows: list[tuple[str, object]] = [
        ("seed", config.seed),
        ("window (s)", config.window_s),
        ("elapsed (s)", f"{report.elapsed_s:.0f}"),
        ("workers", config.workers),
        ("worker SIGKILLs", report.kills),
        ("workers that exited on their own", report.unexpected_worker_exits),
        ("dev server restarts", report.server_restarts),
        ("schedules", config.schedules),
        ("runs (ScheduledRun workflows)", report.runs),
        ("run webhook POSTs", report.run_posts),
        ("runs complete", report.completed),
        ("runs interrupted (ScheduledRunInterruptedError)", report.interrupted),
        ("runs killed mid-flight (caller gone)", report.killed_mid_run),
        (
            "  reported as",
            ", ".join(f"{n}: {c}" for n, c in report.killed_mid_run_names.items()) or "-",
        ),
        ("outcome POSTs (with retries)", report.outcome_posts),
        ("outcomes dead-lettered", report.dead_lettered),
        ("ledger operations", report.ops),
        ("frozen requests", report.requests),
        ("submits / queries", f"{report.submits} / {report.queries}"),
        ("submits/queries cut by a kill (caller gone)", report.ledger_calls_cut),
        ("updates sent at once after a worker restart", report.updates_after_restarts),
        ("workflow executions checked for failed tasks", report.workflow_executions),
        (
            "tasks timed out (worker killed or too slow)",
            ", ".join(f"{n}: {c}" for n, c in sorted(report.task_timeouts.items())) or "-",
        ),
    ]
    rows += [(f"violations: {name}", count) for name, count in report.counts().items()]
    width = max(len(name) for name, _ in rows)
    lines = [f"| {'figure':<{width}} | value |", f"|{'-' * (width + 2)}|-------|"]
    lines += [f"| {name:<{width}} | {value} |" for name, value in rows]
    return "\n".join(lines)


def dump_stacks() -> None:
    """Every asyncio task's stack and every thread's, to stderr."""
    print(f"--- {time.strftime('%H:%M:%S', time.gmtime())} stacks", file=sys.stderr)
    for task in asyncio.all_tasks():
        task.print_stack(file=sys.stderr)
    faulthandler.dump_traceback(all_threads=True)
    sys.stderr.flush()


async def main(args: argparse.Namespace) -> int:
    config = ChaosConfig(
        schedules=args.schedules,
        operations=args.operations,
        ledgers=args.ledgers,
        workers=args.workers,
        window_s=args.window,
        settle_timeout_s=args.settle,
        feed_grace_s=args.feed_grace,
        seed=args.seed,
    )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, dump_stacks)
    # SIGTERM and SIGINT (ignored in a background job otherwise) cancel the run, so that it
    # still stops its workers, dev server and recorder.
    running = asyncio.current_task()
    assert running is not None
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(stop_signal, running.cancel)

    def log(message: str) -> None:
        if not args.quiet:
            print(time.strftime("%H:%M:%S", time.gmtime()), message, flush=True)

    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        report = await run_chaos(config, args.keep, log)
    else:
        with tempfile.TemporaryDirectory(prefix="durability-chaos-") as tmp:
            report = await run_chaos(config, Path(tmp), log)
    print(report.summary_line())
    print(table(report))
    failures = report.failures()
    if failures:
        print(failures)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
