"""Replay recorded ledger histories with the current code: a nondeterministic change fails here.

Re-record after an intended, patched change with
`DURABILITY_RECORD_HISTORIES=1 .venv/bin/python -m pytest tests/ledger/test_ledger_workflow.py
tests/ledger/test_ledger_local_compile.py` (every test that calls `record_history`: blocked_resume,
continue_as_new, drain_before_close, request_retry_after; local_compile) and
`tests/ledger/test_ledger_complete.py` (request_complete_accepted, request_complete_blocked).
`ledger_close_without_update_0_1_1.json` was recorded by 0.1.1 with
`tests/product/test_updates_racing_close.py` (a run that waited for a task without updates).
`ledger_stop_final_query_0_1_1.json` and `ledger_stop_final_query_child_0_1_1.json` are recorded
by `tests/ledger/test_ledger_stop.py`; `ledger_stop_in_flight_0_1_1_before_final_queries.json`
by the build before the `stop-final-queries` patch (a stop that asked nothing).
`ledger_grant_0_1_1.json` and `ledger_request_grant_0_1_1.json` were recorded by 0.1.1 with
`tests/ledger/test_ledger_slots.py -k granted_retry` (a retry re-launched by the ledger's grant).
`ledger_launch_gate_0_1_1.json` is recorded by `tests/ledger/test_ledger_gate.py` (a request
compiled while held, launched on release), `ledger_stop_wait_cancelled_0_1_1.json` and
`ledger_request_wait_cancelled_0_1_1.json` by `tests/ledger/test_ledger_stop_cancel.py` (a
stop whose final query waited for the submit it cancelled).
`ledger_stop_awaits_final_reports.json` and `ledger_request_reports_end.json` are recorded by
`tests/ledger/test_ledger_stop_earlier_run.py` (a stop that waited for the last report of a
request an earlier run started).
`ledger_drain_before_close.json` is recorded by `tests/ledger/test_ledger_workflow.py -k
continue_as_new_lets` (a drain before continue-as-new, under `ledger-drain-before-close`);
`ledger_continue_as_new_quiet.json` by the build before it (a 1 s wait).
`ledger_stop_queries_within_lanes.json` is recorded by `tests/ledger/test_ledger_stop.py -k
lanes` (final queries of one type asked one at a time, `ledger-stop-queries-within-lanes`);
`ledger_stop_queries_before_lanes.json` by the same test on the build before it (both at once).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory

from harness.replay import production_replayer
from tests.support.helpers import HISTORY_DIR, replay_each
from workflows.ledger.request import FrozenRequestWorkflow
from workflows.ledger.workflow import OperationLedgerWorkflow

HISTORIES = sorted(HISTORY_DIR.glob("ledger_*.json"))


def test_histories_are_recorded() -> None:
    assert len(HISTORIES) >= 3, HISTORIES


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_recorded_history_replays(path: Path) -> None:
    recorded = json.loads(path.read_text())
    history = WorkflowHistory.from_json(recorded["workflow_id"], recorded["history"])
    replayer = production_replayer([OperationLedgerWorkflow, FrozenRequestWorkflow])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None


async def test_a_run_before_its_first_task_is_skipped_not_waited_on() -> None:
    """A run continued as new a moment ago can have only its started event; the SDK's
    replayer waits on that forever, so the replay check leaves it out (and bounds the rest)."""
    recorded = json.loads(HISTORIES[0].read_text())
    history = WorkflowHistory.from_json(recorded["workflow_id"], recorded["history"])
    before_first_task = WorkflowHistory(history.workflow_id, history.events[:1])
    replayer = production_replayer([OperationLedgerWorkflow, FrozenRequestWorkflow])
    await replay_each(replayer, [before_first_task, history], seconds=10)
