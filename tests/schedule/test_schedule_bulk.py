"""Bulk `pause`, `unpause` and `cancel`: one signal to every running schedule a visibility
query matches, sent by a Temporal batch job, through the `durability` CLI against the dev
server (and the `temporal` CLI to see the job and the schedules)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.api.workflowservice.v1 import ListBatchOperationsRequest
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from durability import cli
from durability.client import (
    MAX_BULK_QUERY_CHARS,
    MAX_BULK_REASON_CHARS,
    BatchBusyError,
    BulkJob,
    DurabilityClient,
    InvalidQueryError,
    ScheduleMatches,
    schedule_query,
)
from harness.replay import production_replayer
from tests.support.cold_worker import assert_healthy
from tests.support.helpers import (
    durability_cli,
    eventually,
    record_history,
    replay_each,
    schedule_worker,
    temporal,
)
from workflows import search_attributes
from workflows.schedule.models import MAX_PAUSE_NOTE_LENGTH
from workflows.schedule.run import ScheduledRunWorkflow
from workflows.schedule.workflow import DurabilityScheduleWorkflow

pytestmark = pytest.mark.cacheless

YEARLY = "0 0 1 1 *"
LONG_QUERY = "DurabilityObjectId = 'a)'" + " " * MAX_BULK_QUERY_CHARS


async def _fleet(client: Client, task_queue: str, unique: str) -> tuple[list[str], str, str]:
    """Three schedules `bulk-<unique>-a-<i>` and one `bulk-<unique>-b-0`, each live (yearly),
    once visibility lists all four; returns the a-IDs, the b-ID and a query matching the a's."""
    durability = DurabilityClient(client, task_queue)
    group_a = [f"bulk-{unique}-a-{i}" for i in range(3)]
    other = f"bulk-{unique}-b-0"
    for object_id in [*group_a, other]:
        assert await durability.set_schedule(object_id, YEARLY, 1)
    query = f"DurabilityObjectId STARTS_WITH 'bulk-{unique}-a-'"
    # Not a schedule, though the query matches it: never counted, never signalled.
    await client.start_workflow(
        "NotASchedule",
        id=f"not-a-schedule-{unique}",
        task_queue=f"{task_queue}-nobody",
        search_attributes=TypedSearchAttributes(
            [SearchAttributePair(search_attributes.OBJECT_ID, f"bulk-{unique}-a-9")]
        ),
    )

    async def all_listed() -> bool:
        every = await durability.match_schedules(f"DurabilityObjectId STARTS_WITH 'bulk-{unique}'")
        return every.count == 4

    await eventually(all_listed, timeout=30)
    return group_a, other, query


async def _paused(client: Client, object_id: str) -> bool:
    return bool(await client.get_workflow_handle(f"schedule:{object_id}").query("paused"))


async def _pause_note(client: Client, object_id: str) -> str | None:
    note: str | None = await client.get_workflow_handle(f"schedule:{object_id}").query("pause_note")
    return note


async def _live(client: Client, object_id: str) -> bool:
    return await client.get_workflow_handle(f"schedule:{object_id}").query("get") is not None


async def _batch_jobs(client: Client) -> int:
    listed = await client.workflow_service.list_batch_operations(
        ListBatchOperationsRequest(namespace=client.namespace, page_size=1000)
    )
    return len(listed.operation_info)


