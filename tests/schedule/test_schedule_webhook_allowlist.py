"""The webhook activities call only URLs under `DURABILITY_WEBHOOK_ALLOWED_URLS`: real HTTP
servers on 127.0.0.1 show that a refused URL never gets a request, a redirect is not
followed out of the list, and a refusal reaches the run's outcome as a non-retried error."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.schedule import (
    ALLOWED_URLS_ENV,
    ScheduleActivities,
    WebhookAllowlist,
    WebhookAllowlistError,
    schedule_activities,
)
from harness.http import QuietHandler
from tests.support.helpers import (
    PROJECT_ROOT,
    eventually,
    http_server,
    run_command,
    running_worker,
    start_webhook_schedule,
    subprocess_env,
)
from workflows.schedule.models import Outcome, ScheduledRunObject


@dataclass
class Server:
    """A real HTTP server on 127.0.0.1 that records every request (method, path, key) and
    answers `status` (with `location` and `body` when set)."""

    status: int = 200
    location: str | None = None
    body: bytes = b""
    url: str = ""
    port: int = 0
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    bodies: list[Any] = field(default_factory=list)


def _handler(state: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length) if length else b""
            state.requests.append((self.command, self.path, self.headers.get("Idempotency-Key")))
            state.bodies.append(json.loads(raw) if raw else None)
            self.send_response(state.status)
            if state.location is not None:
                self.send_header("Location", state.location)
            self.send_header("Content-Length", str(len(state.body)))
            self.end_headers()
            self.wfile.write(state.body)

        do_POST = do_GET = do_PUT = _answer

    return Handler


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    """Start real servers on 127.0.0.1 (free ports); all are closed after the test."""
    with ExitStack() as servers:

        def start(**settings: Any) -> Server:
            state = Server(**settings)
            state.url = servers.enter_context(http_server(_handler(state)))
            state.port = urlsplit(state.url).port or 0
            return state

        yield start


def run_to(url: str | None = None, **params: Any) -> ScheduledRunObject:
    if url is not None:
        params["url"] = url
    return ScheduledRunObject(
        object_id="o", scheduled_time=1000, due_at=1000, idempotency_key="o:1000", params=params
    )


async def post_run(
    allowlist: WebhookAllowlist | None, url: str, http: httpx.AsyncClient | None = None
) -> None:
    activities = ScheduleActivities(http, allowlist)
    await ActivityEnvironment().run(activities.run_webhook, run_to(url))


async def refusal(allowlist: WebhookAllowlist | None, url: str) -> str:
    """Call the run webhook, expect the non-retryable refusal naming the URL and the
    setting; return its message."""
    with pytest.raises(ApplicationError) as raised:
        await post_run(allowlist, url)
    error = raised.value
    assert error.type == "WebhookNotAllowed", error.message
    assert error.non_retryable
    assert url in error.message and ALLOWED_URLS_ENV in error.message
    return error.message


# --------------------------------------------------------------------------- allowed


@pytest.mark.parametrize("path", ["/hooks", "/hooks/", "/hooks/run", "/hooks/a/b?x=1"])
async def test_a_url_under_an_allowed_prefix_is_posted_with_the_idempotency_key(
    serve: Callable[..., Server], path: str
) -> None:
    server = serve()
    await post_run(WebhookAllowlist.parse(f"{server.url}/hooks"), f"{server.url}{path}")
    assert server.requests == [("POST", path, "o:1000")]
    assert server.bodies[0]["idempotency_key"] == "o:1000"


async def test_the_outcome_webhook_posts_to_an_allowed_outcome_url_and_refuses_another(
    serve: Callable[..., Server],
) -> None:
    allowed, outside = serve(), serve()
    activities = ScheduleActivities(None, WebhookAllowlist.parse(f"{allowed.url}/outcome"))
    env = ActivityEnvironment()
    complete = Outcome(status="complete")
    run = run_to(f"{outside.url}/run", outcome_url=f"{allowed.url}/outcome")
    await env.run(activities.outcome_webhook, run, complete)
    assert allowed.requests == [("POST", "/outcome", "o:1000")]

    run = run_to(f"{allowed.url}/run", outcome_url=f"{outside.url}/outcome")
    with pytest.raises(ApplicationError) as raised:
        await env.run(activities.outcome_webhook, run, complete)
    assert raised.value.type == "WebhookNotAllowed" and raised.value.non_retryable
    assert f"{outside.url}/outcome" in raised.value.message
    assert outside.requests == [] and len(allowed.requests) == 1


async def test_the_default_allowlist_is_read_from_the_environment(
    serve: Callable[..., Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = serve()
    monkeypatch.setenv(ALLOWED_URLS_ENV, f"https://hooks.example.com/, {server.url}/hooks/")
    await post_run(None, f"{server.url}/hooks/x")
    assert server.requests == [("POST", "/hooks/x", "o:1000")]


# --------------------------------------------------------------------------- refused


@pytest.mark.parametrize("value", [None, "", " , "])
async def test_an_unset_or_empty_setting_refuses_every_webhook_naming_the_setting(
    serve: Callable[..., Server], monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    server = serve()
    if value is None:
        monkeypatch.delenv(ALLOWED_URLS_ENV, raising=False)
    else:
        monkeypatch.setenv(ALLOWED_URLS_ENV, value)
    message = await refusal(None, f"{server.url}/hooks/x")
    assert f"{ALLOWED_URLS_ENV} is unset or empty" in message
    assert server.requests == []


@pytest.mark.parametrize(
    "template",
    [
        "{other}/hooks/x",  # another server: outside the list, a different port
        "http://127.0.0.1:{port}/hooksevil",  # a path next to the prefix, not under it
        "http://127.0.0.1:{port}/Hooks/x",  # paths compare case-sensitively
        "http://127.0.0.1:{port}/other",
        "http://localhost:{port}/hooks/x",  # the same server by another name
        "http://127.0.0.1.nip.io:{port}/hooks/x",  # a look-alike host (resolves to 127.0.0.1)
        "http://user:secret@127.0.0.1:{port}/hooks/x",  # user info, even on an allowed host
        "http://127.0.0.1:{port}/hooks/%2e%2e/admin",  # encoded `..`: leaves the prefix
        "http://127.0.0.1:{port}/hooks/..%5Cadmin",  # `..\\`, a segment to some servers
        "https://127.0.0.1:{port}/hooks/x",  # another scheme
    ],
)
async def test_a_url_outside_the_prefixes_is_refused_before_any_request(
    serve: Callable[..., Server], template: str
) -> None:
    allowed, other = serve(), serve()
    url = template.format(port=allowed.port, other=other.url)
    await refusal(WebhookAllowlist.parse(f"{allowed.url}/hooks"), url)
    assert allowed.requests == [] and other.requests == []


async def test_user_info_cannot_smuggle_another_host_past_a_prefix_without_a_path(
    serve: Callable[..., Server],
) -> None:
    """`http://allowed@other/` starts with the string `http://allowed`, but its host is
    `other`: the parsed URL is what counts."""
    allowed, other = serve(), serve()
    url = f"{allowed.url}@127.0.0.1:{other.port}/"
    assert url.startswith(allowed.url)
    await refusal(WebhookAllowlist.parse(allowed.url), url)
    assert allowed.requests == [] and other.requests == []


@pytest.mark.parametrize(
    "template",
    [
        "file:///etc/passwd",
        "ftp://127.0.0.1:{port}/hooks/x",
        "gopher://127.0.0.1:{port}/_GET%20/",
        "data:text/plain,hello",
        "ws://127.0.0.1:{port}/hooks/x",
    ],
)
async def test_non_http_schemes_are_refused(serve: Callable[..., Server], template: str) -> None:
    server = serve()
    url = template.format(port=server.port)
    message = await refusal(WebhookAllowlist.parse(f"{server.url}/"), url)
    assert "only http:// and https:// URLs" in message
    assert server.requests == []


@pytest.mark.parametrize(
    ("prefix", "url", "allowed"),
    [
        ("https://hooks.example.com/", "https://hooks.example.com/x", True),
        ("https://hooks.example.com/", "https://HOOKS.Example.com:443/x", True),
        ("https://Hooks.Example.com/", "https://hooks.example.com/x", True),
        ("HTTPS://hooks.example.com/", "https://hooks.example.com/x", True),
        ("https://hooks.example.com/", "https://hooks.example.com.evil.net/x", False),
        ("https://hooks.example.com/", "https://hooks.example.com@evil.net/", False),
        ("https://hooks.example.com", "https://hooks.example.com@evil.net/", False),
        ("https://hooks.example.com", "https://hooks.example.com:443@evil.net/", False),
        ("https://hooks.example.com/", "https://hooks.example.com./x", False),
        ("https://hooks.example.com/", "https://hooks.example.com:8443/x", False),
        ("https://hooks.example.com/", "http://hooks.example.com/x", False),
        ("http://hooks.example.com/", "http://hooks.example.com:80/x", True),
        ("http://hooks.example.com:80/a", "http://hooks.example.com/a/b", True),
        ("https://hooks.example.com/hooks", "https://hooks.example.com/hooks", True),
        ("https://hooks.example.com/hooks", "https://hooks.example.com/hooks?x=1", True),
        ("https://hooks.example.com/hooks", "https://hooks.example.com/hooksevil", False),
        ("https://hooks.example.com/hooks/", "https://hooks.example.com/hooks", False),
        ("https://hooks.example.com/hooks", "https://hooks.example.com/hooks%2Fx", False),
        ("https://hooks.example.com/hooks", "https://hooks.example.com/hook%73/x", False),
        ("https://hooks.example.com/hooks", "https://hooks.example.com/hooks/../admin", False),
        ("https://hooks.example.com/hooks", "https://hooks.example.com/hooks/%2E%2E/x", False),
        ("http://127.0.0.1:*/", "http://127.0.0.1:9999/x", True),
        ("http://127.0.0.1:*/", "http://127.0.0.1/x", True),
        ("http://127.0.0.1:*/", "http://localhost:9999/x", False),
        ("http://127.0.0.1:*/hooks", "http://127.0.0.1:1/other", False),
        ("http://127.0.0.1/", "http://2130706433/", False),
        ("http://127.0.0.1/", "http://0x7f.1/", False),
        ("http://[::1]:8080/", "http://[::1]:8080/x", True),
        ("http://[::1]:8080/", "http://[::1]:8081/x", False),
        ("http://bücher.example/", "http://xn--bcher-kva.example/x", True),
        ("https://a.example/,https://b.example/hooks", "https://b.example/hooks/x", True),
    ],
)
def test_matching_compares_scheme_host_port_and_path_of_the_parsed_url(
    prefix: str, url: str, allowed: bool
) -> None:
    allowlist = WebhookAllowlist.parse(prefix)
    if allowed:
        assert allowlist.check(url)
    else:
        with pytest.raises(ApplicationError) as raised:
            allowlist.check(url)
        assert raised.value.type == "WebhookNotAllowed" and raised.value.non_retryable


# --------------------------------------------------------------------------- redirects


@pytest.mark.parametrize("following_client", [False, True], ids=["own-client", "injected"])
async def test_a_redirect_out_of_the_list_is_not_followed(
    serve: Callable[..., Server], following_client: bool
) -> None:
    """Even an injected client that follows redirects does not follow a webhook's: the 3xx
    is a retryable non-2xx answer, and the server it points at gets nothing."""
    outside = serve()
    allowed = serve(status=307, location=f"{outside.url}/stolen")
    http = httpx.AsyncClient(follow_redirects=True) if following_client else None
    with pytest.raises(ApplicationError) as raised:
        await post_run(WebhookAllowlist.parse(f"{allowed.url}/"), f"{allowed.url}/hook", http)
    assert raised.value.type == "WebhookError" and not raised.value.non_retryable
    assert "answered 307 (webhook redirects are not followed)" in raised.value.message
    assert allowed.requests == [("POST", "/hook", "o:1000")]
    assert outside.requests == []


async def test_an_error_answer_puts_only_a_short_excerpt_into_the_error(
    serve: Callable[..., Server],
) -> None:
    server = serve(status=500, body=b"s" * 10_000)
    with pytest.raises(ApplicationError) as raised:
        await post_run(WebhookAllowlist.parse(server.url), f"{server.url}/x")
    assert "answered 500" in raised.value.message
    assert raised.value.message.count("s" * 200) == 1 and "s" * 201 not in raised.value.message


# --------------------------------------------------------------------------- the setting


@pytest.mark.parametrize(
    ("value", "entry"),
    [
        ("hooks.example.com", "hooks.example.com"),
        ("ftp://hooks.example.com/", "ftp://hooks.example.com/"),
        ("https://hooks.example.com/,file:///etc/", "file:///etc/"),
        ("http://", "http://"),
        ("http://user@hooks.example.com/", "http://user@hooks.example.com/"),
        ("https://hooks.example.com/?token=1", "https://hooks.example.com/?token=1"),
        ("https://hooks.example.com/#x", "https://hooks.example.com/#x"),
        ("https://hooks.example.com:99999/", "https://hooks.example.com:99999/"),
        ("https://hooks.example.com:port/", "https://hooks.example.com:port/"),
        ("http://127.0.0.1:8080:*/", "http://127.0.0.1:8080:*/"),
        ("https://hooks.example.com/a/%2e%2e/b", "https://hooks.example.com/a/%2e%2e/b"),
    ],
)
def test_a_malformed_entry_is_a_configuration_error_naming_it(value: str, entry: str) -> None:
    with pytest.raises(WebhookAllowlistError) as raised:
        WebhookAllowlist.parse(value)
    assert repr(entry) in str(raised.value) and ALLOWED_URLS_ENV in str(raised.value)


def test_a_malformed_environment_value_fails_building_the_activities(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ALLOWED_URLS_ENV, "https://hooks.example.com/, gopher://x/")
    with pytest.raises(WebhookAllowlistError, match="'gopher://x/'"):
        schedule_activities()


async def test_the_worker_exits_two_with_one_line_naming_a_malformed_entry(
    dev_server_address: str,
) -> None:
    env = subprocess_env(
        dev_server_address, **{ALLOWED_URLS_ENV: "http://127.0.0.1:8080/,127.0.0.1:9000"}
    )
    result = await run_command(
        [sys.executable, str(PROJECT_ROOT / "worker.py")], check=False, env=env
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert ALLOWED_URLS_ENV in lines[0] and "'127.0.0.1:9000'" in lines[0]
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------- end to end


async def test_a_refused_run_webhook_reaches_the_runs_outcome_as_a_non_retried_error(
    client: Client, task_queue: str, unique: str, serve: Callable[..., Server]
) -> None:
    """A schedule whose run URL is outside the list: the run errors with WebhookNotAllowed
    (non-retryable in its history), that outcome is delivered to the allowed outcome URL,
    and the run's URL never gets a request."""
    allowed, outside = serve(), serve()
    allowlist = WebhookAllowlist.parse(f"{allowed.url}/outcome")
    async with running_worker(
        client, task_queue, activities=schedule_activities(allowed_urls=allowlist)
    ):
        params = {"url": f"{outside.url}/run", "outcome_url": f"{allowed.url}/outcome"}
        handle = await start_webhook_schedule(client, task_queue, unique, params)
        await eventually(lambda: allowed.bodies)
        await handle.execute_update("cancel", {})

    delivered = allowed.bodies[0]
    assert delivered["attempt"] == 1
    outcome = delivered["outcome"]
    assert outcome["status"] == "errored"
    assert outcome["error"]["name"] == "WebhookNotAllowed"
    assert f"{outside.url}/run" in outcome["error"]["message"]
    assert ALLOWED_URLS_ENV in outcome["error"]["message"]
    assert outside.requests == []

    run = delivered["run"]
    child = client.get_workflow_handle(f"schedule-run:{unique}:{run['scheduled_time']}")
    history = await child.fetch_history()
    failed = [
        event.activity_task_failed_event_attributes.failure
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    assert len(failed) == 1
    assert failed[0].application_failure_info.type == "WebhookNotAllowed"
    assert failed[0].application_failure_info.non_retryable
