"""Histories written with encryption on before failures were encrypted still replay and decode
with today's converter (payload codec plus failure converter with encoded attributes).

`encrypted_schedule_parent_plain_failures.json` and `encrypted_schedule_run_plain_failures.json`
were recorded (`DURABILITY_RECORD_HISTORIES=1`, by the recording test below) by the version
before failure encryption, under the test-only key ring `ENV`: their payloads are encrypted
(format 2) and their failure messages are plain. A run webhook answered 500, its run failed
and paused the schedule.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.worker import Replayer, Worker

from durability.codec import EncryptedFailureConverter
from durability.connect import connect, data_converter
from durability.registry import all_workflows, workflow_runner
from harness.http import QuietHandler
from tests.support.helpers import (
    HISTORY_DIR,
    cache_options,
    eventually,
    http_server,
    recording_histories,
    replay_each,
    save_history,
)

# A key for these recorded histories only: it protects nothing else.
ENV = {"DURABILITY_ENCRYPTION_KEYS": "recorded:qn7v0Cw3X0nYkGJd2m5lC1o3S9Yq2hWJ8pTq4y1bVZc="}
NAMES = ("encrypted_schedule_parent_plain_failures", "encrypted_schedule_run_plain_failures")
FAR_SIDE_ANSWER = "unknown account 42"


def failing_webhook_handler(answer: str) -> type[BaseHTTPRequestHandler]:
    """Every POST answers 500 with `{"error": answer}`."""

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            self.request_body()
            self.answer(500, {"error": answer})

    return Handler


def load(name: str) -> WorkflowHistory:
    recorded = json.loads((HISTORY_DIR / f"{name}.json").read_text())
    return WorkflowHistory.from_json(recorded["workflow_id"], recorded["history"])


@pytest.mark.skipif(
    not recording_histories(), reason="records histories (DURABILITY_RECORD_HISTORIES=1)"
)
async def test_record_encrypted_histories_with_a_failed_run(
    dev_server_address: str, task_queue: str, unique: str
) -> None:
    with http_server(failing_webhook_handler(FAR_SIDE_ANSWER)) as far:
        env = {
            **ENV,
            "TEMPORAL_ADDRESS": dev_server_address,
            "DURABILITY_WEBHOOK_ALLOWED_URLS": f"{far}/",
        }
        client = await connect(env)
        async with Worker(
            client, task_queue=task_queue, workflow_runner=workflow_runner(), **cache_options()
        ):
            schedule = await client.start_workflow(
                "DurabilitySchedule",
                {"run_activity": "run_webhook", "pause_on_failure": True},
                id=f"schedule:recorded-{unique}",
                task_queue=task_queue,
            )
            await schedule.execute_update(
                "set",
                {"expression": "@every 1s", "version": 1, "params": {"url": f"{far}/hooks/a"}},
            )
            await eventually(lambda: schedule.query("paused"), timeout=30)
            parent = await schedule.fetch_history()
    [child_id] = {
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id
        for e in parent.events
        if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    }
    child = await client.get_workflow_handle(child_id).fetch_history()
    save_history(NAMES[0], parent)
    save_history(NAMES[1], child)


def failed_activities(history: WorkflowHistory) -> list[Any]:
    return [
        e.activity_task_failed_event_attributes.failure
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]


async def test_histories_recorded_before_failure_encryption_replay_and_decode_today() -> None:
    converter = data_converter(ENV)
    assert converter.failure_converter_class is EncryptedFailureConverter
    histories = [load(name) for name in NAMES]
    [failure] = failed_activities(histories[1])
    # As recorded: the message plain (the old format), no encoded attributes.
    assert "answered 500" in failure.message and not failure.HasField("encoded_attributes")
    decoded = await converter.decode_failure(failure)
    assert f'answered 500: {{"error": "{FAR_SIDE_ANSWER}"}}' in str(decoded)
    first = histories[0].events[0].workflow_execution_started_event_attributes.input.payloads[0]
    assert first.metadata["encoding"] == b"binary/encrypted"
    replayer = Replayer(
        workflows=all_workflows(),
        data_converter=converter,
        interceptors=[TracingInterceptor()],
        workflow_runner=workflow_runner(),
    )
    await replay_each(replayer, histories, seconds=60)
