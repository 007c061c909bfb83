"""`python -m bench.sizing bench/results/coldtick-<date>.md`: a fleet sizing table from the
figures `python -m bench.coldtick` measured (its "Sizing inputs" table).

For N objects, each a schedule ticking once per `--cadence` (hourly by default):

- ticks per second = N / cadence;
- cached regime (every schedule stays in some worker's cache): worker cores = ticks/s x the
  cached worker's CPU per tick; memory = N x KiB per cached schedule + each worker process's
  base RSS;
- uncached regime (every tick reaches a worker that evicted the schedule and replays its
  history): worker cores = ticks/s x the CPU of a cold tick at `--cold-history-events` (default
  half the continue-as-new threshold: the history a cold tick replays on average), taken from
  the measured cold tick as warm + (cold - warm) x events / measured events (the replay part
  grows linearly with the history replayed, which the bench's replay table shows); memory =
  the worker processes x the cold worker's RSS;
- worker processes = cores / `--cores-per-worker` (a Python worker runs workflow code on one
  thread), rounded up;
- the server's history events per second = ticks/s x (schedule events per tick + run child
  events per run);
- Temporal Cloud actions per day = runs per day x (`--actions-per-run` + the
  CONTINUE_AS_NEW_ACTIONS of a continue-as-new every `continue_as_new_after_events / events
  per tick` ticks). Actions per run is an input, from the cost scenario (`python -m bench
  --scenario cost`: 5.1 in bench/results/cost-latency-2026-12-02-0.1.1.md, 5.0 in steady
  state).

A second table shows the continue-as-new threshold's trade-off (`--thresholds`): a lower
threshold shortens what a cold tick replays (half the threshold on average) and adds
continue-as-new actions to every run.

Every per-tick figure comes from the machine that ran the bench; the totals scale linearly in
N (and in 1 / cadence), which holds while the Temporal service keeps up: the server side is
not sized here beyond its event rate.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_OBJECTS = (10_000, 1_000_000, 10_000_000)
DEFAULT_ACTIONS_PER_RUN = 5.1
DEFAULT_THRESHOLDS = (200, 500, 1000, 2000)
# A continue-as-new is billed as a workflow start, and the new run's first task upserts the
# schedule's search attributes (workflows.schedule.publish): two actions.
CONTINUE_AS_NEW_ACTIONS = 2
REQUIRED = (
    "warm_cpu_ms_per_tick",
    "cold_cpu_ms_per_tick",
    "cold_history_events",
    "kib_per_cached_schedule",
    "worker_base_rss_mib",
    "cold_rss_mib",
    "parent_events_per_tick",
    "child_events_per_run",
    "continue_as_new_after_events",
)
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_inputs(text: str) -> dict[str, float]:
    """The `| key | value | what |` rows under "## Sizing inputs"."""
    values: dict[str, float] = {}
    section = text.partition("## Sizing inputs")[2]
    if not section:
        raise ValueError("no '## Sizing inputs' table (is this a bench.coldtick result?)")
    for line in section.splitlines()[1:]:
        if line.startswith("## "):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 2 or cells[0] in ("key", "---"):
            continue
        try:
            values[cells[0]] = float(cells[1].replace(",", ""))
        except ValueError:
            continue
    missing = [key for key in REQUIRED if key not in values or math.isnan(values[key])]
    if missing:
        raise ValueError(f"the sizing inputs lack {', '.join(missing)}")
    return values


def cadence_seconds(text: str) -> float:
    """`1h`, `30m`, `1h30m`, `90s`, `500ms`, `@every 1h` or a number of seconds."""
    body = text.strip().removeprefix("@every").strip()
    try:
        return float(body)
    except ValueError:
        pass
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", body)
    if not parts or "".join(n + u for n, u in parts) != body:
        raise ValueError(f"cadence must look like 1h, 30m, 1h30m or 90s, got {text!r}")
    return sum(float(number) * _UNITS[unit] for number, unit in parts)


@dataclass(frozen=True)
class Assumptions:
    cadence_s: float = 3600.0
    actions_per_run: float = DEFAULT_ACTIONS_PER_RUN
    cold_history_events: float | None = None  # default: continue_as_new_after_events / 2
    cores_per_worker: float = 1.0


@dataclass(frozen=True)
class Row:
    objects: int
    ticks_per_s: float
    cached_cores: float
    cached_workers: int
    cached_memory_gib: float
    cold_ms_per_tick: float
    uncached_cores: float
    uncached_workers: int
    uncached_memory_gib: float
    events_per_s: float
    actions_per_day: float


def cold_ms_per_tick(inputs: dict[str, float], history_events: float) -> float:
    """A cold tick's CPU at that history length: the measured one, its replay part scaled."""
    warm, cold = inputs["warm_cpu_ms_per_tick"], inputs["cold_cpu_ms_per_tick"]
    return warm + max(0.0, cold - warm) * history_events / inputs["cold_history_events"]


