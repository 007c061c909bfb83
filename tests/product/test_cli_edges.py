"""The edges a user meets past the walkthrough, through the real `durability` CLI and the
client: no worker on the queue is said within seconds, naming it, before anything is sent;
Ctrl-C says what was already sent and exits 130; answers say what is true (a cancel of an
older version, blocked and held ledgers, dropped signals)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from durability.client import DurabilityClient
from durability.errors import DurabilityError, NoWorkerError
from tests.support.cold_worker import LedgerActivities
from tests.support.helpers import (
    PROJECT_ROOT,
    assert_no_workflow,
    durability_cli,
    eventually,
    one_line_error,
    running_worker,
    subprocess_env,
)

# -- no worker polls the queue ---------------------------------------------------------


async def test_no_worker_on_the_queue_is_said_naming_it_and_nothing_is_created(
    client: Client, dev_server_address: str, unique: str
) -> None:
    nobody = f"nobody-{unique}"
    object_id, ledger_id = f"nw-{unique}", f"nw-ledger-{unique}"
    # Without the check, `set` waits 120 s for its answer: past durability_cli's bound.
    refused = await durability_cli(
        dev_server_address, "schedule", "set", object_id, "@hourly", "--version", "1",
        "--task-queue", nobody, check=False,
    )  # fmt: skip
    assert refused.returncode == 1, refused
    line = one_line_error(refused.stderr)
    assert f"no worker polls task queue '{nobody}'" in line, line
    assert "nothing was created" in line, line
    await assert_no_workflow(client, f"schedule:{object_id}")

    # A shorter grace than the default 5 s: nothing polls this queue, so it only costs time.
    durability = DurabilityClient(client, nobody, worker_grace=timedelta(seconds=1))
    with pytest.raises(NoWorkerError) as error:
        await durability.enqueue(ledger_id, [{"id": "op-1", "operation_type": "t"}])
    assert error.value.task_queue == nobody and isinstance(error.value, DurabilityError)
    await assert_no_workflow(client, f"ledger:{ledger_id}")

    # A signal waits for no worker: it leaves a schedule on the queue, and whatever would
    # wait on it (a query, an update) is refused naming the queue.
    await durability.signal_set_schedule(object_id, "@hourly", 1)
    got = await durability_cli(dev_server_address, "schedule", "get", object_id, check=False)
    assert got.returncode == 1, got
    assert f"no worker polls task queue '{nobody}'" in one_line_error(got.stderr)
    with pytest.raises(NoWorkerError, match=f"'{nobody}'.*the pause update"):
        await durability.pause_schedule(object_id)
    with pytest.raises(NoWorkerError, match="the close was not sent"):
        await durability.close_schedule(object_id, wait=True)
    await client.get_workflow_handle(f"schedule:{object_id}").terminate("test over")


# -- Ctrl-C ----------------------------------------------------------------------------


@workflow.defn(name="DurabilitySchedule", sandboxed=False)
class NeverAnswers:
    """A stand-in schedule that answers no `set` and ignores a close (cancellation)."""

    @workflow.run
    async def run(self, _input: Any = None) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await workflow.wait_condition(lambda: False)
        await workflow.wait_condition(lambda: False)

    @workflow.update(name="set")
    async def set(self, _raw: Any = None) -> bool:
        await workflow.wait_condition(lambda: False)
        return True


async def interrupted(address: str, args: list[str], until: Any) -> tuple[int, str]:
    """Run the CLI, send it SIGINT (what Ctrl-C sends) once `until()` holds; returns its exit
    code and stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "durability.cli", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=subprocess_env(address), cwd=PROJECT_ROOT,
    )  # fmt: skip
    try:
        await eventually(until, timeout=30)
        process.send_signal(signal.SIGINT)
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
    finally:
        if process.returncode is None:
            process.kill()
    return process.returncode or 0, stderr.decode()


async def has_event(client: Client, workflow_id: str, event_type: int) -> bool:
    with contextlib.suppress(Exception):  # not started yet
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        return any(event.event_type == event_type for event in history.events)
    return False


