"""The `durability` CLI tells the truth, leaves nothing behind and never prints a traceback
(real subprocesses against the dev server)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from tests.support.helpers import (
    PROJECT_ROOT,
    assert_no_workflow,
    durability_cli,
    one_line_error,
    running_worker,
    subprocess_env,
)


async def test_a_refused_set_or_enqueue_exits_one_names_the_field_and_creates_nothing(
    client: Client, dev_server_address: str, unique: str, tmp_path: Path
) -> None:
    object_id = ledger_id = f"cli-bad-{unique}"
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps([{"id": "op-1", "operation_type": "t", "payload": "x" * 3_000_000}]))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"id": "op-1"}]))
    schedule = ("schedule", "set", object_id)
    cases = [
        ((*schedule, "@hourly", "--version", "1", "--params", "[1,2]"),
         "invalid set payload: params: Input should be an object (got [1, 2])"),
        ((*schedule, "61 * * * *", "--version", "1"), "expression: does not parse"),
        ((*schedule, "not a cron", "--version", "1", "--signal"),
         "expression: does not parse"),
        ((*schedule, "@every 5m", "--version", "1", "--options", '{"max_concurrent_runs": 0}'),
         "max_concurrent_runs"),
        ((*schedule, "@every 5m", "--version", "1", "--options", '{"max_concurent_runs": 2}'),
         "unknown field(s) max_concurent_runs"),
        ((*schedule, "@every 5m", "--version", "1", "--params", json.dumps({"b": "x" * 9000}),
          "--signal"),
         "more than the limit of 8192"),
        (("ledger", "enqueue", ledger_id, "--file", str(huge)), "more than the limit of 16384"),
        (("ledger", "enqueue", ledger_id, "--file", str(huge), "--signal"),
         "more than the limit of 16384"),
        (("ledger", "enqueue", ledger_id, "--file", str(bad)), "operations.0.operation_type"),
        (("ledger", "enqueue", ledger_id, "--file", str(bad), "--options", '{"lanes": 3}'),
         "lanes"),
    ]  # fmt: skip
    for argv, named in cases:
        started = time.monotonic()
        result = await durability_cli(dev_server_address, *argv, check=False)
        elapsed = time.monotonic() - started
        line = one_line_error(result.stderr)
        assert result.returncode == 1 and named in line, (argv, result.stderr)
        assert " rejected by " in line, line
        assert elapsed < 10, (argv, elapsed)  # the 40 s hang is gone (the CLI imports in ~1 s)
    await assert_no_workflow(client, f"schedule:{object_id}")
    await assert_no_workflow(client, f"ledger:{ledger_id}")


SCHEDULE_COMMANDS = [
    ("get",), ("runs",), ("cancel",), ("cancel", "--signal"), ("cancel", "--version", "2"),
    ("pause",), ("unpause",), ("trigger",), ("dead-letters",), ("redeliver", "x:1"),
    ("backfill", "--start", "2026-01-01T00:00", "--end", "2026-01-02T00:00"),
    ("configure", "--set", '{"max_concurrent_runs": 3}'),
    ("configure", "--set", '{"max_concurrent_runs": 3}', "--signal"), ("settings",),
]  # fmt: skip
LEDGER_COMMANDS = [
    ("snapshot",), ("claims",), ("stop",), ("hold",), ("release", "token"), ("resume",),
    ("settle",),
    ("skip", "op-1"),
    ("configure", "--set", '{"concurrency": 3}'),
    ("configure", "--set", '{"concurrency": 3}', "--signal"), ("settings",),
]  # fmt: skip


@pytest.mark.slow
async def test_every_other_command_on_a_missing_id_says_no_such_and_creates_nothing(
    client: Client, dev_server_address: str, unique: str
) -> None:
    object_id = f"nope-{unique}"
    for group, commands in (("schedule", SCHEDULE_COMMANDS), ("ledger", LEDGER_COMMANDS)):
        for command, *rest in commands:
            result = await durability_cli(
                dev_server_address, group, command, object_id, *rest, check=False
            )
            assert result.returncode == 1, (group, command, result.stdout)
            assert one_line_error(result.stderr) == f"durability: no such {group} {object_id}"
    await assert_no_workflow(client, f"schedule:{object_id}")
    await assert_no_workflow(client, f"ledger:{object_id}")


async def test_closed_ids_say_closed_and_are_reborn_only_with_new(
    client: Client, dev_server_address: str, task_queue: str, unique: str, tmp_path: Path
) -> None:
    object_id = ledger_id = f"cli-closed-{unique}"
    ops = tmp_path / "ops.json"
    ops.write_text(json.dumps([{"id": "op-1", "operation_type": "run.cancel"}]))
    queue = ("--task-queue", task_queue)
    async with running_worker(client, task_queue):
        await durability_cli(
            dev_server_address, *queue, "schedule", "set", object_id, "@hourly", "--version", "7"
        )
        await client.get_workflow_handle(f"schedule:{object_id}").terminate("retired")
        for command in ("get", "runs"):
            shown = await durability_cli(
                dev_server_address, "schedule", command, object_id, check=False
            )
            line = one_line_error(shown.stderr)
            assert shown.returncode == 1 and shown.stdout == "", shown.stdout
            assert line.startswith(f"durability: schedule {object_id} is closed (terminated")
        again = await durability_cli(
            dev_server_address, *queue, "schedule", "set", object_id, "@hourly", "--version", "1",
            check=False,
        )  # fmt: skip
        assert again.returncode == 1
        assert one_line_error(again.stderr).endswith("; --new starts a new one"), again.stderr
        reborn = await durability_cli(
            dev_server_address, *queue, "schedule", "set", object_id, "@hourly", "--version", "1",
            "--new",
        )  # fmt: skip
        assert reborn.stdout.strip() == "applied: version 1 is stored"

        await durability_cli(
            dev_server_address, *queue, "ledger", "enqueue", ledger_id, "--file", str(ops)
        )
        stopped = await durability_cli(dev_server_address, "ledger", "stop", ledger_id)
        assert "unknown: none" in stopped.stdout
        stopped_run = (await client.get_workflow_handle(f"ledger:{ledger_id}").describe()).run_id
        is_stopped = f"durability: ledger {ledger_id} is stopped (its last run completed by stop)"
        for command in ("snapshot", "stop"):  # a second stop says so too
            shown = await durability_cli(
                dev_server_address, "ledger", command, ledger_id, check=False
            )
            assert shown.returncode == 1 and one_line_error(shown.stderr) == is_stopped
            assert "Traceback" not in shown.stderr
        for signal in ((), ("--signal",)):
            refused = await durability_cli(
                dev_server_address, *queue, "ledger", "enqueue", ledger_id, "--file", str(ops),
                *signal, check=False,
            )  # fmt: skip
            line = one_line_error(refused.stderr)
            assert refused.returncode == 1 and "Traceback" not in refused.stderr
            assert line.startswith(f"{is_stopped}: enqueue refused, nothing was created; ")
            assert f"--new starts a new, empty ledger under ID {ledger_id!r}" in line
        # Nothing was created: the stopped run is still the ledger's last.
        after = await client.get_workflow_handle(f"ledger:{ledger_id}").describe()
        assert (after.run_id, after.status) == (stopped_run, WorkflowExecutionStatus.COMPLETED)
        new = await durability_cli(
            dev_server_address, *queue, "--json", "ledger", "enqueue", ledger_id, "--file",
            str(ops), "--new",
        )  # fmt: skip
        assert json.loads(new.stdout) == {"accepted": ["op-1"], "duplicates": [], "conflicts": []}
    for workflow_id in (f"schedule:{object_id}", f"ledger:{ledger_id}"):
        await client.get_workflow_handle(workflow_id).terminate("test done")


async def test_results_read_as_sentences_and_json_keeps_wire_values(
    client: Client, dev_server_address: str, task_queue: str, unique: str, tmp_path: Path
) -> None:
    object_id = ledger_id = f"cli-read-{unique}"
    ops = tmp_path / "ops.json"
    ops.write_text(
        json.dumps([{"id": f"op-{n}", "operation_type": "t", "participants": [f"c{n}"]}
                    for n in (1, 2)])
    )  # fmt: skip
    queue = ("--task-queue", task_queue)

    async def says(*argv: str) -> str:
        return (await durability_cli(dev_server_address, *argv)).stdout.strip()

    async with running_worker(client, task_queue):
        assert await says(*queue, "schedule", "set", object_id, "@hourly", "--version", "2") == (
            "applied: version 2 is stored"
        )
        assert await says(*queue, "schedule", "set", object_id, "@hourly", "--version", "1") == (
            "not applied: version 1 is not above the stored version 2 (live)"
        )
        assert await says("schedule", "pause", object_id) == "paused"
        assert await says("schedule", "pause", object_id) == "already paused"
        # The global options before the command's name, as in `durability schedule --json get`.
        view = json.loads(await says("schedule", "--json", "get", object_id))
        assert (view["version"], view["paused"]) == (2, True)
        assert re.search(r"^paused\s+yes$", await says("schedule", "get", object_id), re.M)
        assert await says("schedule", "unpause", object_id) == "unpaused: ticking again from now"
        assert await says("schedule", "unpause", object_id) == "was not paused"
        assert await says("schedule", "cancel", object_id) == "cancelled; it was live"
        assert await says("schedule", "cancel", object_id) == (
            "cancelled; nothing was live (already cancelled, or never set)"
        )
        assert json.loads(await says("--json", "schedule", "cancel", object_id)) == {"live": False}
        assert await says("schedule", "cancel", object_id, "--version", "1") == (
            "nothing changed: version 2 is stored (cancelled), higher than 1; a cancel of a "
            "lower version is ignored"
        )
        assert (
            await says("schedule", "get", object_id) == "no live schedule: version 2 is cancelled"
        )
        assert json.loads(await says("--json", "schedule", "get", object_id)) is None
        # Started without a `set` (as `temporal workflow start` can): nothing was ever set.
        await client.start_workflow(
            "DurabilitySchedule", {}, id=f"schedule:{object_id}-bare", task_queue=task_queue
        )
        assert (
            await says("schedule", "get", f"{object_id}-bare") == "no live schedule: none set yet"
        )

        enqueued = await says(*queue, "ledger", "enqueue", ledger_id, "--file", str(ops))
        assert "accepted    op-1, op-2" in enqueued and "[" not in enqueued, enqueued
        assert await says("ledger", "resume", ledger_id) == (
            "nothing to resume (no unresolved or blocked request)"
        )
        assert json.loads(await says("ledger", "--json", "resume", ledger_id)) == {"resumed": []}
        blocked = await says("ledger", "snapshot", ledger_id, "--phase", "blocked")
        assert blocked.splitlines()[0] == "no operation in phase blocked", blocked
        listed = await says("ledger", "list", "--query", f"DurabilityLedgerId = '{ledger_id}'")
        assert "next_tick_at" not in listed and "version" not in listed, listed
    for workflow_id in (
        f"schedule:{object_id}",
        f"schedule:{object_id}-bare",
        f"ledger:{ledger_id}",
    ):
        await client.get_workflow_handle(workflow_id).terminate("test done")


async def test_plausible_mistakes_print_one_line_not_a_traceback(
    client: Client, dev_server_address: str, task_queue: str, unique: str, tmp_path: Path
) -> None:
    ledger_id = f"cli-oops-{unique}"
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    async with running_worker(client, task_queue):
        await durability_cli(dev_server_address, "--task-queue", task_queue, "ledger", "enqueue",
                             ledger_id, "--file", str(empty))  # fmt: skip
        mistakes = [
            (("ledger", "snapshot", ledger_id, "--limit", "0"), "limit"),
            (("schedule", "list", "--query", "DurabilityVersion >= 3"), "DurabilityVersion"),
            (("schedule", "backfill", f"x-{unique}", "--start", "2026-01-02", "--end",
              "2026-01-01"), f"no such schedule x-{unique}"),
        ]  # fmt: skip
        for argv, named in mistakes:
            result = await durability_cli(dev_server_address, *argv, check=False)
            assert result.returncode == 1 and named in one_line_error(result.stderr), argv
    await client.get_workflow_handle(f"ledger:{ledger_id}").terminate("test done")


async def test_epoch_times_in_errors_read_as_iso_and_a_closed_pipe_is_no_traceback(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    object_id = f"cli-times-{unique}"
    async with running_worker(client, task_queue):
        await durability_cli(dev_server_address, "--task-queue", task_queue, "schedule", "set",
                             object_id, "@hourly", "--version", "1")  # fmt: skip
        future = await durability_cli(
            dev_server_address, "schedule", "backfill", object_id,
            "--start", "2026-01-01T00:00", "--end", "2999-01-01T00:00", check=False,
        )  # fmt: skip
        line = one_line_error(future.stderr)
        assert future.returncode == 1 and "32472144000000 (2999-01-01T00:00:00.000+00:00)" in line
        # `... | head` that stops reading before the command writes: rc 0, nothing on stderr.
        read_end, write_end = os.pipe()
        os.close(read_end)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "durability.cli", "schedule", "get", object_id,
            stdout=write_end, stderr=asyncio.subprocess.PIPE, cwd=PROJECT_ROOT,
            env=subprocess_env(dev_server_address),
        )  # fmt: skip
        os.close(write_end)
        _, stderr = await asyncio.wait_for(process.communicate(), 60)
        assert (process.returncode, stderr.decode()) == (0, "")
    await client.get_workflow_handle(f"schedule:{object_id}").terminate("test done")
