"""A run handler that fails with a huge message (issue: a 3 MB input wedging a workflow, here
an error): every copy the schedule keeps or sends (its runs, dead letters, the outcome call,
the `runs` query) is cut to `MAX_RUN_ERROR_MESSAGE`, so nothing it carries or answers grows."""

from __future__ import annotations

import json

import pytest
from temporalio.client import Client

from tests.support.cold_worker import assert_healthy
from tests.support.fakes import ScheduleFake
from tests.support.helpers import eventually, schedule_worker
from workflows.schedule.models import MAX_RUN_ERROR_MESSAGE, MAX_RUN_ERROR_NAME, RunError

pytestmark = pytest.mark.cacheless


def test_a_run_error_is_cut_wherever_it_is_made_or_read() -> None:
    made = RunError(name="N" * 10_000, message="m" * 1_000_000)
    assert (len(made.name), len(made.message)) == (MAX_RUN_ERROR_NAME, MAX_RUN_ERROR_MESSAGE)
    # Carried state recorded by an earlier build is cut as it loads.
    read = RunError.model_validate({"name": "Boom", "message": "m" * 50_000})
    assert len(read.message) == MAX_RUN_ERROR_MESSAGE


async def test_a_run_failing_with_a_megabyte_message_delivers_a_cut_outcome(
    client: Client, task_queue: str, unique: str
) -> None:
    acts = ScheduleFake()
    acts.refusing = acts.refusals_final = True  # the delivery is refused at once: a dead letter
    params = {"fail": True, "fail_message_chars": 1_500_000}
    async with schedule_worker(client, task_queue, acts.activities()):
        handle = await client.start_workflow(
            "DurabilitySchedule",
            {"max_dead_letters": 5},
            id=f"schedule:huge-error-{unique}",
            task_queue=task_queue,
        )
        await handle.execute_update(
            "set", {"expression": "@yearly", "version": 1, "params": params}
        )
        await handle.execute_update("trigger", {})
        letters = await eventually(lambda: handle.query("dead_letters"), timeout=30)
        [letter] = letters
        assert letter["outcome"]["status"] == "errored"
        assert letter["outcome"]["error"]["name"] == "Boom"
        assert len(letter["outcome"]["error"]["message"]) == MAX_RUN_ERROR_MESSAGE
        # The outcome activity got the cut error too, and the answers stay small.
        assert acts.outcomes, "the outcome activity was never called"
        [(_, called_with, _)] = acts.outcomes
        assert len(called_with["error"]["message"]) == MAX_RUN_ERROR_MESSAGE
        assert len(json.dumps(await handle.query("runs"))) < 10_000
        assert len(json.dumps(letters)) < 10_000
        await assert_healthy(client, handle)
        await handle.terminate("test done")
