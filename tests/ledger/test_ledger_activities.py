"""Built-in ledger activities against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import email.utils
import json
from typing import Any

import pytest
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.testing import ActivityEnvironment

from activities.ledger import (
    HttpLedgerActivities,
    compile_passthrough,
    ledger_activities,
    retry_after_ms,
)
from tests.support.ledger import COMPLETE, Answer, recording_server

FROZEN: dict[str, Any] = {
    "id": "req-1",
    "ledger_id": "L",
    "operation_ids": ["a"],
    "kind": "shape.update",
    "payload": {"x": 1},
    "canvas_ids": ["c1"],
    "expected_versions": {"c1": 4},
    "protocol_version": 1,
    "idempotency_key": "req-1",
}


def answering(answer: Answer) -> Any:
    return lambda _method, _request_id, _count: answer


async def test_submit_posts_the_frozen_body_with_its_key_and_returns_the_json_status() -> None:
    with recording_server(
        answering((200, {}, {"outcome": "applied", "canonical": {"v": 5}}))
    ) as server:
        status = await HttpLedgerActivities(server.base_url).submit(FROZEN)
    assert status == {"outcome": "applied", "canonical": {"v": 5}}
    [received] = server.received
    assert (received.method, received.request_id, received.key) == ("POST", "req-1", "req-1")
    assert json.loads(received.body or "") == FROZEN


async def test_query_gets_the_request_by_id_with_its_key() -> None:
    with recording_server(answering((200, {}, {"outcome": "accepted"}))) as server:
        status = await HttpLedgerActivities(server.base_url + "/").query(FROZEN)
    assert status == {"outcome": "accepted"}
    [received] = server.received
    assert (received.method, received.request_id, received.key, received.body) == (
        "GET",
        "req-1",
        "req-1",
        None,
    )


@pytest.mark.parametrize("code", [429, 503])
async def test_busy_answers_are_unresolved_with_retry_after(code: int) -> None:
    with recording_server(answering((code, {"Retry-After": "3"}, None))) as server:
        status = await HttpLedgerActivities(server.base_url).submit(FROZEN)
    assert status == {"outcome": "unresolved", "error": f"http {code}", "retry_after_ms": 3000}


async def test_busy_without_retry_after_leaves_the_delay_to_the_ledger() -> None:
    with recording_server(answering((503, {}, None))) as server:
        status = await HttpLedgerActivities(server.base_url).query(FROZEN)
    assert status == {"outcome": "unresolved", "error": "http 503"}


@pytest.mark.parametrize("code", [401, 403])
async def test_auth_failures_block(code: int) -> None:
    with recording_server(answering((code, {}, {"error": "denied"}))) as server:
        status = await HttpLedgerActivities(server.base_url).submit(FROZEN)
    assert status["outcome"] == "unresolved"
    assert status["blocked"] is True
    assert status["error"].startswith(f"http {code}")


@pytest.mark.parametrize(
    "answer", [(404, {}, {"error": "unknown"}), (500, {}, None), (200, {}, {"outcome": "maybe"})]
)
async def test_unrecognised_answers_are_unresolved(answer: Answer) -> None:
    with recording_server(answering(answer)) as server:
        status = await HttpLedgerActivities(server.base_url).query(FROZEN)
    assert status["outcome"] == "unresolved"
    assert "blocked" not in status


async def test_network_errors_are_unresolved() -> None:
    with recording_server() as server:
        gone = server.base_url  # closed on exit: connections are refused
    status = await HttpLedgerActivities(gone).submit(FROZEN)
    assert status["outcome"] == "unresolved"
    assert status["error"].startswith("transport: ConnectError")


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    assert retry_after_ms("7") == 7000
    assert retry_after_ms(email.utils.formatdate(1_000_010, usegmt=True), now=1_000_000) == 10_000
    assert retry_after_ms(email.utils.formatdate(999_000, usegmt=True), now=1_000_000) == 0
    assert retry_after_ms("soon") is None
    assert retry_after_ms(None) is None


async def test_compile_passes_the_intent_through() -> None:
    intent = {
        "id": "a",
        "operation_type": "shape.update",
        "participants": ["c2", "c1", "c2"],
        "dependencies": [],
        "payload": {"expected_versions": {"c1": 3}, "shape": 9},
        "protocol_version": 2,
    }
    assert await compile_passthrough(intent, "req-9") == {
        "operation_id": "a",
        "request_id": "req-9",
        "kind": "shape.update",
        "payload": {"expected_versions": {"c1": 3}, "shape": 9},
        "canvas_ids": ["c1", "c2"],
        "expected_versions": {"c1": 3},
        "protocol_version": 2,
    }
    plain = await compile_passthrough({**intent, "payload": [1, 2]}, "req-9")
    assert plain["expected_versions"] == {} and plain["payload"] == [1, 2]


def test_builtin_names_and_base_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DURABILITY_LEDGER_URL", "http://127.0.0.1:1234/api/")
    activities = ledger_activities()
    names = [a.__temporal_activity_definition.name for a in activities]  # type: ignore[attr-defined]
    assert names == ["compile", "submit", "query", "http_submit", "http_query", "http_complete"]
    http = activities[3].__self__  # type: ignore[attr-defined]
    assert http._base == "http://127.0.0.1:1234/api"


# ---------------------------------------------------------------- http_complete

STATUS: dict[str, Any] = {"outcome": "applied", "canonical": {"doc": "d" * 2000}, "receipt": 9}


async def complete(base_url: str, attempt: int = 1) -> Any:
    """`http_complete` run as Temporal runs it: attempt `attempt` of at most 3."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, attempt=attempt, retry_policy=RetryPolicy(maximum_attempts=3)
    )
    return await env.run(HttpLedgerActivities(base_url).complete, FROZEN, STATUS)


