"""Every `durability` CLI command through a real subprocess against the dev server."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import sys
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.ledger import compile_passthrough, ledger_activities
from durability.client import DurabilityClient
from durability.codec import EncryptionCodec
from tests.support.helpers import (
    PROJECT_ROOT,
    durability_cli,
    eventually,
    running_worker,
    subprocess_env,
)

# What `ledger snapshot --json` lists for each operation (a list, in sequence order).
SNAPSHOT_OPERATION_KEYS = {
    "id", "operation_type", "sequence", "phase", "blockers", "waiting_for", "request_id",
    "outcome", "error",
}  # fmt: skip


def snapshot_operations(stdout: str) -> list[dict[str, Any]]:
    """The operations of a `ledger snapshot --json`, with their shape pinned."""
    listed = json.loads(stdout)["operations"]
    assert isinstance(listed, list), listed
    for operation in listed:
        assert set(operation) == SNAPSHOT_OPERATION_KEYS, operation
    return listed


def iso_utc(epoch_ms: int) -> str:
    """How the tables print a time (written here, not imported from the CLI)."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}+00:00"


async def test_schedule_commands_set_get_runs_cancel(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    object_id = f"cli-{unique}"
    cli = ("--task-queue", task_queue)
    gate = asyncio.Event()
    started: list[int] = []
    delivered: list[int] = []

    @activity.defn(name="run")
    async def held_run(run: dict[str, Any]) -> None:
        """Runs stay `running` until the test opens the gate, so `runs` has one to show."""
        started.append(run["scheduled_time"])
        await gate.wait()

    @activity.defn(name="on_outcome")
    async def record_outcome(run: dict[str, Any], outcome: dict[str, Any]) -> None:
        delivered.append(run["scheduled_time"])

    async with running_worker(client, task_queue, [held_run, record_outcome]):
        result = await durability_cli(
            dev_server_address, *cli, "--json", "schedule", "set", object_id, "@every 1s",
            "--version", "3", "--params", '{"plan": "pro"}',
        )  # fmt: skip
        assert json.loads(result.stdout) == {"applied": True}

        lower = await durability_cli(
            dev_server_address,
            *cli,
            "--json",
            "schedule",
            "set",
            object_id,
            "@hourly",
            "--version",
            "2",
        )
        assert json.loads(lower.stdout) == {"applied": False}

        got = await durability_cli(dev_server_address, *cli, "--json", "schedule", "get", object_id)
        view = json.loads(got.stdout)
        assert view == {
            "expression": "@every 1s",
            "version": 3,
            "jitter_ms": 0,
            "next_at": view["next_at"],
            "params": {"plan": "pro"},
            "paused": False,
            "pause_note": None,
        }
        assert isinstance(view["next_at"], int) and view["next_at"] % 1000 == 0
        shown = await durability_cli(dev_server_address, *cli, "schedule", "get", object_id)
        rows = dict(line.split(None, 1) for line in shown.stdout.splitlines()[2:])
        assert rows == {
            "expression": "@every 1s",
            "version": "3",
            "jitter_ms": "0",
            "next_at": rows["next_at"],
            "params": '{"plan": "pro"}',
            "paused": "no",
        }, shown.stdout
        assert re.fullmatch(ISO_UTC, rows["next_at"]), shown.stdout

        await eventually(lambda: started, timeout=20)
        first = started[0]

        async def listed_running() -> list[dict[str, Any]] | None:
            runs = await durability_cli(
                dev_server_address, *cli, "--json", "schedule", "runs", object_id
            )
            listed: list[dict[str, Any]] = json.loads(runs.stdout)
            return listed if any(r["scheduled_time"] == first for r in listed) else None

        listed = await eventually(listed_running, timeout=20)
        assert [r for r in listed if r["scheduled_time"] == first] == [
            {"scheduled_time": first, "due_at": first, "state": "running", "attempt": 1,
             "error": None}
        ]  # fmt: skip
        assert [r["scheduled_time"] for r in listed] == sorted(r["scheduled_time"] for r in listed)
        runs_table = await durability_cli(dev_server_address, *cli, "schedule", "runs", object_id)
        line = rf"^{re.escape(iso_utc(first))}\s+{re.escape(iso_utc(first))}\s+running\s+1\s+-$"
        assert re.search(line, runs_table.stdout, re.MULTILINE), runs_table.stdout

        cancelled = await durability_cli(
            dev_server_address, *cli, "--json", "schedule", "cancel", object_id
        )
        assert json.loads(cancelled.stdout) == {"live": True}
        again = await durability_cli(
            dev_server_address, *cli, "--json", "schedule", "cancel", object_id
        )
        assert json.loads(again.stdout) == {"live": False}
        after = await durability_cli(dev_server_address, *cli, "schedule", "get", object_id)
        assert after.stdout.strip() == "no live schedule: version 3 is cancelled"
        gate.set()
        schedule = client.get_workflow_handle(f"schedule:{object_id}")

        async def acknowledged() -> bool:
            return not await schedule.query("runs")

        await eventually(acknowledged, timeout=30)
        await schedule.terminate("test done")
    assert first in delivered and sorted(delivered) == sorted(started)


ISO_UTC = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00"


async def test_options_after_the_command_list_commands_and_iso_times_in_tables(
    client: Client, dev_server_address: str, task_queue: str, unique: str, tmp_path: Path
) -> None:
    object_id, ledger_id = f"cli-list-{unique}", f"cli-list-{unique}"
    queue = ("--task-queue", task_queue)
    ops = tmp_path / "ops.json"
    ops.write_text(json.dumps([{"id": "op-1", "operation_type": "t", "participants": ["c1"]}]))
    async with running_worker(client, task_queue):
        # Global options after the command, as the docs' examples write them.
        await durability_cli(
            dev_server_address, "schedule", "set", object_id, "0 0 1 1 *", "--version", "4", *queue
        )
        triggered = await durability_cli(dev_server_address, "schedule", "trigger", object_id)
        assert re.search(rf"scheduled_time\s+{ISO_UTC}", triggered.stdout), triggered.stdout
        runs = await durability_cli(dev_server_address, "schedule", "runs", object_id, "--json")
        assert all(isinstance(run["scheduled_time"], int) for run in json.loads(runs.stdout))
        await durability_cli(
            dev_server_address, "ledger", "enqueue", ledger_id, "--file", str(ops), *queue
        )

        schedule_filter = f"DurabilityObjectId = '{object_id}'"

        async def listed_schedule() -> list[dict[str, Any]]:
            found = await durability_cli(
                dev_server_address, "schedule", "list", "--query", schedule_filter, "--json"
            )
            return [s for s in json.loads(found.stdout) if s["version"] == 4]

        [schedule] = await eventually(listed_schedule, timeout=20)
        assert (schedule["id"], schedule["status"]) == (object_id, "RUNNING")
        assert isinstance(schedule["next_tick_at"], int)
        shown = await durability_cli(
            dev_server_address, "schedule", "list", "--query", schedule_filter
        )
        assert object_id in shown.stdout and re.search(ISO_UTC, shown.stdout), shown.stdout

        async def listed_ledger() -> list[dict[str, Any]]:
            found = await durability_cli(dev_server_address, "ledger", "list", "--json")
            return [w for w in json.loads(found.stdout) if w["id"] == ledger_id]

        [ledger] = await eventually(listed_ledger, timeout=20)
        assert ledger["workflow_id"] == f"ledger:{ledger_id}" and ledger["status"] == "RUNNING"
        await client.get_workflow_handle(f"schedule:{object_id}").terminate("test done")
        await client.get_workflow_handle(f"ledger:{ledger_id}").terminate("test done")
    # Terminated: no longer listed by default (running only), found by a status filter.
    terminated = f"{schedule_filter} AND ExecutionStatus = 'Terminated'"

    async def only_by_status() -> bool:
        running = await durability_cli(
            dev_server_address, "schedule", "list", "--limit", "10000", "--json"
        )
        closed = await durability_cli(
            dev_server_address, "schedule", "list", "--query", terminated, "--json"
        )
        return object_id not in [w["id"] for w in json.loads(running.stdout)] and [
            w["status"] for w in json.loads(closed.stdout)
        ] == ["TERMINATED"]

    await eventually(only_by_status, timeout=20)


async def test_schedule_set_rejection_exits_one_and_names_the_field(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    object_id = f"cli-bad-{unique}"
    async with running_worker(client, task_queue):
        result = await durability_cli(
            dev_server_address, "--task-queue", task_queue, "schedule", "set", object_id,
            "not a cron", "--version", "1", check=False,
        )  # fmt: skip
        assert result.returncode == 1
        assert "set rejected" in result.stderr and "expression" in result.stderr
        assert "not a cron" in result.stderr
        get = await durability_cli(
            dev_server_address, "--json", "schedule", "get", object_id, check=False
        )
        # Nothing was created: refused before anything was sent.
        assert get.returncode == 1 and f"no such schedule {object_id}" in get.stderr


async def test_bad_input_exits_two_before_contacting_the_server(dev_server_address: str) -> None:
    bad_json = await durability_cli(
        dev_server_address, "schedule", "set", "x", "@hourly", "--version", "1",
        "--params", "{nope", check=False,
    )  # fmt: skip
    assert bad_json.returncode == 2 and "--params must be JSON" in bad_json.stderr
    missing = await durability_cli(
        dev_server_address, "ledger", "enqueue", "x", "--file", "/does/not/exist", check=False
    )
    assert missing.returncode == 2 and "/does/not/exist" in missing.stderr


async def test_unknown_schedule_exits_one(dev_server_address: str, unique: str) -> None:
    result = await durability_cli(
        dev_server_address, "schedule", "get", f"nobody-{unique}", check=False
    )
    assert result.returncode == 1 and f"no such schedule nobody-{unique}" in result.stderr


async def test_ledger_commands_enqueue_snapshot_claims_hold_release_resume_stop(
    client: Client, dev_server_address: str, task_queue: str, unique: str, tmp_path: Path
) -> None:
    ledger_id = f"cli-{unique}"
    cli = ("--task-queue", task_queue)
    operations = tmp_path / "ops.json"
    operations.write_text(
        json.dumps(
            {
                "operations": [
                    {"id": "op-1", "operation_type": "shape.create", "participants": ["c1"]},
                    {"id": "op-2", "operation_type": "shape.move", "participants": ["c1"],
                     "dependencies": ["op-1"]},
                ]
            }
        )
    )  # fmt: skip
    flaky = tmp_path / "flaky.json"
    flaky.write_text(json.dumps([{"id": "flaky", "operation_type": "t", "participants": ["c2"]}]))
    compiled: list[str] = []

    @activity.defn(name="compile")
    async def compile_fails_once(intent: dict[str, Any], request_id: str) -> dict[str, Any]:
        """`flaky` fails to compile the first time (blocked until `resume`), then compiles."""
        compiled.append(intent["id"])
        if intent["id"] == "flaky" and compiled.count("flaky") == 1:
            raise ApplicationError("layer 7 is not there yet", non_retryable=True)
        return await compile_passthrough(intent, request_id)

    ledger = client.get_workflow_handle(f"ledger:{ledger_id}")

    async def snapshot() -> dict[str, Any]:
        result: dict[str, Any] = await ledger.query("snapshot")
        return result

    activities = [compile_fails_once, *ledger_activities()[1:]]
    async with running_worker(client, task_queue, activities):
        # The same file twice: the second time every operation is a duplicate.
        enqueue = (*cli, "--json", "ledger", "enqueue", ledger_id, "--file", str(operations))
        enqueued = await durability_cli(dev_server_address, *enqueue)
        assert json.loads(enqueued.stdout) == {
            "accepted": ["op-1", "op-2"], "duplicates": [], "conflicts": []
        }  # fmt: skip
        again = await durability_cli(dev_server_address, *enqueue)
        assert json.loads(again.stdout) == {
            "accepted": [], "duplicates": ["op-1", "op-2"], "conflicts": []
        }  # fmt: skip

        async def all_resolved() -> bool:
            shown = await durability_cli(
                dev_server_address, "--json", "ledger", "snapshot", ledger_id
            )
            ops = snapshot_operations(shown.stdout)
            return [(op["id"], op["phase"]) for op in ops] == [
                ("op-1", "resolved"),
                ("op-2", "resolved"),
            ]

        await eventually(all_resolved, timeout=30)
        table = await durability_cli(dev_server_address, "ledger", "snapshot", ledger_id)
        assert "op-1" in table.stdout and "resolved" in table.stdout
        assert "operations: resolved 2" in table.stdout
        # Counted once each: the file sent twice enqueued two operations.
        counters = json.loads(
            (
                await durability_cli(dev_server_address, "--json", "ledger", "snapshot", ledger_id)
            ).stdout
        )["counters"]
        assert counters == {
            "operations_enqueued": 2,
            "operations_resolved": {"applied": 2},
            "request_attempts": {"applied": 2},
            "requests_blocked": {},
            "completion_refusals": {},
        }
        assert re.search(r"^operations_enqueued\s+2$", table.stdout, re.MULTILINE), table.stdout
        assert re.search(r"^operations_resolved\.applied\s+2$", table.stdout, re.MULTILINE)
        page = await durability_cli(
            dev_server_address, "--json", "ledger", "snapshot", ledger_id, "--limit", "1"
        )
        first = json.loads(page.stdout)
        assert [op["id"] for op in snapshot_operations(page.stdout)] == ["op-1"]
        assert first["counts"]["operations"] == {"resolved": 2}
        page = await durability_cli(
            dev_server_address, "--json", "ledger", "snapshot", ledger_id,
            "--after", str(first["next_after"]),
        )  # fmt: skip
        second = json.loads(page.stdout)
        assert [op["id"] for op in snapshot_operations(page.stdout)] == ["op-2"]
        assert second["next_after"] is None
        claims = await durability_cli(dev_server_address, "--json", "ledger", "claims", ledger_id)
        assert json.loads(claims.stdout) == {}

        # hold: the ledger is held by the token printed; release: it is not any more.
        held = await durability_cli(dev_server_address, "--json", "ledger", "hold", ledger_id)
        token = json.loads(held.stdout)["token"]
        assert ((await snapshot())["held"], (await snapshot())["holds"]) == (True, 1)
        # settle: held and nothing in progress, it answers at once with the counts.
        settled = await durability_cli(dev_server_address, "ledger", "settle", ledger_id)
        assert settled.stdout.strip() == (
            "settled: no attempt in progress (held); 0 requests waiting for their retry; "
            "operations: resolved 2"
        )
        as_json = await durability_cli(dev_server_address, "--json", "ledger", "settle", ledger_id)
        assert json.loads(as_json.stdout)["counts"]["operations"] == {"resolved": 2}
        await durability_cli(dev_server_address, "ledger", "release", ledger_id, token)
        assert ((await snapshot())["held"], (await snapshot())["holds"]) == (False, 0)
        twice = await durability_cli(
            dev_server_address, "ledger", "release", ledger_id, token, check=False
        )
        assert twice.returncode == 1 and f"token {token!r} is not held" in twice.stderr

        # resume: an operation blocked by its compile error is compiled again, and resolves.
        await durability_cli(
            dev_server_address, *cli, "ledger", "enqueue", ledger_id, "--file", str(flaky)
        )

        async def flaky_in(phase: str) -> dict[str, Any] | None:
            ops = {op["id"]: op for op in (await snapshot())["operations"]}
            return ops["flaky"] if ops["flaky"]["phase"] == phase else None

        blocked = await eventually(lambda: flaky_in("blocked"), timeout=30)
        assert blocked["blockers"] == ["layer 7 is not there yet"]
        resumed = await durability_cli(dev_server_address, "--json", "ledger", "resume", ledger_id)
        assert json.loads(resumed.stdout) == {"resumed": ["flaky"]}
        done = await eventually(lambda: flaky_in("resolved"), timeout=30)
        assert (done["outcome"], done["blockers"]) == ("applied", [])
        assert compiled.count("flaky") == 2

        stopped = await durability_cli(dev_server_address, "--json", "ledger", "stop", ledger_id)
        final = json.loads(stopped.stdout)
        assert final["stopped"] is True and final["claims"] == {}
        assert [(op["id"], op["phase"]) for op in snapshot_operations(stopped.stdout)] == [
            ("op-1", "resolved"),
            ("op-2", "resolved"),
            ("flaky", "resolved"),
        ]
        assert sorted(r["operation_ids"][0] for r in final["requests"]) == ["flaky", "op-1", "op-2"]
        assert {r["phase"] for r in final["requests"]} == {"resolved"}
        result = await ledger.result()
        assert result == final


async def test_ledger_skip_frees_a_blocked_operations_dependent_and_rejects_unknown_ones(
    client: Client, dev_server_address: str, task_queue: str, unique: str, tmp_path: Path
) -> None:
    ledger_id = f"cli-skip-{unique}"
    cli = ("--task-queue", task_queue, "--json")
    operations = tmp_path / "ops.json"
    # An unsupported protocol version: frozen, never sent, blocked (interpreter unavailable).
    operations.write_text(
        json.dumps(
            [
                {"id": "orphan", "operation_type": "shape.create", "participants": ["c8"],
                 "protocol_version": 2},
                {"id": "child", "operation_type": "shape.move", "participants": ["c1"],
                 "dependencies": ["orphan"]},
                {"id": "orphan-2", "operation_type": "shape.create", "participants": ["c9"],
                 "protocol_version": 2},
                {"id": "child-2", "operation_type": "shape.move", "participants": ["c2"],
                 "dependencies": ["orphan-2"]},
            ]
        )
    )  # fmt: skip

    async def ops() -> dict[str, dict[str, Any]]:
        shown = await durability_cli(dev_server_address, *cli, "ledger", "snapshot", ledger_id)
        return {op["id"]: op for op in snapshot_operations(shown.stdout)}

    async def once_resolved(op_id: str) -> dict[str, dict[str, Any]]:
        """The operations, once `op_id` is resolved."""

        async def resolved() -> dict[str, dict[str, Any]] | None:
            current = await ops()
            return current if current[op_id]["phase"] == "resolved" else None

        current: dict[str, dict[str, Any]] = await eventually(resolved, timeout=30)
        return current

    async with running_worker(client, task_queue):
        await durability_cli(
            dev_server_address, *cli, "ledger", "enqueue", ledger_id, "--file", str(operations)
        )

        async def blocked() -> bool:
            current = await ops()
            return all(current[op]["phase"] == "blocked" for op in ("orphan", "orphan-2"))

        await eventually(blocked, timeout=30)
        assert (await ops())["child"]["phase"] == "pending"

        ghost = await durability_cli(
            dev_server_address, *cli, "ledger", "skip", ledger_id, "ghost", check=False
        )
        assert ghost.returncode == 1
        assert f"skip rejected by ledger:{ledger_id}" in ghost.stderr
        assert "operation_id 'ghost' is not known" in ghost.stderr

        skipped = await durability_cli(
            dev_server_address, *cli, "ledger", "skip", ledger_id, "orphan",
            "--reason", "no canvas",
        )  # fmt: skip
        assert json.loads(skipped.stdout) == {"skipped": "orphan"}

        current = await once_resolved("child")
        assert (current["orphan"]["outcome"], current["orphan"]["error"]) == (
            "skipped",
            "no canvas",
        )
        assert current["child"]["outcome"] == "applied"
        assert current["child-2"]["phase"] == "pending"  # its blocker was not skipped

        again = await durability_cli(
            dev_server_address, "ledger", "skip", ledger_id, "orphan", check=False
        )
        assert again.returncode == 1 and "'orphan' is already resolved" in again.stderr

        # The typed client's signal variant: fire and forget, same effect.
        await DurabilityClient(client, task_queue).signal_skip(ledger_id, "orphan-2")

        current = await once_resolved("child-2")
        assert (current["orphan-2"]["outcome"], current["orphan-2"]["error"]) == (
            "skipped",
            "skipped",
        )
    await client.get_workflow_handle(f"ledger:{ledger_id}").terminate("test done")


async def test_ledger_skip_bad_input_exits_two_and_unknown_ledger_exits_one(
    dev_server_address: str, unique: str
) -> None:
    empty = await durability_cli(dev_server_address, "ledger", "skip", "x", " ", check=False)
    assert empty.returncode == 2 and "operation_id must not be empty" in empty.stderr
    missing = await durability_cli(
        dev_server_address, "ledger", "skip", f"nobody-{unique}", "op-1", check=False
    )
    assert missing.returncode == 1 and f"no such ledger nobody-{unique}" in missing.stderr


async def test_signal_variants_set_cancel_and_enqueue_by_signal_with_start(
    client: Client, dev_server_address: str, task_queue: str, unique: str, tmp_path: Path
) -> None:
    object_id, ledger_id = f"cli-sig-{unique}", f"cli-sig-{unique}"
    cli = ("--task-queue", task_queue, "--json")
    operations = tmp_path / "ops.json"
    operations.write_text(json.dumps([{"id": "op-1", "operation_type": "run.cancel"}]))
    async with running_worker(client, task_queue):
        sent = await durability_cli(
            dev_server_address, *cli, "schedule", "set", object_id, "@every 1h", "--version", "4",
            "--signal",
        )  # fmt: skip
        assert json.loads(sent.stdout) == {"signalled": True}

        async def version() -> int | None:
            got = await durability_cli(dev_server_address, *cli, "schedule", "get", object_id)
            view = json.loads(got.stdout)
            return None if view is None else int(view["version"])

        assert await eventually(version) == 4
        await durability_cli(dev_server_address, *cli, "schedule", "cancel", object_id, "--signal")

        async def cancelled() -> bool:
            return await version() is None

        await eventually(cancelled)

        enqueued = await durability_cli(
            dev_server_address, *cli, "ledger", "enqueue", ledger_id, "--file", str(operations),
            "--signal",
        )  # fmt: skip
        assert json.loads(enqueued.stdout) == {"signalled": True}

        async def resolved() -> bool:
            shown = await durability_cli(dev_server_address, *cli, "ledger", "snapshot", ledger_id)
            ops = snapshot_operations(shown.stdout)
            return [(op["id"], op["phase"]) for op in ops] == [("op-1", "resolved")]

        await eventually(resolved, timeout=30)
    for workflow_id in (f"schedule:{object_id}", f"ledger:{ledger_id}"):
        await client.get_workflow_handle(workflow_id).terminate("test done")


async def test_codec_server_command_decodes_for_the_ui(dev_server_address: str) -> None:
    """`durability codec-server` as a subprocess: refuses without a key, decodes with one."""
    missing = await durability_cli(dev_server_address, "codec-server", "--port", "0", check=False)
    assert missing.returncode == 2 and "DURABILITY_ENCRYPTION_KEY is not set" in missing.stderr

    key = os.urandom(32)
    token = base64.urlsafe_b64encode(os.urandom(24)).decode()
    env = subprocess_env(
        dev_server_address,
        DURABILITY_ENCRYPTION_KEY=base64.b64encode(key).decode(),
        DURABILITY_CODEC_TOKEN=token,
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "durability.cli", "codec-server", "--port", "0",
        env=env, stdout=asyncio.subprocess.PIPE, cwd=PROJECT_ROOT,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 20)).decode()
        url = line.strip().rsplit(" ", 1)[-1]
        encoded = await EncryptionCodec(key).encode(
            [Payload(metadata={"encoding": b"json/plain"}, data=b'"hello"')]
        )
        body = json.dumps(
            {"payloads": [{"metadata": {k: base64.b64encode(v).decode() for k, v in
                                        encoded[0].metadata.items()},
                           "data": base64.b64encode(encoded[0].data).decode()}]}
        ).encode()  # fmt: skip
        request = urllib.request.Request(
            f"{url}/decode", data=body, method="POST", headers={"Authorization": f"Bearer {token}"}
        )
        answer = await asyncio.to_thread(lambda: json.loads(urllib.request.urlopen(request).read()))
        assert base64.b64decode(answer["payloads"][0]["data"]) == b'"hello"'
    finally:
        process.terminate()
        await process.wait()