async def test_pause_unpause_cancel_by_query_reach_exactly_the_matching_schedules(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    cli_args = (dev_server_address, "--task-queue", task_queue, "--json", "schedule")
    async with schedule_worker(client, task_queue):
        group_a, other, query = await _fleet(client, task_queue, unique)
        everyone = [*group_a, other]

        # The dry run counts and lists, and sends nothing.
        jobs_before = await _batch_jobs(client)
        dry = await durability_cli(*cli_args, "pause", "--query", query, "--dry-run")
        counted = json.loads(dry.stdout)
        assert counted["matched"] == 3 and sorted(counted["object_ids"]) == group_a, counted
        assert counted["job_id"] is None and "job" not in counted, counted
        assert counted["query"] == schedule_query(query)
        table = await durability_cli(
            dev_server_address, "schedule", "pause", "--query", query, "--dry-run"
        )
        assert "3 running schedule(s)" in table.stdout, table.stdout
        assert "nothing sent (dry run)" in table.stdout, table.stdout

        # Without --yes: the count, then a refusal; nothing sent.
        refused = await durability_cli(*cli_args, "pause", "--query", query, check=False)
        assert refused.returncode == 1, refused
        assert json.loads(refused.stdout)["matched"] == 3, refused.stdout
        assert "nothing sent: add --yes to pause the 3 schedule(s)" in refused.stderr
        assert "Traceback" not in refused.stderr
        assert await _batch_jobs(client) == jobs_before
        assert [await _paused(client, o) for o in everyone] == [False] * 4

        # With --yes: one batch job, waited for; exactly the matching schedules pause.
        reason = f"maintenance window {unique}"
        note = f"billing API down ({unique})"
        paused = await durability_cli(
            *cli_args, "pause", "--query", query, "--yes", "--reason", reason, "--note", note
        )
        done = json.loads(paused.stdout)
        job_id = done["job_id"]
        assert done["job"] == {
            "state": "completed", "matched": 3, "completed": 3, "failed": 0, "reason": reason,
        }, done  # fmt: skip

        async def only_a_paused() -> bool:
            return [await _paused(client, o) for o in everyone] == [True, True, True, False]

        await eventually(only_a_paused, timeout=20)
        notes = [await _pause_note(client, o) for o in everyone]
        assert notes == [note, note, note, None], notes
        described = await temporal(
            dev_server_address, "batch", "describe", "--job-id", job_id, "--output", "json"
        )
        job = json.loads(described.stdout)
        assert job["reason"] == reason and "COMPLETED" in json.dumps(job).upper(), job
        answered = await temporal(
            dev_server_address,
            "workflow", "query", "--workflow-id", f"schedule:{group_a[0]}", "--type", "paused",
        )  # fmt: skip
        assert "true" in answered.stdout, answered.stdout

        # The default reason names the command and the user; unpause by query.
        unpaused = json.loads(
            (await durability_cli(*cli_args, "unpause", "--query", query, "--yes")).stdout
        )
        assert unpaused["job"]["completed"] == 3, unpaused
        assert unpaused["job"]["reason"].startswith("durability schedule unpause --query, by ")

        async def none_paused() -> bool:
            return [await _paused(client, o) for o in everyone] == [False] * 4

        await eventually(none_paused, timeout=20)
        assert [await _pause_note(client, o) for o in everyone] == [None] * 4

        # Cancel by query, a tombstone version checked before sending; --no-wait returns at
        # once with the job's ID.
        cancelled = json.loads(
            (
                await durability_cli(
                    *cli_args, "cancel", "--query", query, "--version", "5", "--yes", "--no-wait"
                )
            ).stdout
        )
        assert cancelled["job"]["state"] in ("running", "completed"), cancelled
        durability = DurabilityClient(client, task_queue)
        job_end = await durability.wait_bulk_job(cancelled["job_id"])
        assert (job_end.state, job_end.completed, job_end.failed) == ("completed", 3, 0)

        async def only_a_cancelled() -> bool:
            return [await _live(client, o) for o in everyone] == [False, False, False, True]

        await eventually(only_a_cancelled, timeout=20)
        assert await durability.stored_version(group_a[0]) in (1, 5)  # published as it lands
        # A matching query with no schedule left running sends nothing, even with --yes.
        gone = f"DurabilityObjectId = 'bulk-{unique}-none'"
        empty = await durability_cli(*cli_args, "pause", "--query", gone, "--yes")
        assert json.loads(empty.stdout) == {
            "query": schedule_query(gone), "matched": 0, "object_ids": [], "job_id": None,
        }  # fmt: skip

        for object_id in everyone:
            await assert_healthy(client, client.get_workflow_handle(f"schedule:{object_id}"))
        history = await client.get_workflow_handle(f"schedule:{group_a[0]}").fetch_history()
        record_history("schedule_parent_0_1_1_bulk_signals", history)
        replayer = production_replayer([DurabilityScheduleWorkflow, ScheduledRunWorkflow])
        await replay_each(replayer, [history], 30)
        for object_id in everyone:
            await client.get_workflow_handle(f"schedule:{object_id}").terminate("test done")

        # Closed schedules match no more.
        async def none_running() -> bool:
            return (await durability.match_schedules(query)).count == 0

        await eventually(none_running, timeout=20)
    await client.get_workflow_handle(f"not-a-schedule-{unique}").terminate("test done")


async def test_configure_by_query_changes_exactly_the_matching_schedules_settings(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    cli_args = (dev_server_address, "--task-queue", task_queue, "--json", "schedule")
    changes = '{"max_queued_runs": 7, "overlap": "skip"}'
    async with schedule_worker(client, task_queue):
        group_a, other, query = await _fleet(client, task_queue, unique)
        dry = await durability_cli(
            *cli_args, "configure", "--query", query, "--set", changes, "--dry-run"
        )
        assert json.loads(dry.stdout)["matched"] == 3, dry.stdout
        done = json.loads(
            (
                await durability_cli(
                    *cli_args, "configure", "--query", query, "--set", changes, "--yes"
                )
            ).stdout
        )
        assert (done["job"]["completed"], done["job"]["failed"]) == (3, 0), done

        async def settings_of(object_id: str) -> tuple[int, str]:
            answer = await client.get_workflow_handle(f"schedule:{object_id}").query("settings")
            return answer["max_queued_runs"], answer["overlap"]

        async def only_a_configured() -> bool:
            found = [await settings_of(o) for o in [*group_a, other]]
            return found == [(7, "skip")] * 3 + [(100, "queue")]

        await eventually(only_a_configured, timeout=20)
        for object_id in [*group_a, other]:
            handle = client.get_workflow_handle(f"schedule:{object_id}")
            assert await handle.query("dropped_signals") == 0
            await assert_healthy(client, handle)
            await handle.terminate("test done")
    await client.get_workflow_handle(f"not-a-schedule-{unique}").terminate("test done")


async def test_a_raw_callers_batch_signal_pauses_as_the_cli_does(
    client: Client, dev_server_address: str, task_queue: str, unique: str
) -> None:
    """`temporal workflow signal --query ... --name pause` (the wire, contract 2.2) reaches
    the same signal handler; the caller scopes the query itself."""
    async with schedule_worker(client, task_queue):
        group_a, other, query = await _fleet(client, task_queue, unique)
        await temporal(
            dev_server_address,
            "workflow", "signal", "--query", schedule_query(query), "--name", "pause",
            "--input", "{}", "--reason", f"raw {unique}", "--yes",
        )  # fmt: skip

        async def only_a_paused() -> bool:
            states = [await _paused(client, o) for o in [*group_a, other]]
            return states == [True, True, True, False]

        await eventually(only_a_paused, timeout=30)
        for object_id in [*group_a, other]:
            handle = client.get_workflow_handle(f"schedule:{object_id}")
            assert await handle.query("dropped_signals") == 0
            await handle.terminate("test done")
    await client.get_workflow_handle(f"not-a-schedule-{unique}").terminate("test done")


@pytest.mark.parametrize(
    ("query", "refusal"),
    [
        ("NoSuchAttribute = 1", "Temporal says: invalid query"),
        ("DurabilityObjectId ==== 'x'", "Temporal says: invalid query"),
        ("", "it must be a non-empty visibility query"),
        ("   ", "it must be a non-empty visibility query"),
        ("x = 1) OR (WorkflowType = 'OperationLedger'", "a ')' closes more than it opened"),
        ("(DurabilityObjectId = 'a'", "a '(' is not closed"),
        (
            "DurabilityObjectId = 'a' /* ( */ ) OR (WorkflowType = 'OperationLedger' /* ) */",
            "comments are not allowed",
        ),
        ("DurabilityObjectId = 'a' -- )", "comments are not allowed"),
        ("DurabilityObjectId = 'a' # )", "comments are not allowed"),
        (LONG_QUERY, f"more than {MAX_BULK_QUERY_CHARS}"),
    ],
    ids=[
        "unknown-attribute",
        "syntax",
        "empty",
        "blank",
        "escapes-scope",
        "unclosed",
        "comment-escapes-scope",
        "line-comment",
        "hash-comment",
        "long",
    ],
)
async def test_a_query_refused_names_it_and_sends_nothing(
    client: Client, dev_server_address: str, task_queue: str, query: str, refusal: str
) -> None:
    before = await _batch_jobs(client)
    for flags in (("--dry-run",), ("--yes",)):
        result = await durability_cli(
            dev_server_address, "schedule", "pause", "--query", query, *flags, check=False
        )
        assert result.returncode == 1, result  # as `list --query` refused by Temporal
        assert result.stderr.startswith(f"durability: --query {query!r:.40}"), result.stderr
        assert refusal in result.stderr and "nothing sent" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert await _batch_jobs(client) == before


def test_parentheses_and_comment_marks_inside_quotes_do_not_count() -> None:
    quoted = "DurabilityObjectId = 'a) -- #' OR DurabilityObjectId = \"(b /*\""
    assert schedule_query(quoted).endswith(f"AND ({quoted})")
    assert schedule_query(r"DurabilityObjectId = 'it\'s (x'").endswith(r"'it\'s (x')")
    with pytest.raises(InvalidQueryError, match=r"a '\)' closes more than it opened"):
        schedule_query("DurabilityObjectId = 'a') OR (true")
    with pytest.raises(InvalidQueryError, match="a ' quote is not closed"):
        schedule_query("DurabilityObjectId = 'open) OR (x")
    with pytest.raises(InvalidQueryError, match="comments are not allowed"):
        schedule_query("DurabilityObjectId = 'a' /* ) OR ( */")
    # A backslash escapes nothing in a `name`: the `)` after it is outside.
    with pytest.raises(InvalidQueryError, match=r"a '\)' closes more than it opened"):
        schedule_query(r"`a\`) OR (`b`")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["pause"], "schedule pause needs an object_id or --query"),
        (["unpause", "x", "--query", "q"], "give an object_id or --query, not both"),
        (["pause", "x", "--dry-run"], "--dry-run goes with --query, not with an object_id"),
        (["unpause", "x", "--yes"], "--yes goes with --query"),
        (["cancel", "x", "--no-wait"], "--no-wait goes with --query"),
        (["pause", "x", "--reason", "r"], "--reason goes with --query"),
        (["cancel", "--query", "q", "--signal"], "--signal goes with an object_id"),
        (["pause", "--query", "q", "--dry-run", "--yes"], "--dry-run sends nothing: --yes"),
        (["pause", "--query", "q", "--dry-run", "--no-wait"], "--dry-run sends nothing: --no-w"),
        (["configure", "x", "--query", "q", "--set", "{}"], "give an object_id or --query, not"),
        (["configure", "--query", "q", "--set", '{"overlap": "skip"}', "--signal"], "--signal go"),
        (["configure", "--query", "q = 1", "--set", "nope", "--yes"], "--set must be JSON"),
    ],
)
def test_bulk_usage_errors_name_the_option(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["schedule", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["cancel", "--query", "q = 1", "--version", "-1", "--yes"],
            "invalid cancel payload: version",
        ),
        (["pause", "--query", "q = 1", "--reason", "", "--yes"], "--reason must be a non-empty"),
        (
            ["pause", "--query", "q = 1", "--reason", "r" * (MAX_BULK_REASON_CHARS + 1), "--yes"],
            f"--reason must be at most {MAX_BULK_REASON_CHARS} characters",
        ),
        (
            ["pause", "--query", "q = 1", "--note", "n" * (MAX_PAUSE_NOTE_LENGTH + 1), "--yes"],
            f"note: String should have at most {MAX_PAUSE_NOTE_LENGTH} characters",
        ),
        (
            ["configure", "--query", "q = 1", "--set", '{"max_concurrent_runs": 0}', "--yes"],
            "invalid configure: max_concurrent_runs: Input should be greater than or equal to 1",
        ),
        (
            ["configure", "--query", "q = 1", "--set", '{"object_id": "x"}', "--yes"],
            "configure.object_id cannot change",
        ),
        (
            ["configure", "--query", "q = 1", "--set", "{}", "--yes"],
            "configure payload must be a non-empty JSON object",
        ),
        (
            ["configure", "--query", "q = 1", "--set", '{"max_queued_runs": "7"}', "--yes"],
            "invalid configure: max_queued_runs: Input should be a valid integer (got '7')",
        ),
    ],
    ids=[
        "cancel-version",
        "empty-reason",
        "long-reason",
        "long-note",
        "configure-range",
        "configure-fixed",
        "configure-empty",
        "configure-type",
    ],
)
async def test_a_bad_payload_or_reason_is_refused_before_anything_is_sent(
    client: Client, dev_server_address: str, argv: list[str], message: str
) -> None:
    before = await _batch_jobs(client)
    result = await durability_cli(dev_server_address, "schedule", *argv, check=False)
    assert result.returncode == 2, result
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert result.stdout == ""  # not even counted
    assert await _batch_jobs(client) == before
    noise = await durability_cli(
        dev_server_address, "schedule", "cancel", "--query", "q = 1", "--version", "x",
        check=False,
    )  # fmt: skip
    assert noise.returncode == 2 and "--version: invalid int value: 'x'" in noise.stderr