def size(inputs: dict[str, float], objects: int, assume: Assumptions) -> Row:
    ticks = objects / assume.cadence_s
    runs_per_day = objects * 86400 / assume.cadence_s
    history = assume.cold_history_events or inputs["continue_as_new_after_events"] / 2
    cold_ms = cold_ms_per_tick(inputs, history)
    cached_cores = ticks * inputs["warm_cpu_ms_per_tick"] / 1000
    uncached_cores = ticks * cold_ms / 1000
    cached_workers = max(1, math.ceil(cached_cores / assume.cores_per_worker))
    uncached_workers = max(1, math.ceil(uncached_cores / assume.cores_per_worker))
    cached_mib = (
        objects * inputs["kib_per_cached_schedule"] / 1024
        + cached_workers * inputs["worker_base_rss_mib"]
    )
    uncached_mib = uncached_workers * inputs["cold_rss_mib"]
    per_tick_events = inputs["parent_events_per_tick"]
    ticks_per_chain_run = inputs["continue_as_new_after_events"] / per_tick_events
    return Row(
        objects=objects,
        ticks_per_s=ticks,
        cached_cores=cached_cores,
        cached_workers=cached_workers,
        cached_memory_gib=cached_mib / 1024,
        cold_ms_per_tick=cold_ms,
        uncached_cores=uncached_cores,
        uncached_workers=uncached_workers,
        uncached_memory_gib=uncached_mib / 1024,
        events_per_s=ticks * (per_tick_events + inputs["child_events_per_run"]),
        actions_per_day=runs_per_day
        * (assume.actions_per_run + CONTINUE_AS_NEW_ACTIONS / ticks_per_chain_run),
    )


@dataclass(frozen=True)
class ThresholdRow:
    threshold: int
    replayed_events: float
    cold_ms_per_tick: float
    cold_over_warm: float
    ticks_per_workflow_run: float
    continue_as_new_actions_per_run: float


def threshold_rows(inputs: dict[str, float], thresholds: list[int]) -> list[ThresholdRow]:
    """For each continue-as-new threshold: what a cold tick costs (it replays half the
    threshold on average) and what continuing as new adds to every run in actions."""
    rows = []
    for threshold in thresholds:
        cold = cold_ms_per_tick(inputs, threshold / 2)
        ticks = threshold / inputs["parent_events_per_tick"]
        rows.append(
            ThresholdRow(
                threshold=threshold,
                replayed_events=threshold / 2,
                cold_ms_per_tick=cold,
                cold_over_warm=cold / inputs["warm_cpu_ms_per_tick"],
                ticks_per_workflow_run=ticks,
                continue_as_new_actions_per_run=CONTINUE_AS_NEW_ACTIONS / ticks,
            )
        )
    return rows


