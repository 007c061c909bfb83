"""What a worker logs when a webhook fails, against a real HTTP server on 127.0.0.1.

A far side answering 503 is an expected, retried failure: one warning line per attempt, no
SDK traceback. A refused URL (non-retryable) and a 404 (a request the far side says is
wrong) are still logged by the SDK with their traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from temporalio.client import Client

from activities.schedule import WebhookAllowlist, schedule_activities
from harness.http import QuietHandler
from tests.support.helpers import eventually, http_server, schedule_worker, start_webhook_schedule

SDK_ACTIVITY_LOGGER = "temporalio.activity"


class Far:
    """The far side: `/busy` answers 503 to its first `busy_answers` POSTs, `/gone` always
    404, anything else 200; `attempts` counts the POSTs per path."""

    busy_answers = 2

    def __init__(self) -> None:
        self.attempts: dict[str, int] = {}


@pytest.fixture
def far() -> Iterator[tuple[Far, str]]:
    state = Far()

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            self.request_body()
            count = state.attempts[self.path] = state.attempts.get(self.path, 0) + 1
            if self.path == "/busy" and count <= state.busy_answers:
                self.answer(503)
            elif self.path == "/gone":
                self.answer(404)
            else:
                self.answer(200)

    with http_server(Handler) as url:
        yield state, url


def failures_logged_with_traceback(
    caplog: pytest.LogCaptureFixture, text: str, attempt: int | None = None
) -> list[str]:
    """The SDK's "Completing activity as failed" lines (of `attempt`, when given) logged at
    INFO or above with the traceback of an error whose message holds `text`."""
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == SDK_ACTIVITY_LOGGER
        and record.levelno >= logging.INFO
        and record.exc_info is not None
        and text in str(record.exc_info[1])
        and (attempt is None or f"'attempt': {attempt}," in record.getMessage())
    ]


async def test_a_503_is_retried_with_one_line_per_attempt_and_no_traceback(
    client: Client,
    task_queue: str,
    unique: str,
    far: tuple[Far, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    state, url = far
    caplog.set_level(logging.INFO)
    allowlist = WebhookAllowlist.parse(f"{url}/")
    async with schedule_worker(client, task_queue, schedule_activities(allowed_urls=allowlist)):
        params = {"url": f"{url}/run", "outcome_url": f"{url}/busy"}
        handle = await start_webhook_schedule(client, task_queue, unique, params)
        await eventually(lambda: state.attempts.get("/busy", 0) > state.busy_answers)
        await handle.execute_update("cancel", {})

    assert state.attempts["/busy"] > state.busy_answers  # retried after each 503
    assert failures_logged_with_traceback(caplog, "answered 503") == []
    retried = [
        r.getMessage()
        for r in caplog.records
        if r.name == "durability.schedule" and "answered 503" in r.getMessage()
    ]
    assert len(retried) == state.busy_answers, retried
    assert all(r.endswith("; retried)") and "\n" not in r for r in retried), retried
    assert "Traceback" not in caplog.text


async def test_a_refused_url_and_a_404_are_still_logged_with_their_traceback(
    client: Client,
    task_queue: str,
    unique: str,
    far: tuple[Far, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    state, url = far
    caplog.set_level(logging.INFO)
    allowlist = WebhookAllowlist.parse(f"{url}/run,{url}/gone")
    async with schedule_worker(client, task_queue, schedule_activities(allowed_urls=allowlist)):
        refused = await start_webhook_schedule(
            client, task_queue, f"{unique}-refused", {"url": f"{url}/elsewhere"}
        )
        gone = await start_webhook_schedule(
            client,
            task_queue,
            f"{unique}-gone",
            {"url": f"{url}/run", "outcome_url": f"{url}/gone"},
        )
        await eventually(lambda: failures_logged_with_traceback(caplog, "refused"))
        # Attempt 1 of the outcome is retried: a 404 is logged as any failure nonetheless.
        await eventually(lambda: failures_logged_with_traceback(caplog, "answered 404", 1))
        for handle in (refused, gone):
            await handle.execute_update("cancel", {})

    assert "/elsewhere" not in state.attempts  # refused before any request
