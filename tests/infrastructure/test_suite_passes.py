"""`make test`'s two pytest passes: the cacheless pass runs only what a cache setting reaches."""

from __future__ import annotations

import os
import sys

from tests.support.helpers import CACHE_SIZE_ENV, run_command

BACKFILL = "tests/schedule/test_schedule_pause_trigger_backfill.py"
# Marked `cacheless` (the whole file is): one test starts a worker, one only calls the core.
WITH_A_WORKER = f"{BACKFILL}::test_pause_trigger_backfill_through_the_cli_reach_the_run_activity"
CORE_ONLY = f"{BACKFILL}::test_pause_stops_ticks_and_unpause_skips_what_was_missed"
REPLAY_ONLY = (
    "tests/ledger/test_ledger_complete.py::"
    "test_a_request_run_by_a_worker_that_ignored_the_field_replays_without_the_call"
)
NO_TESTS_COLLECTED = 5  # pytest's exit status


async def collected(cacheless_pass: bool) -> set[str]:
    """The test IDs `pytest -m cacheless` collects, in the main pass's environment or the
    cacheless pass's."""
    env = {k: v for k, v in os.environ.items() if k != CACHE_SIZE_ENV}
    if cacheless_pass:
        env[CACHE_SIZE_ENV] = "0"
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    done = await run_command([*argv, "-m", "cacheless", BACKFILL, REPLAY_ONLY], False, env)
    assert done.returncode in (0, NO_TESTS_COLLECTED), done.stdout + done.stderr
    return {line for line in done.stdout.splitlines() if "::" in line}


async def test_the_cacheless_pass_leaves_out_marked_tests_that_start_no_server() -> None:
    main, cacheless = await collected(False), await collected(True)
    assert {WITH_A_WORKER, CORE_ONLY, REPLAY_ONLY} <= main
    assert WITH_A_WORKER in cacheless
    assert CORE_ONLY not in cacheless and REPLAY_ONLY not in cacheless