def threshold_table(inputs: dict[str, float], thresholds: list[int]) -> str:
    lines = [
        "| continue-as-new after (events) | a cold tick replays (mean) | cold tick CPU ms | "
        "cold / warm | ticks per workflow run | continue-as-new actions per run |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in threshold_rows(inputs, thresholds):
        lines.append(
            f"| {r.threshold:,} | {r.replayed_events:,.0f} | {r.cold_ms_per_tick:.0f} | "
            f"{r.cold_over_warm:.1f}x | {r.ticks_per_workflow_run:.1f} | "
            f"{r.continue_as_new_actions_per_run:.3f} |"
        )
    return "\n".join(lines) + "\n"


def _count(value: float) -> str:
    for limit, suffix in ((1e9, " billion"), (1e6, " million")):
        if value >= limit:
            return f"{value / limit:,.1f}{suffix}"
    return f"{value:,.0f}"


def _cores(value: float) -> str:
    return f"{value:,.2f}" if value < 10 else f"{value:,.0f}"


def _gib(value: float) -> str:
    return f"{value:,.2f} GiB" if value < 10 else f"{value:,.0f} GiB"


def table(inputs: dict[str, float], objects: list[int], assume: Assumptions) -> str:
    rows = [size(inputs, n, assume) for n in objects]
    history = assume.cold_history_events or inputs["continue_as_new_after_events"] / 2
    lines = [
        f"Cadence: one run per object every {assume.cadence_s:g} s; actions per run "
        f"{assume.actions_per_run:g} (input); a cold tick replays {history:,.0f} events "
        f"({rows[0].cold_ms_per_tick:.0f} CPU ms, from {inputs['cold_cpu_ms_per_tick']:.0f} ms "
        f"measured at {inputs['cold_history_events']:,.0f}); a warm tick "
        f"{inputs['warm_cpu_ms_per_tick']:.1f} CPU ms; {inputs['kib_per_cached_schedule']:.1f} "
        f"KiB per cached schedule; {assume.cores_per_worker:g} core per worker process.",
        "",
        "| objects | ticks/s | cached: worker cores (processes) | cached: worker memory | "
        "uncached: worker cores (processes) | uncached: worker memory | server events/s | "
        "Cloud actions/day |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.objects:,} | {r.ticks_per_s:,.1f} | {_cores(r.cached_cores)} "
            f"({r.cached_workers:,}) | {_gib(r.cached_memory_gib)} | {_cores(r.uncached_cores)} "
            f"({r.uncached_workers:,}) | {_gib(r.uncached_memory_gib)} | "
            f"{r.events_per_s:,.0f} | {_count(r.actions_per_day)} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.sizing", description=__doc__)
    parser.add_argument("results", type=Path, help="a bench.coldtick results file")
    parser.add_argument("--cadence", default="1h", help="one run per object every (1h)")
    parser.add_argument(
        "--objects",
        default=",".join(str(n) for n in DEFAULT_OBJECTS),
        help="comma-separated object counts",
    )
    parser.add_argument(
        "--actions-per-run",
        type=float,
        default=DEFAULT_ACTIONS_PER_RUN,
        help="Cloud actions per run, from the cost scenario (default %(default)s)",
    )
    parser.add_argument(
        "--cold-history-events",
        type=float,
        help="events a cold tick replays (default: continue-as-new threshold / 2)",
    )
    parser.add_argument("--cores-per-worker", type=float, default=1.0)
    parser.add_argument(
        "--thresholds",
        default=",".join(str(n) for n in DEFAULT_THRESHOLDS),
        help="continue-as-new thresholds (events) for the trade-off table",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        inputs = parse_inputs(args.results.read_text())
        assume = Assumptions(
            cadence_s=cadence_seconds(args.cadence),
            actions_per_run=args.actions_per_run,
            cold_history_events=args.cold_history_events,
            cores_per_worker=args.cores_per_worker,
        )
        objects = [int(part.replace("_", "")) for part in args.objects.split(",") if part]
        thresholds = [int(part) for part in args.thresholds.split(",") if part]
        if any(t < 10 for t in thresholds):
            raise ValueError(f"--thresholds must be >= 10 events each, got {args.thresholds!r}")
    except (OSError, ValueError) as error:
        print(f"bench.sizing: {error}", file=sys.stderr)
        return 2
    print(f"From {args.results}:\n")
    print(table(inputs, objects, assume), end="")
    print(
        "\nThe continue-as-new threshold's trade-off (a warm tick "
        f"{inputs['warm_cpu_ms_per_tick']:.1f} CPU ms, "
        f"{inputs['parent_events_per_tick']:.1f} schedule events per tick, "
        f"{CONTINUE_AS_NEW_ACTIONS} actions per continue-as-new):\n"
    )
    print(threshold_table(inputs, thresholds), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
