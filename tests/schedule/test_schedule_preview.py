"""`durability schedule preview`, `set --dry-run` and `configure --dry-run`, and the rules of a
new `set`, through the real CLI (subprocesses against the dev server): times computed by the
code the schedule runs, nothing created or sent."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client

from durability.client import preview_schedule
from tests.support.cron_model import model_next
from tests.support.helpers import assert_no_workflow, durability_cli, one_line_error, running_worker


def iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds")


def model_times(expression: str, after_ms: int, count: int) -> list[int]:
    times: list[int] = []
    while len(times) < count:
        following = model_next(expression, after_ms)
        assert following is not None
        times.append(following)
        after_ms = following
    return times


def model_times_under(
    expression: str, after_ms: int, count: int, policy: tuple[str, str]
) -> list[int]:
    times: list[int] = []
    while len(times) < count:
        following = model_next(expression, after_ms, policy)
        assert following is not None
        times.append(following)
        after_ms = following
    return times


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


async def test_preview_prints_the_times_crontab_reads_and_creates_nothing(
    client: Client, dev_server_address: str, unique: str
) -> None:
    cases = [
        ("0 9-9 * * *", "2026-03-01T00:00"),
        ("CRON_TZ=Australia/Lord_Howe 15 2 * * *", "2026-10-03T00:00"),  # a 30-minute gap
        ("CRON_TZ=America/New_York 30 1 * * *", "2026-10-31T12:00"),  # a repeated hour
        ("0 0 * jan-jan/3 7", "2026-01-01T00:00"),
    ]
    for expression, after in cases:
        result = await durability_cli(
            dev_server_address, "schedule", "preview", expression, "--after", after, "--count", "4"
        )
        expected = model_times(expression, ms(after), 4)
        assert result.stdout.split() == [iso(at) for at in expected], expression
        assert preview_schedule(expression, after_ms=ms(after), count=4) == expected
    jittered = await durability_cli(
        dev_server_address, "schedule", "preview", "@every 1h", "--after", "2026-03-01T00:30",
        "--count", "2", "--jitter-ms", "1500", "--json",
    )  # fmt: skip
    for policy in (("skip", "first"), ("shift", "last"), ("shift", "both")):
        expression = "CRON_TZ=Australia/Lord_Howe 15,45 1-2 * * *"
        after = "2026-04-04T12:00"  # the 5th, 02:00 +11 falls back to 01:30 +10:30
        shown = await durability_cli(
            dev_server_address, "schedule", "preview", expression, "--after", after,
            "--count", "6", "--json", "--dst-policy",
            json.dumps({"nonexistent": policy[0], "ambiguous": policy[1]}),
        )  # fmt: skip
        assert json.loads(shown.stdout) == model_times_under(expression, ms(after), 6, policy)
    refused = await durability_cli(
        dev_server_address, "schedule", "preview", "@daily", "--dst-policy",
        '{"ambiguous": "all"}', check=False,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "dst_policy.ambiguous" in one_line_error(refused.stderr)
    hours = [ms("2026-03-01T01:00"), ms("2026-03-01T02:00")]
    assert json.loads(jittered.stdout) == [at + 1500 for at in hours]


async def test_a_set_that_cannot_be_meant_is_refused_by_preview_and_set_naming_the_field(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    object_id = f"unmeant-{unique}"
    cases: list[tuple[tuple[str, ...], str]] = [
        (("@every 1ms",), "invalid set payload: expression: fires more often than every 1000"),
        (("0 0 30 2 *",), "expression: never fires after now (got '0 0 30 2 *')"),
        (("*/10 * * * * *", "--jitter-ms", "3000000"), "jitter_ms: must be less than"),
        (("@every 10s", "--jitter-max-ms", "10000"), "interval of 10000 ms (got 10000)"),
        (("0 0 L * *",), "day-of-month field: 'L' is not a number"),
        (("0 0 * * 5#2",), "day-of-week field: '5#2' is not supported"),
    ]
    for args, named in cases:
        for signal in ((), ("--signal",)):
            result = await durability_cli(
                dev_server_address, "--task-queue", task_queue, "schedule", "set", object_id,
                *args, "--version", "1", *signal, check=False,
            )  # fmt: skip
            line = one_line_error(result.stderr)
            assert result.returncode == 1 and named in line, (args, line)
        expression, *options = args
        if not options:
            result = await durability_cli(
                dev_server_address, "schedule", "preview", expression, check=False
            )
            assert result.returncode == 2 and named in one_line_error(result.stderr)
    await assert_no_workflow(client, f"schedule:{object_id}")


async def test_dry_runs_print_before_and_after_and_send_nothing(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    object_id = f"dry-{unique}"
    queue = ("--task-queue", task_queue)
    async with running_worker(client, task_queue):
        await durability_cli(
            dev_server_address, *queue, "schedule", "set", object_id, "@daily", "--version", "1"
        )
        handle = client.get_workflow_handle(f"schedule:{object_id}")
        events_before = len((await handle.fetch_history()).events)
        stored: dict[str, Any] = await handle.query("get")

        shown = await durability_cli(
            dev_server_address, *queue, "schedule", "set", object_id, "0 9-9 * * *",
            "--version", "2", "--params", '{"a": 1}', "--dry-run", "--count", "3", "--json",
        )  # fmt: skip
        answer = json.loads(shown.stdout)
        assert answer["applied"] is True
        assert answer["before"] == model_times("@daily", stored["next_at"] - 1, 3)
        assert answer["after"] == model_times("0 9-9 * * *", answer["after"][0] - 1, 3)
        assert answer["after"][0] - answer["before"][0] < 86_400_000
        assert answer["changes"] == {
            "version": [1, 2],
            "expression": ["@daily", "0 9-9 * * *"],
            "params": [{}, {"a": 1}],
        }
        table = await durability_cli(
            dev_server_address, *queue, "schedule", "set", object_id, "0 9-9 * * *",
            "--version", "2", "--dry-run", "--count", "2",
        )  # fmt: skip
        assert "next before" in table.stdout and "dry run: nothing was sent" in table.stdout
        assert iso(answer["after"][0]) in table.stdout
        refused = await durability_cli(
            dev_server_address, *queue, "schedule", "set", object_id, "0 0 30 2 *",
            "--version", "2", "--dry-run", check=False,
        )  # fmt: skip
        assert refused.returncode == 1 and "never fires" in one_line_error(refused.stderr)

        end_at = answer["before"][1] + 1
        configured = await durability_cli(
            dev_server_address, *queue, "schedule", "configure", object_id, "--set",
            json.dumps({"end_at": end_at, "max_concurrent_runs": 3}), "--dry-run", "--json",
        )  # fmt: skip
        changed = json.loads(configured.stdout)
        assert changed["before"][:2] == answer["before"][:2]
        assert changed["after"] == answer["before"][:2]  # the end cuts the rest
        assert changed["changes"]["max_concurrent_runs"] == [10, 3]
        assert changed["changes"]["end_at"] == [None, end_at]

        assert await handle.query("get") == stored
        assert len((await handle.fetch_history()).events) == events_before


async def test_a_dst_policy_is_a_start_and_configure_field_shown_by_settings_and_describe(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    """Lord Howe's clock moves 30 minutes: 2027-10-03 02:00-02:30 does not exist, 2027-04-04
    01:30-02:00 happens twice."""
    gap = "CRON_TZ=Australia/Lord_Howe 15 2 3 oct *"
    repeat = "CRON_TZ=Australia/Lord_Howe 45 1 4 apr *"
    object_id = f"dst-{unique}"
    queue = ("--task-queue", task_queue)
    skip = {"nonexistent": "skip", "ambiguous": "first"}
    async with running_worker(client, task_queue):
        await durability_cli(
            dev_server_address, *queue, "schedule", "set", object_id, gap, "--version", "1",
            "--options", json.dumps({"dst_policy": {"nonexistent": "skip"}}),
        )  # fmt: skip
        settings = await durability_cli(
            dev_server_address, *queue, "schedule", "settings", object_id, "--json"
        )
        assert json.loads(settings.stdout)["dst_policy"] == skip
        described = json.loads(
            (
                await durability_cli(
                    dev_server_address, *queue, "schedule", "describe", object_id, "--json"
                )
            ).stdout
        )
        assert described["dst_policy"] == skip
        now = int(datetime.now(UTC).timestamp() * 1000)
        # Skipped in 2027 (in the gap): the next is 2028's; shifted, 2027's at 02:30.
        assert described["next_fire_times"][0] == model_next(gap, now, ("skip", "first"))
        assert model_next(gap, now, ("skip", "first")) != model_next(gap, now)

        both = {"dst_policy": {"ambiguous": "both"}}
        await durability_cli(
            dev_server_address, *queue, "schedule", "set", object_id, repeat, "--version", "2"
        )
        dry = await durability_cli(
            dev_server_address, *queue, "schedule", "configure", object_id, "--set",
            json.dumps(both), "--dry-run", "--json", "--count", "2",
        )  # fmt: skip
        preview = json.loads(dry.stdout)
        assert preview["changes"]["dst_policy"] == [
            skip,
            {"nonexistent": "shift", **both["dst_policy"]},
        ]
        await durability_cli(
            dev_server_address,
            *queue,
            "schedule",
            "configure",
            object_id,
            "--set",
            json.dumps(both),
        )
        shown = await durability_cli(
            dev_server_address, *queue, "schedule", "describe", object_id, "--json", "--next", "2"
        )
        described = json.loads(shown.stdout)
        start = described["next_fire_times"][0] - 1
        first = model_next(repeat, start, ("shift", "both"))
        assert first is not None
        second = model_next(repeat, first, ("shift", "both"))
        assert described["next_fire_times"] == [first, second] == preview["after"]
        assert second == first + 1_800_000  # both copies, 30 minutes apart

        for refused, named in [
            ({"dst_policy": {"nonexistent": "later"}}, "dst_policy.nonexistent"),
            ({"dst_policy": {"ambiguous": "all"}}, "dst_policy.ambiguous"),
            ({"dst_policy": {"fold": "first"}}, "dst_policy.fold"),
        ]:
            result = await durability_cli(
                dev_server_address, *queue, "schedule", "configure", object_id, "--set",
                json.dumps(refused), check=False,
            )  # fmt: skip
            line = one_line_error(result.stderr)
            assert result.returncode == 1 and named in line, line
