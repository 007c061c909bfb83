"""With encryption on, no user data where the Temporal server keeps it or shows it without the
codec.

A real dev server on a database file (`--db-filename`), a worker and client with a key ring, a
marker in every user-supplied field: a schedule's params and webhook URLs, the far side's
answers (which the run's error, the dead letter and the pause note then carry), a pause note,
a ledger operation's payload, its far side's status, its completion's blocker and a skip's
reason. Then the
`temporal` CLI's `workflow list/describe/show` (no codec) and the database file are searched
for every marker: none may be found. Each search is checked to work on what is meant to stay
plain (the object and ledger IDs).
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from durability.codec import EncryptionCodec
from durability.codec_server import CodecServerSettings, start
from durability.connect import connect
from durability.registry import workflow_runner
from harness.http import QuietHandler
from harness.server import DevServer
from tests.support.helpers import cache_options, eventually, http_server, temporal
from tests.support.ledger import (
    COMPLETE,
    Answer,
    http_input,
    intent,
    operations,
    recording_server,
    snapshot,
    start_ledger,
)

pytestmark = pytest.mark.slow

FIELDS = (
    "params",
    "url",
    "answer",
    "note",
    "payload",
    "status",
    "ledger_answer",
    "blocker",
    "reason",
)


def markers() -> dict[str, str]:
    """A marker per field, unlike anything else the test writes (IDs included)."""
    run = uuid.uuid4().hex[:10]
    return {field: f"MRK{field.replace('_', '')}{run}" for field in FIELDS}


class Webhooks:
    """The far side of the schedule's webhooks: every POST answers 500 with an error that
    echoes user data (`answer` marker), as real services do."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.posts: dict[str, int] = {}

    def handler(self) -> type[BaseHTTPRequestHandler]:
        state = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                self.request_body()
                kind = self.path.split("/")[1]
                state.posts[kind] = state.posts.get(kind, 0) + 1
                self.answer(500, {"error": f"unknown account {state.answer}"})

        return Handler


def ledger_far_side(mark: dict[str, str]) -> Any:
    """Accept each submit; answer each query applied with a status holding the `status`
    marker; fail the first completion with an answer holding `ledger_answer`, then block it
    with the `blocker` marker."""

    def answer(method: str, _request_id: str, count: int) -> Answer:
        if method == "POST":
            return 202, {}, {"outcome": "accepted"}
        if method == "GET":
            return 200, {}, {"outcome": "applied", "receipt": mark["status"]}
        assert method == COMPLETE
        if count == 1:
            return 500, {}, {"error": f"no receipt {mark['ledger_answer']}"}
        return 200, {}, {"blocked": True, "error": f"receipt mismatch {mark['blocker']}"}

    return answer


async def exercise_every_field(
    client: Client, mark: dict[str, str], webhooks: Webhooks, far: str, names: dict[str, str]
) -> None:
    """A schedule whose run and outcome webhooks fail (pausing it, dead-lettering the
    outcome), then paused with a note; a ledger whose operation ends blocked."""
    schedule = await client.start_workflow(
        "DurabilitySchedule",
        {
            "run_activity": "run_webhook",
            "outcome_activity": "on_outcome_webhook",
            "outcome_retries": {"max_attempts": 2, "initial_interval_ms": 100},
            "pause_on_failure": True,
        },
        id=f"schedule:{names['object']}",
        task_queue=names["queue"],
    )
    await schedule.execute_update(
        "set",
        {
            "expression": "@every 1s",
            "version": 1,
            "params": {
                "url": f"{far}/hooks/{mark['url']}",
                "outcome_url": f"{far}/outcome/{mark['url']}",
                "account": mark["params"],
            },
        },
    )
    ledger = await start_ledger(
        client, names["ledger"], names["queue"], http_input(complete_activity="http_complete")
    )
    await ledger.execute_update(
        "enqueue", {"operations": [intent("a", ["c1"], payload={"account": mark["payload"]})]}
    )

    async def schedule_settled() -> bool:
        dead: list[Any] = await schedule.query("dead_letters")
        return bool(dead) and bool(await schedule.query("paused"))

    await eventually(schedule_settled, timeout=60)
    assert mark["answer"] in (await schedule.query("pause_note") or "")
    await schedule.execute_update("pause", {"note": f"on hold: {mark['note']}"})

    async def ledger_blocked() -> bool:
        return bool(operations(await snapshot(ledger))["a"]["phase"] == "blocked")

    await eventually(ledger_blocked, timeout=60)
    await ledger.execute_update("enqueue", {"operations": [intent("b", ["c2"], ["a"])]})
    skip = {"operation_id": "b", "reason": f"not needed {mark['reason']}"}
    assert await ledger.execute_update("skip", skip) is True
    assert webhooks.posts.get("hooks", 0) >= 1 and webhooks.posts.get("outcome", 0) >= 2