async def test_a_second_batch_job_while_one_runs_is_refused_clearly(
    client: Client, task_queue: str, unique: str
) -> None:
    """The dev server, like Temporal by default, runs one batch job per namespace at a time
    (`frontend.MaxConcurrentBatchOperationPerNamespace` = 1)."""
    async with schedule_worker(client, task_queue):
        group_a, other, query = await _fleet(client, task_queue, unique)
        durability = DurabilityClient(client, task_queue)
        refusal: BatchBusyError | None = None
        for _ in range(5):  # the first job may end before the second is asked for
            first = await durability.start_bulk("pause", query, reason="first")
            try:
                await durability.start_bulk("pause", query, reason="second")
            except BatchBusyError as busy:
                refusal = busy
            await durability.wait_bulk_job(first)
            if refusal is not None:
                break
        assert refusal is not None, "the second job started every time"
        assert "nothing was sent" in str(refusal), refusal
        assert "frontend.MaxConcurrentBatchOperationPerNamespace" in str(refusal), refusal
        for object_id in [*group_a, other]:
            await client.get_workflow_handle(f"schedule:{object_id}").terminate("test done")
    await client.get_workflow_handle(f"not-a-schedule-{unique}").terminate("test done")


def test_the_cli_says_another_batch_job_runs_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """How the CLI shows the refusal the test above gets from the server."""

    async def busy(args: Any) -> Any:
        raise BatchBusyError("Temporal runs no more batch jobs in namespace default now")

    monkeypatch.setattr(cli, "execute", busy)
    assert cli.main(["schedule", "pause", "--query", "q = 1", "--yes"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("durability: Temporal runs no more batch jobs"), err
    assert "Traceback" not in err


class _FakeBulkClient:
    """The bulk calls of DurabilityClient, answering as a job whose signals partly failed."""

    def __init__(self, job: BulkJob) -> None:
        self.job = job
        self.started: list[tuple[str, str, str, int | None]] = []

    async def match_schedules(self, query: str) -> ScheduleMatches:
        return ScheduleMatches(query=schedule_query(query), count=2, object_ids=["a", "b"])

    async def start_bulk(
        self,
        message: str,
        query: str,
        *,
        reason: str,
        version: int | None = None,
        changes: dict[str, Any] | None = None,
        note: str | None = None,
    ) -> str:
        assert changes is None and note is None
        self.started.append((message, query, reason, version))
        return self.job.job_id

    async def wait_bulk_job(self, job_id: str) -> BulkJob:
        return self.job

    async def bulk_job(self, job_id: str) -> BulkJob:
        return self.job


@pytest.mark.parametrize(
    ("state", "failed", "code", "says"),
    [
        ("completed", 1, 1, "1 of 2 signal(s) failed"),
        ("failed", 0, 1, "batch job job-1 failed"),
        ("running", 0, 0, "still running: temporal batch describe --job-id job-1"),
    ],
)
def test_a_job_whose_signals_did_not_all_arrive_prints_its_counts_and_exits_one(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    state: str,
    failed: int,
    code: int,
    says: str,
) -> None:
    job = BulkJob("job-1", state, 2, 2 - failed, failed, "r", "q")
    fake = _FakeBulkClient(job)

    async def execute(args: Any) -> Any:
        return await args.run(fake, args)

    monkeypatch.setattr(cli, "execute", execute)
    argv = ["schedule", "cancel", "--query", "q = 1", "--version", "4", "--yes"]
    assert cli.main([*argv, "--reason", "r"]) == code
    out, err = capsys.readouterr()
    assert f"2 matched, {2 - failed} completed, {failed} failed" in out, out
    assert says in (err if code else out), (out, err)
    assert "Traceback" not in err
    assert fake.started == [("cancel", "q = 1", "r", 4)]