async def test_ctrl_c_says_what_was_sent_and_exits_130_without_a_traceback(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    object_id = f"int-{unique}"
    workflow_id = f"schedule:{object_id}"
    async with Worker(client, task_queue=task_queue, workflows=[NeverAnswers]):
        # A waiting `set`: sent, and not answered.
        code, stderr = await interrupted(
            dev_server_address,
            ["schedule", "set", object_id, "@hourly", "--version", "1", "--task-queue", task_queue],
            lambda: has_event(
                client, workflow_id, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
            ),
        )
        assert code == 130, stderr
        assert one_line_error(stderr) == (
            f"durability: interrupted: the set update to schedule {object_id} was sent and not "
            "answered yet: it may or may not take effect; read the state before sending it again"
        )
        # `close --wait`: the close was sent and taken; the schedule is closing.
        code, stderr = await interrupted(
            dev_server_address,
            ["schedule", "close", object_id, "--wait"],
            lambda: has_event(
                client, workflow_id, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
            ),
        )
        assert code == 130, stderr
        assert one_line_error(stderr) == (
            f"durability: interrupted: the close of schedule {object_id} was sent; schedule "
            f"{object_id} is closing: it starts no run and closes once the runs it started "
            "have reported"
        )
        await client.get_workflow_handle(workflow_id).terminate("test over")


# -- answers that tell the truth --------------------------------------------------------


async def test_a_cancel_of_a_lower_version_says_nothing_changed_and_describe_shows_drops(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    object_id = f"truth-{unique}"
    durability = DurabilityClient(client, task_queue)

    async def says(*args: str) -> str:
        return (await durability_cli(dev_server_address, *args)).stdout.strip()

    async with running_worker(client, task_queue):
        await durability.set_schedule(object_id, "@hourly", 5)
        # A range with no occurrence records nothing, and says so (not "already recorded").
        empty = ("--start", "2026-01-05T09:30", "--end", "2026-01-05T09:31")
        assert await says("schedule", "backfill", object_id, *empty) == (
            "no run recorded: the expression has no occurrence in the range (within the "
            "schedule's start_at/end_at) that is not already recorded"
        )
        assert await says("schedule", "cancel", object_id, "--version", "3") == (
            "nothing changed: version 5 is stored (live), higher than 3; a cancel of a lower "
            "version is ignored"
        )
        view = await durability.get_schedule(object_id)
        assert view is not None and view["version"] == 5
        assert await says("schedule", "cancel", object_id, "--version", "6") == (
            "cancelled; it was live"
        )
        assert await says("schedule", "cancel", object_id, "--version", "4") == (
            "nothing changed: version 6 is stored (cancelled), higher than 4; a cancel of a "
            "lower version is ignored"
        )
        assert await says("schedule", "cancel", object_id, "--version", "7") == (
            "nothing was live: version 7 is stored as cancelled (a tombstone: a set of version "
            "7 or lower is not applied)"
        )
        assert await says("schedule", "set", object_id, "@hourly", "--version", "6") == (
            "not applied: version 6 is not above the stored version 7 (cancelled)"
        )
        # A raw caller's bad `set` signal is dropped, and `describe` says how many were.
        handle = client.get_workflow_handle(f"schedule:{object_id}")
        await handle.signal("set", {"expression": "not a cron", "version": 9})
        await eventually(lambda: handle.query("dropped_signals"), timeout=20)
        described = await says("schedule", "describe", object_id)
        assert re.search(r"^dropped signals: 1 ", described, re.M), described
        as_json = json.loads(await says("--json", "schedule", "describe", object_id))
        assert as_json["dropped_signals"] == 1
        await handle.terminate("test over")


@activity.defn(name="submit")
async def blocked_submit(request: dict[str, Any]) -> dict[str, Any]:
    return {"outcome": "unresolved", "blocked": True, "error": "far side says no"}


async def test_ledger_list_and_snapshot_show_blocked_held_and_dropped_signals(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    ledger_id = f"truth-ledger-{unique}"
    ops = [{"id": f"op-{n}", "operation_type": "t", "participants": [f"c{n}"]} for n in (1, 2)]
    durability = DurabilityClient(client, task_queue)
    fake = LedgerActivities()
    activities: list[Callable[..., Any]] = [fake.compile, blocked_submit, fake.query, fake.complete]
    async with running_worker(client, task_queue, activities):
        await durability.enqueue(ledger_id, ops)

        async def blocked() -> bool:
            snap = await durability.snapshot(ledger_id)
            return bool(snap["counts"]["operations"] == {"blocked": 2})

        await eventually(blocked, timeout=30)
        await durability.hold(ledger_id)
        handle = client.get_workflow_handle(f"ledger:{ledger_id}")
        await handle.signal("release", {"token": 7})  # not a text: dropped

        async def dropped() -> bool:
            return bool((await durability.snapshot(ledger_id))["dropped_signals"] == 1)

        await eventually(dropped, timeout=20)
        shown = (await durability_cli(dev_server_address, "ledger", "snapshot", ledger_id)).stdout
        assert re.search(r"^held\s+yes: 1 hold\(s\)", shown, re.M), shown
        assert re.search(r"^operations\s+2 blocked$", shown, re.M), shown
        assert re.search(r"^requests\s+2 blocked$", shown, re.M), shown
        assert re.search(r"^dropped_signals\s+1$", shown, re.M), shown

        query = f"DurabilityLedgerId = '{ledger_id}'"

        async def listed() -> str | None:
            out = await durability_cli(dev_server_address, "ledger", "list", "--query", query)
            return out.stdout if "2 blocked" in out.stdout else None

        shown = await eventually(listed, timeout=30)
        assert "resolved" not in shown, shown
        await handle.terminate("test over")