def decoded_texts(outputs: str) -> tuple[str, str]:
    """From `temporal workflow ...` JSON outputs: (every payload's data, every failure's
    encoded attributes), base64-decoded as the codec left them."""
    payloads: list[str] = []
    failures: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("data"), str) and isinstance(node.get("metadata"), dict):
                payloads.append(base64.b64decode(node["data"]).decode(errors="replace"))
            encoded = node.get("encodedAttributes")
            if isinstance(encoded, dict) and isinstance(encoded.get("data"), str):
                failures.append(base64.b64decode(encoded["data"]).decode(errors="replace"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for document in outputs.split(DOCUMENT_SEPARATOR):
        if document.strip():
            walk(json.loads(document))
    return "\n".join(payloads), "\n".join(failures)


DOCUMENT_SEPARATOR = "\n\x1e\n"


async def cli_output(address: str, *codec: str) -> str:
    """Everything `temporal workflow list/describe/show` print (JSON) for every workflow, with
    the `codec` options (none: without the codec)."""
    listed = await temporal(address, "workflow", "list", "--output", "json", *codec)
    shown = [listed.stdout]
    for execution in json.loads(listed.stdout or "[]"):
        workflow_id = execution["execution"]["workflowId"]
        run_id = execution["execution"]["runId"]
        for command in ("describe", "show"):
            result = await temporal(
                address, "workflow", command, "--workflow-id", workflow_id,
                "--run-id", run_id, "--output", "json", *codec,
            )  # fmt: skip
            shown.append(result.stdout)
    return DOCUMENT_SEPARATOR.join(shown)


async def decoded_cli_output(address: str, key: str) -> str:
    """`cli_output` through a codec server holding `key`."""
    token = uuid.uuid4().hex
    codec = EncryptionCodec(base64.b64decode(key), "primary")
    codec_server = await start(codec, CodecServerSettings.build(token), port=0)
    try:
        return await cli_output(
            address, "--codec-endpoint", codec_server.url, "--codec-auth", f"Bearer {token}"
        )
    finally:
        await codec_server.close()


def database_text(server: DevServer) -> bytes:
    """The dev server's database file and its journal files, as bytes."""
    files = sorted(server.directory.glob(f"{server.db.name}*"))
    assert files, f"no database file at {server.db}"
    return b"".join(path.read_bytes() for path in files)


def found(text: bytes | str, mark: dict[str, str]) -> list[str]:
    data = text.encode() if isinstance(text, str) else text
    return [field for field, marker in mark.items() if marker.encode() in data]


async def test_no_user_data_in_the_server_database_or_the_cli_without_the_codec(
    tmp_path: Path,
) -> None:
    mark = markers()
    names = {
        "object": f"rest-object-{uuid.uuid4().hex[:8]}",
        "ledger": f"rest-ledger-{uuid.uuid4().hex[:8]}",
        "queue": f"tq-{uuid.uuid4().hex[:12]}",
    }
    key = base64.b64encode(os.urandom(32)).decode()
    server = DevServer(tmp_path, "at-rest")
    await server.start()
    webhooks = Webhooks(mark["answer"])
    try:
        with (
            http_server(webhooks.handler()) as far,
            recording_server(ledger_far_side(mark)) as ledger_side,
        ):
            env = {
                "TEMPORAL_ADDRESS": server.address,
                "TEMPORAL_NAMESPACE": "default",
                "DURABILITY_ENCRYPTION_KEYS": f"primary:{key}",
                "DURABILITY_WEBHOOK_ALLOWED_URLS": f"{far}/",
                "DURABILITY_LEDGER_URL": ledger_side.base_url,
            }
            client = await connect(env)
            async with Worker(
                client,
                task_queue=names["queue"],
                workflow_runner=workflow_runner(),
                **cache_options(),
            ):
                await exercise_every_field(client, mark, webhooks, far, names)
        shown = await cli_output(server.address)
        decoded = await decoded_cli_output(server.address, key)
    finally:
        await server.close()
    stored = database_text(server)
    # The searches work: what stays plain is found in both.
    for plain in (names["object"], names["ledger"]):
        assert plain in shown and plain.encode() in stored
    # Without the codec: the printed text, and every payload the CLI prints in base64 (a plain
    # JSON payload nested in an event would hide there).
    shown_all = "\n".join((shown, *decoded_texts(shown)))
    leaks = {"temporal CLI without codec": found(shown_all, mark), "database": found(stored, mark)}
    assert leaks == {"temporal CLI without codec": [], "database": []}
    # Through the codec server, failures decode: the webhook's URL and answer are read back
    # from their encoded attributes; and every marker is there to be found (the completion's
    # first answer only while its attempt was retried): the searches look where the data is.
    payload_text, failure_text = decoded_texts(decoded)
    assert {"url", "answer"} <= set(found(failure_text, mark))
    assert set(FIELDS) - {"ledger_answer"} <= set(
        found(decoded + payload_text + failure_text, mark)
    )
