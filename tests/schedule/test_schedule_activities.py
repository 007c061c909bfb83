"""The built-in webhook activities against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.schedule import ScheduleActivities, WebhookAllowlist, schedule_activities
from harness.http import QuietHandler
from tests.support.helpers import eventually, http_server, schedule_worker, start_webhook_schedule
from workflows.schedule.models import Outcome, ScheduledRunObject


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class WebhookServer:
    """A real HTTP server recording every request; `fail[path]` answers 503 that many times."""

    url: str
    requests: list[Recorded] = field(default_factory=list)
    fail: dict[str, int] = field(default_factory=dict)


@pytest.fixture
def webhook() -> Iterator[WebhookServer]:
    state = WebhookServer(url="")

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = json.loads(self.request_body() or b"null")
            state.requests.append(Recorded("POST", self.path, dict(self.headers), body))
            if state.fail.get(self.path, 0) > 0:
                state.fail[self.path] -= 1
                self.answer(503)
            else:
                self.answer(200)

    with http_server(Handler) as url:
        state.url = url
        yield state


async def test_a_schedule_on_the_webhook_activities_posts_runs_and_outcomes_with_the_key(
    client: Client, task_queue: str, unique: str, webhook: WebhookServer
) -> None:
    webhook.fail["/outcome"] = 1
    allowlist = WebhookAllowlist.parse(f"{webhook.url}/")
    async with schedule_worker(client, task_queue, schedule_activities(allowed_urls=allowlist)):
        params = {"url": f"{webhook.url}/run", "outcome_url": f"{webhook.url}/outcome"}
        handle = await start_webhook_schedule(client, task_queue, unique, params)
        await eventually(lambda: len([r for r in webhook.requests if r.path == "/outcome"]) >= 2)
        await handle.execute_update("cancel", {})

    run_call = next(r for r in webhook.requests if r.path == "/run")
    key = run_call.body["idempotency_key"]
    assert run_call.method == "POST"
    assert run_call.headers["Idempotency-Key"] == key
    assert run_call.body == {
        "object_id": unique,
        "scheduled_time": run_call.body["scheduled_time"],
        "due_at": run_call.body["scheduled_time"],
        "idempotency_key": f"{unique}:{run_call.body['scheduled_time']}",
        "params": params,
    }
    outcome_calls = [
        r
        for r in webhook.requests
        if r.path == "/outcome" and r.body["run"]["idempotency_key"] == key
    ]
    assert [c.body["attempt"] for c in outcome_calls] == [1, 2]  # a 503 is retried
    assert all(c.headers["Idempotency-Key"] == key for c in outcome_calls)
    assert outcome_calls[1].body["outcome"] == {"status": "complete"}
    assert outcome_calls[1].body["run"] == run_call.body


RUN = ScheduledRunObject(
    object_id="o", scheduled_time=1000, due_at=1000, idempotency_key="o:1000", params={}
)


async def test_a_webhook_without_a_url_fails_for_good_naming_the_param() -> None:
    activities = ScheduleActivities(httpx.AsyncClient())
    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(activities.run_webhook, RUN)
    assert raised.value.non_retryable
    assert "params.url" in raised.value.message


async def test_a_failed_outcome_post_with_attempts_left_emits_outcome_retry(
    webhook: WebhookServer, caplog: pytest.LogCaptureFixture
) -> None:
    webhook.fail["/"] = 5
    activities = ScheduleActivities(httpx.AsyncClient(), WebhookAllowlist.parse(webhook.url))
    env = ActivityEnvironment()
    policy = RetryPolicy(
        initial_interval=timedelta(seconds=2), backoff_coefficient=3.0, maximum_attempts=4
    )
    run = RUN.model_copy(update={"params": {"url": f"{webhook.url}/"}})
    complete = Outcome(status="complete")
    caplog.set_level(logging.INFO, logger="durability.schedule.lifecycle")
    for attempt in (2, 4):
        env.info = dataclasses.replace(env.info, attempt=attempt, retry_policy=policy)
        with pytest.raises(ApplicationError, match="answered 503"):
            await env.run(activities.outcome_webhook, run, complete)

    events = [json.loads(r.getMessage()) for r in caplog.records if r.name.endswith("lifecycle")]
    assert len(events) == 1, "the last attempt is not retried, so it emits no outcome_retry"
    event = events[0]
    assert event["type"] == "outcome_retry" and event["id"] == "o:1000"
    assert event["attempt"] == 2
    assert event["error"]["name"] == "WebhookError"
    assert event["next_attempt_at"] - event["timestamp"] == 6000  # 2 s * 3^(2-1)


async def test_outcome_retry_span_events_carry_the_error_type_not_its_message(
    webhook: WebhookServer,
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    webhook.fail["/"] = 1
    activities = ScheduleActivities(httpx.AsyncClient(), WebhookAllowlist.parse(webhook.url))
    env = ActivityEnvironment()
    policy = RetryPolicy(maximum_attempts=3)
    env.info = dataclasses.replace(env.info, attempt=1, retry_policy=policy)
    run = RUN.model_copy(update={"params": {"url": f"{webhook.url}/"}})
    tracer = provider.get_tracer("test")
    with (
        tracer.start_as_current_span("RunActivity:outcome"),
        pytest.raises(ApplicationError, match="answered 503") as raised,
    ):
        await env.run(activities.outcome_webhook, run, Outcome(status="complete"))
    (span,) = exporter.get_finished_spans()
    (event,) = [e for e in span.events if e.name.endswith("outcome_retry")]
    attributes = dict(event.attributes or {})
    assert attributes["durability.error.name"] == "WebhookError"
    # The message names the webhook's URL (user data): spans leave the trust boundary.
    assert webhook.url in raised.value.message
    assert not any(webhook.url in str(value) for value in attributes.values()), attributes