@pytest.mark.parametrize(
    "answer",
    [
        (200, {}, None),
        (204, {}, None),
        (200, {}, {"ok": 1}),
        (200, {}, {"blocked": False}),
        (200, {}, [1]),
    ],
)
async def test_complete_posts_request_and_status_and_accepts(answer: Answer) -> None:
    with recording_server(answering(answer)) as server:
        assert await complete(server.base_url) is None
    [received] = server.received
    assert (received.method, received.request_id, received.key) == (COMPLETE, "req-1", "req-1")
    assert json.loads(received.body or "") == {"request": FROZEN, "status": STATUS}


async def test_complete_returns_a_blocked_answer() -> None:
    refusal = {"blocked": True, "error": "receipt mismatch", "extra": 1}
    with recording_server(answering((200, {}, refusal))) as server:
        assert await complete(server.base_url) == {"blocked": True, "error": "receipt mismatch"}
    with recording_server(answering((200, {}, {"blocked": True}))) as server:
        assert await complete(server.base_url) == {"blocked": True}


@pytest.mark.parametrize("code", [408, 425, 429, 500, 503])
async def test_complete_far_side_failures_are_retried_benign_until_the_last_attempt(
    code: int,
) -> None:
    with recording_server(answering((code, {}, {"error": "busy"}))) as server:
        with pytest.raises(ApplicationError) as retried:
            await complete(server.base_url)
        with pytest.raises(ApplicationError) as last:
            await complete(server.base_url, attempt=3)
    assert retried.value.type == last.value.type == "CompletionWebhookError"
    assert not retried.value.non_retryable and not last.value.non_retryable
    assert retried.value.category == ApplicationErrorCategory.BENIGN
    assert last.value.category != ApplicationErrorCategory.BENIGN
    assert f"answered {code}" in retried.value.message


async def test_complete_transport_errors_are_retried() -> None:
    with recording_server() as server:
        gone = server.base_url
    with pytest.raises(ApplicationError) as retried:
        await complete(gone)
    assert not retried.value.non_retryable
    assert "ConnectError" in retried.value.message


@pytest.mark.parametrize(
    ("answer", "shown"),
    [
        ((404, {}, {"error": "no such receipt"}), "answered 404"),
        ((400, {}, None), "answered 400"),
        ((302, {"Location": "/elsewhere"}, None), "answered 302"),
        ((200, {}, {"blocked": "yes"}), "expected"),
        ((200, {}, {"blocked": True, "error": 7}), "expected"),
    ],
)
async def test_complete_other_answers_are_not_retried(answer: Answer, shown: str) -> None:
    with recording_server(answering(answer)) as server, pytest.raises(ApplicationError) as refused:
        await complete(server.base_url)
    assert refused.value.type == "CompletionWebhookError" and refused.value.non_retryable
    assert shown in refused.value.message
