"""`python -m bench.sizing`: the arithmetic on a fixture "Sizing inputs" table (no bench run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.sizing import (
    Assumptions,
    cadence_seconds,
    main,
    parse_inputs,
    size,
    threshold_rows,
)

FIXTURE = """# durability bench: coldtick

## Memory per cached schedule

| figure | value |
| --- | --- |
| KiB per cached schedule | 99.0 |

## Sizing inputs

| key | value | what |
| --- | --- | --- |
| warm_cpu_ms_per_tick | 30 | cached worker, per tick |
| parent_events_per_tick | 15 | schedule history |
| cold_cpu_ms_per_tick | 230 | cold worker, per tick |
| cold_history_events | 500 | mean schedule history at those ticks |
| cold_rss_mib | 100 | the cold worker's VmRSS |
| child_events_per_run | 10 | ScheduledRun history |
| kib_per_cached_schedule | 64 | VmRSS delta / cached |
| worker_base_rss_mib | 100 | worker VmRSS with 20 cached |
| continue_as_new_after_events | 2000 | the schedule's default |

Worker logs: 0 lines.
"""


def test_parse_reads_only_the_sizing_table() -> None:
    inputs = parse_inputs(FIXTURE)
    assert inputs["kib_per_cached_schedule"] == 64  # not the 99.0 of the memory table
    assert inputs["cold_history_events"] == 500


def test_a_million_hourly_objects() -> None:
    row = size(parse_inputs(FIXTURE), 1_000_000, Assumptions(cadence_s=3600, actions_per_run=5))
    ticks = 1_000_000 / 3600
    assert row.ticks_per_s == pytest.approx(ticks)
    assert row.cached_cores == pytest.approx(ticks * 0.030)
    assert row.cached_workers == 9  # 8.3 cores at 1 core per process
    # 1,000,000 x 64 KiB plus 9 processes x 100 MiB
    assert row.cached_memory_gib == pytest.approx((1_000_000 * 64 / 1024 + 900) / 1024)
    # the replay part (230 - 30 ms at 500 events) scaled to 1,000 events (2,000 / 2)
    assert row.cold_ms_per_tick == pytest.approx(30 + 200 * 2)
    assert row.uncached_cores == pytest.approx(ticks * 0.430)
    assert row.uncached_workers == 120
    assert row.uncached_memory_gib == pytest.approx(120 * 100 / 1024)
    assert row.events_per_s == pytest.approx(ticks * 25)
    # 24 runs a day each; a continue-as-new (2 actions) every 2,000 / 15 ticks
    assert row.actions_per_day == pytest.approx(24_000_000 * (5 + 2 * 15 / 2000))


def test_the_threshold_trade_off() -> None:
    rows = threshold_rows(parse_inputs(FIXTURE), [200, 2000])
    # a cold tick replays half the threshold: 30 ms + 200 ms x (100 / 500) events
    assert rows[0].cold_ms_per_tick == pytest.approx(30 + 200 * 100 / 500)
    assert rows[0].cold_over_warm == pytest.approx(70 / 30)
    assert rows[1].cold_ms_per_tick == pytest.approx(30 + 200 * 1000 / 500)
    # two actions every 200 / 15 ticks
    assert rows[0].continue_as_new_actions_per_run == pytest.approx(2 * 15 / 200)
    assert rows[1].ticks_per_workflow_run == pytest.approx(2000 / 15)


def test_linear_in_objects_and_cadence() -> None:
    inputs = parse_inputs(FIXTURE)
    small = size(inputs, 10_000, Assumptions(cadence_s=3600))
    large = size(inputs, 10_000_000, Assumptions(cadence_s=3600))
    assert large.uncached_cores == pytest.approx(1000 * small.uncached_cores)
    assert large.events_per_s == pytest.approx(1000 * small.events_per_s)
    faster = size(inputs, 10_000, Assumptions(cadence_s=60))
    assert faster.actions_per_day == pytest.approx(60 * small.actions_per_day)


def test_cadences() -> None:
    assert cadence_seconds("1h") == 3600
    assert cadence_seconds("@every 1h30m") == 5400
    assert cadence_seconds("90") == 90
    with pytest.raises(ValueError, match="cadence"):
        cadence_seconds("hourly")


def test_cli_refuses_a_file_without_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "other.md"
    path.write_text("# something else\n")
    assert main([str(path)]) == 2
    assert "Sizing inputs" in capsys.readouterr().err
    good = tmp_path / "coldtick.md"
    good.write_text(FIXTURE)
    assert main([str(good), "--objects", "10000"]) == 0
    assert "| 10,000 |" in capsys.readouterr().out
